# GoogleTest sources of tests/nn, appended to QKV_UNIT_TESTS (relative to tests/): one
# file per module of src/nn, its forward and backward together.
list(APPEND QKV_UNIT_TESTS
  nn/test_elementwise.cpp
  nn/test_dropout.cpp
  nn/test_linear.cpp
  nn/test_precision.cpp  # bf16 products (ProductPrecision)
  nn/test_layer_norm.cpp
  nn/test_activation.cpp
  nn/test_pointwise.cpp  # the pointwise kernels of a training step, every ISA against its naive twin
  nn/test_embedding.cpp
  nn/test_positional.cpp
  nn/test_multihead_attention.cpp
  nn/test_feed_forward.cpp
  nn/test_transformer.cpp
  nn/test_vector_attention.cpp
  nn/test_dtypes.cpp  # f64 refused by every entry point
  nn/test_parallel_regions.cpp  # every region of the library, attention's included
)
