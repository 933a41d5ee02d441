# Sources of src/attention, appended to QKV_SOURCES (paths relative to the project root).
# The kernel variants for x86-64 ISAs compile to nothing elsewhere (tests/cross builds the
# rest for aarch64).
list(APPEND QKV_SOURCES
  src/attention/problem.cpp
  src/attention/reference.cpp
  src/attention/kernels/flash_simd128.cpp
  src/attention/kernels/flash_avx2.cpp
  src/attention/kernels/flash_avx512.cpp
  src/attention/kernels/flash_avx512_bf16.cpp
  src/attention/kernels/flash_amx.cpp
  src/attention/kernels/flash_amx_emulated.cpp
  src/attention/kernels/dispatch.cpp
  src/attention/kernels/flash_backward_simd128.cpp
  src/attention/kernels/flash_backward_avx2.cpp
  src/attention/kernels/flash_backward_avx512.cpp
  src/attention/attention.cpp
  src/attention/backward_reference.cpp
  src/attention/backward.cpp
)
