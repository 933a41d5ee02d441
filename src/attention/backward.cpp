// qkv::attention_backward: validate as the forward does, then dispatch.
#include "attention/backward.h"

#include <new>

#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/threads.h"

namespace qkv {
namespace detail {
namespace {

constexpr const char* kWhere = "attention_backward: ";

void check_like_out(const Tensor& t, const char* name, const AttentionProblem& p) {
  const Shape want{p.B, p.Hq, p.Lq, p.Dv};
  QKV_CHECK(t.defined(), kWhere << name << " is undefined");
  QKV_CHECK(t.shape() == want, kWhere << name << " must have the output's shape (B, Hq, Lq, Dv) = "
                                      << shape_to_string(want) << ", got " << t.shape_string());
  QKV_CHECK_TYPE(is_floating(t.dtype()), kWhere << name << " must be f32, bf16 or f16, got "
                                                << dtype_name(t.dtype()));
}

}  // namespace

AttentionGradients flash_attention_backward(const AttentionProblem& problem, const Tensor& dout,
                                            const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& out, const Tensor& lse, Isa isa) {
  const IsaKernels& kernels = isa_kernels(isa);
  const AttentionProblem& p = problem;
  MemoryPlan plan("attention_backward");
  plan.add("dq (B, Hq, Lq, Dk) f32", {p.B, p.Hq, p.Lq, p.Dk, 4});
  plan.add("dk (B, Hkv, Lk, Dk) f32", {p.B, p.Hkv, p.Lk, p.Dk, 4});
  plan.add("dv (B, Hkv, Lk, Dv) f32", {p.B, p.Hkv, p.Lk, p.Dv, 4});
  kernels.backward_memory(p, num_threads(), plan);
  return plan.run([&] {
    AttentionGradients g;
    // Uninitialized: the kernel writes every element (zeroing first cost 3% at B = 128, L = 32).
    g.dq = Tensor::empty({p.B, p.Hq, p.Lq, p.Dk});   // (B, Hq, Lq, Dk)
    g.dk = Tensor::empty({p.B, p.Hkv, p.Lk, p.Dk});  // (B, Hkv, Lk, Dk)
    g.dv = Tensor::empty({p.B, p.Hkv, p.Lk, p.Dv});  // (B, Hkv, Lk, Dv)
    kernels.backward(p, dout, q, k, v, out, lse, g);
    return g;
  });
}

}  // namespace detail

AttentionGradients attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& out, const Tensor& lse,
                                      const AttentionOptions& options) {
  const detail::AttentionProblem problem = detail::make_problem(q, k, v, options);
  detail::check_like_out(dout, "dout", problem);
  detail::check_like_out(out, "out", problem);
  const Shape lse_shape{problem.B, problem.Hq, problem.Lq};
  QKV_CHECK(lse.defined(), detail::kWhere << "lse is undefined (run the forward with return_lse = true)");
  QKV_CHECK(lse.shape() == lse_shape, detail::kWhere << "lse must have shape (B, Hq, Lq) = "
                                                     << shape_to_string(lse_shape) << ", got "
                                                     << lse.shape_string());
  QKV_CHECK_TYPE(lse.dtype() == DType::f32,
                 detail::kWhere << "lse must be f32, got " << dtype_name(lse.dtype()));
  switch (options.impl) {
    case AttentionImpl::reference:
      return detail::reference_attention_backward(problem, dout, q, k, v);
    case AttentionImpl::automatic:
    case AttentionImpl::fast:
      // Head dimensions too wide for the kernel's scratch run the reference (flash.h).
      if (!detail::fast_kernel_takes(problem)) return detail::reference_attention_backward(problem, dout, q, k, v);
      return detail::flash_attention_backward(problem, dout, q, k, v, out, lse, detail::selected_isa());
  }
  throw Error("attention_backward: unknown AttentionImpl value");
}

}  // namespace qkv
