# Sources of src/nn, appended to QKV_SOURCES (paths relative to the project root).
# One file per module; each holds the module's forward and its backward.
list(APPEND QKV_SOURCES
  src/nn/onednn.cpp
  src/nn/precision.cpp
  src/nn/elementwise.cpp
  src/nn/dropout.cpp
  src/nn/linear.cpp
  src/nn/layer_norm.cpp
  src/nn/activation.cpp
  src/nn/embedding.cpp
  src/nn/positional.cpp
  src/nn/state_dict.cpp
  src/nn/kv_cache.cpp
  src/nn/multihead_attention.cpp
  src/nn/feed_forward.cpp
  src/nn/encoder_layer.cpp
  src/nn/decoder_layer.cpp
  src/nn/transformer.cpp
  src/nn/vector_attention.cpp
  src/nn/kernels/pointwise.cpp
  src/nn/kernels/pointwise_simd128.cpp
  src/nn/kernels/pointwise_avx2.cpp
  src/nn/kernels/pointwise_avx512.cpp
)
# The pointwise kernels are plain loops written to vectorise: √ needs no errno check and
# selects may become blends (qkv never reads errno or the floating-point exception flags;
# neither option changes a value). Set here, at the top directory, for the library's own
# objects; the sanitizer build (tests/) compiles them without: slower, the same bits.
set_source_files_properties(
  src/nn/kernels/pointwise_simd128.cpp src/nn/kernels/pointwise_avx2.cpp
  src/nn/kernels/pointwise_avx512.cpp
  PROPERTIES COMPILE_OPTIONS "-fno-math-errno;-fno-trapping-math")
