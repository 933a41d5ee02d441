# GoogleTest sources of tests/core, appended to QKV_UNIT_TESTS (relative to tests/).
list(APPEND QKV_UNIT_TESTS
  core/test_dtype.cpp
  core/test_memory.cpp
  core/test_memory_limit.cpp
  core/test_parallel.cpp
  core/test_tensor.cpp
  core/test_threads_rng_cpu.cpp
)
