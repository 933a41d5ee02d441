// The host form of the CUDA forward: qkv::Tensor inputs in host memory, validated as
// qkv::attention validates them (problem.h), copied to the GPU, computed by forward.cu,
// copied back. What the GPU kernels do not do is refused by name before any copy.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "attention/cuda/check.h"
#include "attention/problem.h"

namespace qkv::cuda {
namespace {

// One cudaMalloc'd block, freed when it goes out of scope (also when a check throws).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) {
    if (bytes > 0) detail::check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

void upload(const DeviceBuffer& dst, const void* src, std::size_t bytes, const char* what) {
  if (bytes > 0) detail::check_cuda(cudaMemcpy(dst.get(), src, bytes, cudaMemcpyHostToDevice), what);
}

// Strides of a contiguous (B, H, L, D) tensor.
Strides contiguous_strides(std::int64_t H, std::int64_t L, std::int64_t D) {
  return Strides{H * L * D, L * D, D};
}

}  // namespace

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options) {
  const char* f = "qkv::cuda::attention: ";
  QKV_CHECK(available(), f << unavailable_reason());
  validate_attention(q, k, v, options);
  QKV_CHECK_TYPE(q.dtype() == DType::bf16 || q.dtype() == DType::f16,
                 f << "q, k and v must be bf16 or f16 on the GPU, got " << dtype_name(q.dtype()));
  QKV_CHECK(!options.mask.defined(), f << "mask tensors are not supported on the GPU (use causal, "
                                          "window or key_lengths)");
  QKV_CHECK(options.dropout_p == 0.0, f << "dropout is not supported on the GPU, got dropout_p "
                                        << options.dropout_p);
  QKV_CHECK(!options.return_probs, f << "return_probs is not supported on the GPU");
  const qkv::detail::AttentionProblem p = qkv::detail::make_problem(q, k, v, options);
  QKV_CHECK(p.Dk == p.Dv, f << "Dk (" << p.Dk << ") and Dv (" << p.Dv << ") must be equal on the GPU");
  QKV_CHECK(p.Dk == 64 || p.Dk == 128 || p.Dk == 256,
            f << "head dim must be 64, 128 or 256 on the GPU, got " << p.Dk);

  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const std::int64_t D = p.Dk;
  AttentionResult result;
  result.out = Tensor::empty({p.B, p.Hq, p.Lq, D}, q.dtype());  // (B, Hq, Lq, D)
  if (options.return_lse) result.lse = Tensor::empty({p.B, p.Hq, p.Lq}, DType::f32);  // (B, Hq, Lq)

  DeviceBuffer dq(qc.nbytes()), dk(kc.nbytes()), dv(vc.nbytes()), dout(result.out.nbytes());
  DeviceBuffer dlse(options.return_lse ? result.lse.nbytes() : 0);
  std::vector<std::int32_t> lengths(p.key_lengths.begin(), p.key_lengths.end());
  DeviceBuffer dlengths(options.key_lengths.empty() ? 0 : lengths.size() * sizeof(std::int32_t));
  DeviceBuffer dslopes(p.alibi_slopes.size() * sizeof(float));
  upload(dq, qc.data(), qc.nbytes(), "cudaMemcpy(q)");
  upload(dk, kc.data(), kc.nbytes(), "cudaMemcpy(k)");
  upload(dv, vc.data(), vc.nbytes(), "cudaMemcpy(v)");
  if (dlengths.get() != nullptr) {
    upload(dlengths, lengths.data(), lengths.size() * sizeof(std::int32_t), "cudaMemcpy(key_lengths)");
  }
  upload(dslopes, p.alibi_slopes.data(), p.alibi_slopes.size() * sizeof(float), "cudaMemcpy(alibi)");

  DeviceAttention a;
  a.dtype = q.dtype() == DType::bf16 ? ElementType::bf16 : ElementType::f16;
  a.q = dq.get(), a.k = dk.get(), a.v = dv.get(), a.out = dout.get();
  a.lse = static_cast<float*>(dlse.get());
  a.q_strides = contiguous_strides(p.Hq, p.Lq, D);
  a.k_strides = a.v_strides = contiguous_strides(p.Hkv, p.Lk, D);
  a.out_strides = contiguous_strides(p.Hq, p.Lq, D);
  a.B = p.B, a.Hq = p.Hq, a.Hkv = p.Hkv, a.Lq = p.Lq, a.Lk = p.Lk, a.D = D;
  a.scale = static_cast<float>(p.scale);
  a.causal = p.causal;
  a.alignment = p.alignment;
  if (p.has_window) a.window_left = p.window_left, a.window_right = p.window_right;
  a.key_lengths = static_cast<const std::int32_t*>(dlengths.get());
  a.alibi_slopes = static_cast<const float*>(dslopes.get());
  a.softcap = p.has_softcap ? static_cast<float>(p.softcap) : 0.0f;
  // Poison: every bit set is NaN in bf16, f16 and f32, so an element the kernels fail to
  // write shows up in the tests (tests/cuda) instead of passing as stale memory.
  if (result.out.nbytes() > 0) detail::check_cuda(cudaMemset(dout.get(), 0xff, result.out.nbytes()), "cudaMemset(out)");
  if (dlse.get() != nullptr) detail::check_cuda(cudaMemset(dlse.get(), 0xff, result.lse.nbytes()), "cudaMemset(lse)");
  attention_forward(a, nullptr);
  detail::check_cuda(cudaDeviceSynchronize(), "forward attention kernel");
  if (result.out.nbytes() > 0) {
    detail::check_cuda(cudaMemcpy(result.out.data(), dout.get(), result.out.nbytes(), cudaMemcpyDeviceToHost),
                       "cudaMemcpy(out)");
  }
  if (options.return_lse && result.lse.nbytes() > 0) {
    detail::check_cuda(cudaMemcpy(result.lse.data(), dlse.get(), result.lse.nbytes(), cudaMemcpyDeviceToHost),
                       "cudaMemcpy(lse)");
  }
  return result;
}

}  // namespace qkv::cuda
