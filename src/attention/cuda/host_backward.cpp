// The host form of the CUDA backward: qkv::Tensor inputs in host memory, validated as
// qkv::attention_backward validates them (problem.h), copied to the GPU, computed by the
// device form (backward.cu), copied back as f32 gradients. What the GPU kernels do not do
// is refused by name before any copy (host_common.h).
#include <cuda_runtime_api.h>

#include <cmath>
#include <utility>

#include "attention/cuda/host_common.h"

namespace qkv::cuda {

AttentionGradients attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& out, const Tensor& lse,
                                      const AttentionOptions& options) {
  const char* kWhere = "qkv::cuda::attention_backward: ";
  const qkv::detail::AttentionProblem pr = detail::gpu_problem(q, k, v, options, kWhere);
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
  const Tensor oc = out.dtype() == q.dtype() ? out.contiguous() : out.to(q.dtype());
  const Tensor doc = dout.dtype() == q.dtype() ? dout.contiguous() : dout.to(q.dtype());
  const Tensor lc = lse.contiguous();

  AttentionGradients g;
  g.dq = Tensor::empty({pr.B, pr.Hq, pr.Lq, pr.Dk});   // (B, Hq, Lq, Dk)
  g.dk = Tensor::empty({pr.B, pr.Hkv, pr.Lk, pr.Dk});  // (B, Hkv, Lk, Dk)
  g.dv = Tensor::empty({pr.B, pr.Hkv, pr.Lk, pr.Dv});  // (B, Hkv, Lk, Dv)

  detail::DeviceInputs inputs;
  DeviceAttentionBackward a;
  a.forward = detail::upload_inputs(pr, options, q, k, v, inputs);
  detail::DeviceBuffer o_(oc.nbytes(), "out"), do_(doc.nbytes(), "dout"), lse_(lc.nbytes(), "lse");
  detail::DeviceBuffer dq_(g.dq.nbytes(), "dq"), dk_(g.dk.nbytes(), "dk"), dv_(g.dv.nbytes(), "dv");
  detail::upload(o_, oc.data(), oc.nbytes(), "copy of out to the GPU");
  detail::upload(do_, doc.data(), doc.nbytes(), "copy of dout to the GPU");
  detail::upload(lse_, lc.data(), lc.nbytes(), "copy of lse to the GPU");

  if (g.dq.numel() + g.dk.numel() + g.dv.numel() > 0) {
    a.forward.out = o_.get();
    a.forward.lse = lse_.as<float>();
    a.dout = do_.get();
    a.dout_strides = a.forward.out_strides;
    a.dq = dq_.as<float>();
    a.dk = dk_.as<float>();
    a.dv = dv_.as<float>();
    // Poison: every element the kernels fail to write comes back NaN (0xFF bytes).
    for (const auto& [d, t] : {std::pair{&dq_, &g.dq}, std::pair{&dk_, &g.dk}, std::pair{&dv_, &g.dv}})
      if (d->get() != nullptr) detail::check_cuda(cudaMemset(d->get(), 0xFF, t->nbytes()), "poisoning the gradients");
    attention_backward(a, nullptr);
    detail::check_cuda(cudaDeviceSynchronize(), "backward kernels");
  }
  detail::download(g.dq.data(), dq_, g.dq.nbytes(), "copy of dq from the GPU");
  detail::download(g.dk.data(), dk_, g.dk.nbytes(), "copy of dk from the GPU");
  detail::download(g.dv.data(), dv_, g.dv.nbytes(), "copy of dv from the GPU");
  return g;
}

}  // namespace qkv::cuda
