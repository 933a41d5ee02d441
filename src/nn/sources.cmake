# Sources of src/nn, appended to QKV_SOURCES (paths relative to the project root).
list(APPEND QKV_SOURCES
  src/nn/linear.cpp
  src/nn/positional.cpp
  src/nn/mha.cpp
  src/nn/blocks.cpp
  src/nn/vector_attention.cpp
  src/nn/backward.cpp
  src/nn/train_layers.cpp
  src/nn/train.cpp
)
