// Host-side helpers of the CUDA backend: CUDA errors as qkv::Error, and the internal entry
// points the tests and the C ABI (capi.cpp) reach beyond include/qkv/cuda.h.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "qkv/cuda.h"
#include "qkv/error.h"

namespace qkv::cuda::detail {

// Throws qkv::Error "cuda: <what>: <CUDA's message>" unless `status` is cudaSuccess.
inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string("cuda: ") + what + ": " + cudaGetErrorString(status));
  }
}

// Throws qkv::Error naming the first argument of `args` the kernels cannot take (sizes,
// head dim, strides and pointer alignment, option ranges). device.cpp.
void check_arguments(const DeviceAttention& args);

// attention_forward with the number of key splits chosen by the caller: 0 = automatic
// (the heuristic, or QKV_CUDA_SPLITS when set), 1 = no split, n > 1 = split-KV with n
// partial results and a combine pass. forward.cu.
void attention_forward_splits(const DeviceAttention& args, int splits, void* stream);

}  // namespace qkv::cuda::detail
