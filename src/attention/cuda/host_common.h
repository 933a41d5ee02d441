// What the host forms of the CUDA forward (host.cpp) and backward (host_backward.cpp)
// share: the checks of what the GPU kernels support, device buffers, and the upload of
// q, k, v and the per-call lists into a DeviceAttention over contiguous copies.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/cuda/check.h"
#include "attention/problem.h"

namespace qkv::cuda::detail {

// The CPU path's validation (make_problem), then what the GPU kernels do not do, refused by
// name before any copy: `where` starts every message ("qkv::cuda::attention: ").
qkv::detail::AttentionProblem gpu_problem(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionOptions& options, const char* where);

// One cudaMalloc'd block, freed when it goes out of scope (also when a check throws). A
// failed allocation is qkv::Error of ErrorKind::memory naming `what` and the size.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, const char* what) { allocate(bytes, what); }
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void allocate(std::size_t bytes, const char* what);  // nothing for 0 bytes (get() stays null)
  void* get() const { return data_; }
  template <class P>
  P* as() const {
    return static_cast<P*>(data_);
  }

 private:
  void* data_ = nullptr;
};

// Host -> device and device -> host copies of `bytes` (none for 0), CUDA errors as
// qkv::Error naming `what`.
void upload(const DeviceBuffer& dst, const void* src, std::size_t bytes, const char* what);
void download(void* dst, const DeviceBuffer& src, std::size_t bytes, const char* what);

// The inputs of one call on the GPU: contiguous copies of q, k and v, the key lengths (when
// the options give them) and the ALiBi slopes.
struct DeviceInputs {
  DeviceBuffer q, k, v, key_lengths, alibi_slopes;
};

// Uploads q, k and v (contiguous, in their dtype) and the problem's lists into `buffers`
// and returns the DeviceAttention that reads them: every field but out and lse.
DeviceAttention upload_inputs(const qkv::detail::AttentionProblem& p, const AttentionOptions& options,
                              const Tensor& q, const Tensor& k, const Tensor& v, DeviceInputs& buffers);

// Strides of a contiguous (B, H, L, D) tensor.
inline Strides contiguous_strides(std::int64_t H, std::int64_t L, std::int64_t D) {
  return Strides{H * L * D, L * D, D};
}

}  // namespace qkv::cuda::detail
