#include "attention/cuda/host_common.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace qkv::cuda::detail {

qkv::detail::AttentionProblem gpu_problem(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionOptions& options, const char* where) {
  QKV_CHECK(available(), where << unavailable_reason());
  qkv::detail::AttentionProblem p = qkv::detail::make_problem(q, k, v, options);
  QKV_CHECK_TYPE(q.dtype() == DType::bf16 || q.dtype() == DType::f16,
                 where << "q, k and v must be bf16 or f16 on the GPU, got " << dtype_name(q.dtype()));
  QKV_CHECK(!p.has_mask, where << "mask tensors are not supported on the GPU (use causal, window or "
                                  "key_lengths)");
  QKV_CHECK(p.dropout_p == 0.0, where << "dropout is not supported on the GPU, got dropout_p " << p.dropout_p);
  QKV_CHECK(p.Dk == p.Dv, where << "Dk (" << p.Dk << ") and Dv (" << p.Dv << ") must be equal on the GPU");
  QKV_CHECK(p.Dk == 64 || p.Dk == 128 || p.Dk == 256,
            where << "head dim must be 64, 128 or 256 on the GPU, got " << p.Dk);
  return p;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

void DeviceBuffer::allocate(std::size_t bytes, const char* what) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&data_, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky: clear it for later calls
    data_ = nullptr;
    throw Error(std::string("cuda: cudaMalloc of ") + what + " (" + std::to_string(bytes) +
                    " bytes): " + cudaGetErrorString(e),
                ErrorKind::memory);
  }
}

void upload(const DeviceBuffer& dst, const void* src, std::size_t bytes, const char* what) {
  if (bytes > 0) check_cuda(cudaMemcpy(dst.get(), src, bytes, cudaMemcpyHostToDevice), what);
}

void download(void* dst, const DeviceBuffer& src, std::size_t bytes, const char* what) {
  if (bytes > 0) check_cuda(cudaMemcpy(dst, src.get(), bytes, cudaMemcpyDeviceToHost), what);
}

DeviceAttention upload_inputs(const qkv::detail::AttentionProblem& p, const AttentionOptions& options,
                              const Tensor& q, const Tensor& k, const Tensor& v, DeviceInputs& buffers) {
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  buffers.q.allocate(qc.nbytes(), "q");
  buffers.k.allocate(kc.nbytes(), "k");
  buffers.v.allocate(vc.nbytes(), "v");
  upload(buffers.q, qc.data(), qc.nbytes(), "cudaMemcpy(q)");
  upload(buffers.k, kc.data(), kc.nbytes(), "cudaMemcpy(k)");
  upload(buffers.v, vc.data(), vc.nbytes(), "cudaMemcpy(v)");
  if (!options.key_lengths.empty()) {  // p.key_lengths holds Lk for every batch otherwise
    const std::vector<std::int32_t> lengths(p.key_lengths.begin(), p.key_lengths.end());
    buffers.key_lengths.allocate(lengths.size() * sizeof(std::int32_t), "key_lengths");
    upload(buffers.key_lengths, lengths.data(), lengths.size() * sizeof(std::int32_t), "cudaMemcpy(key_lengths)");
  }
  buffers.alibi_slopes.allocate(p.alibi_slopes.size() * sizeof(float), "alibi_slopes");
  upload(buffers.alibi_slopes, p.alibi_slopes.data(), p.alibi_slopes.size() * sizeof(float), "cudaMemcpy(alibi)");

  const std::int64_t D = p.Dk;
  DeviceAttention a;
  a.dtype = q.dtype() == DType::bf16 ? ElementType::bf16 : ElementType::f16;
  a.q = buffers.q.get(), a.k = buffers.k.get(), a.v = buffers.v.get();
  a.q_strides = contiguous_strides(p.Hq, p.Lq, D);
  a.k_strides = a.v_strides = contiguous_strides(p.Hkv, p.Lk, D);
  a.out_strides = contiguous_strides(p.Hq, p.Lq, D);
  a.B = p.B, a.Hq = p.Hq, a.Hkv = p.Hkv, a.Lq = p.Lq, a.Lk = p.Lk, a.D = D;
  a.scale = static_cast<float>(p.scale);
  a.causal = p.causal;
  a.alignment = p.alignment;
  if (p.has_window) a.window_left = p.window_left, a.window_right = p.window_right;
  a.key_lengths = buffers.key_lengths.as<const std::int32_t>();
  a.alibi_slopes = buffers.alibi_slopes.as<const float>();
  a.softcap = p.has_softcap ? static_cast<float>(p.softcap) : 0.0f;
  return a;
}

}  // namespace qkv::cuda::detail
