# Sources of src/attention, appended to QKV_ATTENTION_SOURCES (the engine library; paths
# relative to the project root).
# The kernel variants for x86-64 ISAs compile to nothing elsewhere (tests/cross builds the
# rest for aarch64).
list(APPEND QKV_ATTENTION_SOURCES
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

# The CUDA backend (include/qkv/cuda.h; top-level CMakeLists.txt decides QKV_CUDA_ENABLED).
# Device part: kernels, device queries, argument checks — only the CUDA runtime and qkv's
# headers (libqkv_cuda.so is made of it). Host part: the host forms over qkv::Tensor.
if(QKV_CUDA_ENABLED)
  set(QKV_CUDA_DEVICE_SOURCES
    src/attention/cuda/forward.cu
    src/attention/cuda/forward_sm90.cu
    src/attention/cuda/backward.cu
    src/attention/cuda/device.cpp
  )
  set(QKV_CUDA_HOST_SOURCES
    src/attention/cuda/host_common.cpp
    src/attention/cuda/host.cpp
    src/attention/cuda/host_backward.cpp
  )
else()
  list(APPEND QKV_ATTENTION_SOURCES src/attention/cuda/unavailable.cpp)
endif()
