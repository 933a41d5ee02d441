// The host form of the CUDA backward: qkv::Tensor inputs in host memory, validated as
// qkv::attention_backward validates them (problem.h), copied to the GPU, computed by the
// device form (backward.cu), copied back as f32 gradients. What the GPU kernels do not do
// is refused by name before any copy.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attention/cuda/check.h"
#include "attention/problem.h"

namespace qkv::cuda {
namespace {

using detail::check_cuda;

constexpr const char* kWhere = "qkv::cuda::attention_backward: ";

// One cudaMalloc'd block, freed when it goes out of scope (also when a check throws).
struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  void allocate(std::size_t bytes, const char* what) {
    if (bytes == 0) return;
    const cudaError_t e = cudaMalloc(&ptr, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky: clear it for later calls
      ptr = nullptr;
      throw Error(std::string(kWhere) + "cudaMalloc of " + what + " (" + std::to_string(bytes) +
                      " bytes): " + cudaGetErrorString(e),
                  ErrorKind::memory);
    }
  }
  template <class P>
  P* as() const {
    return static_cast<P*>(ptr);
  }
};

// Strides of a contiguous (B, H, L, D) tensor.
Strides contiguous_strides(std::int64_t H, std::int64_t L, std::int64_t D) {
  return Strides{H * L * D, L * D, D};
}

}  // namespace

AttentionGradients attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& out, const Tensor& lse,
                                      const AttentionOptions& options) {
  QKV_CHECK(available(), kWhere << unavailable_reason());
  // The CPU path's validation (shapes, options) first, then what the GPU does not support.
  const qkv::detail::AttentionProblem pr = qkv::detail::make_problem(q, k, v, options);
  QKV_CHECK_TYPE(q.dtype() == DType::bf16 || q.dtype() == DType::f16,
                 kWhere << "q, k and v must be bf16 or f16 on the GPU, got " << dtype_name(q.dtype()));
  QKV_CHECK(pr.Dk == pr.Dv, kWhere << "Dk and Dv must be equal on the GPU, got " << pr.Dk << " and " << pr.Dv);
  QKV_CHECK(pr.Dk == 64 || pr.Dk == 128 || pr.Dk == 256,
            kWhere << "head dim must be 64, 128 or 256 on the GPU, got " << pr.Dk);
  QKV_CHECK(!pr.has_mask, kWhere << "masks given as tensors are not supported on the GPU");
  QKV_CHECK(pr.dropout_p == 0.0, kWhere << "dropout is not supported on the GPU");
  const Shape out_shape{pr.B, pr.Hq, pr.Lq, pr.Dv};
  const Shape lse_shape{pr.B, pr.Hq, pr.Lq};
  for (const auto& [t, name] : {std::pair{&dout, "dout"}, std::pair{&out, "out"}}) {
    QKV_CHECK(t->defined(), kWhere << name << " is undefined");
    QKV_CHECK(t->shape() == out_shape, kWhere << name << " must have the output's shape (B, Hq, Lq, Dv) = "
                                             << shape_to_string(out_shape) << ", got " << t->shape_string());
    QKV_CHECK_TYPE(is_floating(t->dtype()), kWhere << name << " must be f32, bf16 or f16, got "
                                                   << dtype_name(t->dtype()));
  }
  QKV_CHECK(lse.defined(), kWhere << "lse is undefined (run the forward with return_lse = true)");
  QKV_CHECK(lse.shape() == lse_shape, kWhere << "lse must have shape (B, Hq, Lq) = " << shape_to_string(lse_shape)
                                             << ", got " << lse.shape_string());
  QKV_CHECK_TYPE(lse.dtype() == DType::f32, kWhere << "lse must be f32, got " << dtype_name(lse.dtype()));
  QKV_CHECK(pr.B <= 65535 && pr.Hkv <= 65535, kWhere << "B and Hkv must be at most 65535 on the GPU");
  for (float s : pr.alibi_slopes)
    QKV_CHECK(std::isfinite(s), kWhere << "ALiBi slopes must be finite on the GPU");

  // Contiguous copies in q's dtype (out and dout may come in another floating dtype).
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const Tensor oc = out.dtype() == q.dtype() ? out.contiguous() : out.to(q.dtype());
  const Tensor doc = dout.dtype() == q.dtype() ? dout.contiguous() : dout.to(q.dtype());
  const Tensor lc = lse.contiguous();

  AttentionGradients g;
  g.dq = Tensor::empty({pr.B, pr.Hq, pr.Lq, pr.Dk});   // (B, Hq, Lq, Dk)
  g.dk = Tensor::empty({pr.B, pr.Hkv, pr.Lk, pr.Dk});  // (B, Hkv, Lk, Dk)
  g.dv = Tensor::empty({pr.B, pr.Hkv, pr.Lk, pr.Dv});  // (B, Hkv, Lk, Dv)

  DeviceBuffer dq_, dk_, dv_, q_, k_, v_, o_, do_, lse_, kl_, alibi_;
  q_.allocate(qc.nbytes(), "q");
  k_.allocate(kc.nbytes(), "k");
  v_.allocate(vc.nbytes(), "v");
  o_.allocate(oc.nbytes(), "out");
  do_.allocate(doc.nbytes(), "dout");
  lse_.allocate(lc.nbytes(), "lse");
  dq_.allocate(g.dq.nbytes(), "dq");
  dk_.allocate(g.dk.nbytes(), "dk");
  dv_.allocate(g.dv.nbytes(), "dv");
  auto upload = [](DeviceBuffer& d, const void* src, std::size_t bytes, const char* what) {
    if (bytes) check_cuda(cudaMemcpy(d.ptr, src, bytes, cudaMemcpyHostToDevice), what);
  };
  upload(q_, qc.data(), qc.nbytes(), "copy of q to the GPU");
  upload(k_, kc.data(), kc.nbytes(), "copy of k to the GPU");
  upload(v_, vc.data(), vc.nbytes(), "copy of v to the GPU");
  upload(o_, oc.data(), oc.nbytes(), "copy of out to the GPU");
  upload(do_, doc.data(), doc.nbytes(), "copy of dout to the GPU");
  upload(lse_, lc.data(), lc.nbytes(), "copy of lse to the GPU");
  std::vector<std::int32_t> key_lengths;
  if (!options.key_lengths.empty()) {
    for (std::int64_t n : pr.key_lengths) key_lengths.push_back(static_cast<std::int32_t>(n));
    kl_.allocate(key_lengths.size() * sizeof(std::int32_t), "key_lengths");
    upload(kl_, key_lengths.data(), key_lengths.size() * sizeof(std::int32_t), "copy of key_lengths to the GPU");
  }
  if (!pr.alibi_slopes.empty()) {
    alibi_.allocate(pr.alibi_slopes.size() * sizeof(float), "alibi_slopes");
    upload(alibi_, pr.alibi_slopes.data(), pr.alibi_slopes.size() * sizeof(float), "copy of alibi_slopes to the GPU");
  }

  const std::int64_t D = pr.Dk;
  if (g.dq.numel() + g.dk.numel() + g.dv.numel() > 0) {
    DeviceAttentionBackward a;
    DeviceAttention& f = a.forward;
    f.dtype = q.dtype() == DType::bf16 ? ElementType::bf16 : ElementType::f16;
    f.q = q_.ptr;
    f.k = k_.ptr;
    f.v = v_.ptr;
    f.out = o_.ptr;
    f.lse = lse_.as<float>();
    f.q_strides = contiguous_strides(pr.Hq, pr.Lq, D);
    f.k_strides = contiguous_strides(pr.Hkv, pr.Lk, D);
    f.v_strides = contiguous_strides(pr.Hkv, pr.Lk, D);
    f.out_strides = contiguous_strides(pr.Hq, pr.Lq, D);
    f.B = pr.B;
    f.Hq = pr.Hq;
    f.Hkv = pr.Hkv;
    f.Lq = pr.Lq;
    f.Lk = pr.Lk;
    f.D = D;
    f.scale = static_cast<float>(pr.scale);
    f.causal = pr.causal;
    f.alignment = pr.alignment;
    f.window_left = pr.has_window ? pr.window_left : -1;
    f.window_right = pr.has_window ? pr.window_right : -1;
    f.key_lengths = kl_.as<std::int32_t>();
    f.alibi_slopes = alibi_.as<float>();
    f.softcap = pr.has_softcap ? static_cast<float>(pr.softcap) : 0.0f;
    a.dout = do_.ptr;
    a.dout_strides = f.out_strides;
    a.dq = dq_.as<float>();
    a.dk = dk_.as<float>();
    a.dv = dv_.as<float>();
    // Poison: every element the kernels fail to write comes back NaN (0xFF bytes).
    for (DeviceBuffer* d : {&dq_, &dk_, &dv_})
      if (d->ptr) check_cuda(cudaMemset(d->ptr, 0xFF, d == &dq_ ? g.dq.nbytes() : g.dk.nbytes()), "poisoning the gradients");
    attention_backward(a, nullptr);
    check_cuda(cudaDeviceSynchronize(), "backward kernels");
  }
  auto download = [](Tensor& t, const DeviceBuffer& d, const char* what) {
    if (t.nbytes()) check_cuda(cudaMemcpy(t.data(), d.ptr, t.nbytes(), cudaMemcpyDeviceToHost), what);
  };
  download(g.dq, dq_, "copy of dq from the GPU");
  download(g.dk, dk_, "copy of dk from the GPU");
  download(g.dv, dv_, "copy of dv from the GPU");
  return g;
}

}  // namespace qkv::cuda
