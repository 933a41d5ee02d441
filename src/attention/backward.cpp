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

// dout or out: the output's shape; f64 exactly when q (q_dtype) is.
void check_like_out(const Tensor& t, const char* name, const AttentionProblem& p, DType q_dtype) {
  const Shape want{p.B, p.Hq, p.Lq, p.Dv};
  QKV_CHECK(t.defined(), kWhere << name << " is undefined");
  QKV_CHECK(t.shape() == want, kWhere << name << " must have the output's shape (B, Hq, Lq, Dv) = "
                                      << shape_to_string(want) << ", got " << t.shape_string());
  QKV_CHECK_TYPE(is_floating(t.dtype()), kWhere << name << " must be f32, bf16, f16 or f64, got "
                                                << dtype_name(t.dtype()));
  // f64 goes all the way or not at all: the reference computes f64 in double only when
  // everything is f64, and an f64 gradient or output next to f32 inputs would be rounded.
  const bool q_f64 = q_dtype == DType::f64;
  QKV_CHECK_TYPE((t.dtype() == DType::f64) == q_f64,
                 kWhere << name << " must be " << (q_f64 ? "f64, as q, k and v are" : "f32, bf16 or f16 "
                        "(f64 only with f64 q, k and v)") << ", got " << dtype_name(t.dtype()));
}

}  // namespace

AttentionGradients flash_attention_backward(const AttentionProblem& problem, const Tensor& dout,
                                            const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& out, const Tensor& lse, Isa isa) {
  // The kernels read f32, bf16 and f16 (and f64 float masks); f64 data is the reference's.
  QKV_CHECK_TYPE(q.dtype() != DType::f64 && dout.dtype() != DType::f64 && out.dtype() != DType::f64,
                 kWhere << "the fast kernel does not take f64 inputs (the reference computes them)");
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
  return detail::attention_backward_shifted(dout, q, k, v, out, lse, options, {});
}

AttentionGradients detail::attention_backward_shifted(const Tensor& dout, const Tensor& q,
                                                      const Tensor& k, const Tensor& v,
                                                      const Tensor& out, const Tensor& lse,
                                                      const AttentionOptions& options,
                                                      const std::vector<std::int64_t>& query_shift) {
  detail::AttentionProblem problem = detail::make_problem(q, k, v, options);
  detail::set_query_shift(problem, options, query_shift);
  detail::check_like_out(dout, "dout", problem, q.dtype());
  detail::check_like_out(out, "out", problem, q.dtype());
  const Shape lse_shape{problem.B, problem.Hq, problem.Lq};
  QKV_CHECK(lse.defined(), detail::kWhere << "lse is undefined (run the forward with return_lse = true)");
  QKV_CHECK(lse.shape() == lse_shape, detail::kWhere << "lse must have shape (B, Hq, Lq) = "
                                                     << shape_to_string(lse_shape) << ", got "
                                                     << lse.shape_string());
  // lse is what the forward returned: f64 for f64 inputs (computed by the reference), else f32.
  const bool f64 = q.dtype() == DType::f64;
  QKV_CHECK_TYPE(lse.dtype() == (f64 ? DType::f64 : DType::f32),
                 detail::kWhere << "lse must be " << (f64 ? "f64, as q, k and v are" : "f32") << ", got "
                                << dtype_name(lse.dtype()));
  switch (options.impl) {
    case AttentionImpl::reference:
      return detail::reference_attention_backward(problem, dout, q, k, v);
    case AttentionImpl::automatic:
    case AttentionImpl::fast:
      // Head dimensions too wide for the kernel's scratch run the reference (flash.h), and
      // so do f64 inputs, computed in double (make_problem has refused them to impl fast).
      if (f64 || !detail::fast_kernel_takes(problem)) return detail::reference_attention_backward(problem, dout, q, k, v);
      return detail::flash_attention_backward(problem, dout, q, k, v, out, lse, detail::selected_isa());
  }
  throw Error("attention_backward: unknown AttentionImpl value");
}

}  // namespace qkv
