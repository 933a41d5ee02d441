// qkv::attention_backward: validate as the forward does, then dispatch.
#include "attention/backward.h"

#include "qkv/attention.h"
#include "qkv/error.h"

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
  AttentionGradients g;
  // Uninitialized: the kernel writes every element (zeroing first cost 3% at B = 128, L = 32).
  g.dq = Tensor::empty({problem.B, problem.Hq, problem.Lq, problem.Dk});   // (B, Hq, Lq, Dk)
  g.dk = Tensor::empty({problem.B, problem.Hkv, problem.Lk, problem.Dk});  // (B, Hkv, Lk, Dk)
  g.dv = Tensor::empty({problem.B, problem.Hkv, problem.Lk, problem.Dv});  // (B, Hkv, Lk, Dv)
  kernels.backward(problem, dout, q, k, v, out, lse, g);
  return g;
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
      return detail::flash_attention_backward(problem, dout, q, k, v, out, lse, detail::selected_isa());
  }
  throw Error("attention_backward: unknown AttentionImpl value");
}

}  // namespace qkv
