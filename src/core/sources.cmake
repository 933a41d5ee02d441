# Sources of src/core, appended to QKV_ATTENTION_SOURCES (the engine library; paths relative
# to the project root).
list(APPEND QKV_ATTENTION_SOURCES
  src/core/dtype.cpp
  src/core/tensor.cpp
  src/core/cpu.cpp
  src/core/threads.cpp
  src/core/rng.cpp
  src/core/memory.cpp
)
