// The public entry points: validate once, then dispatch to an implementation.
#include "qkv/attention.h"

#include "attention/kernels/flash.h"
#include "attention/problem.h"
#include "attention/reference.h"
#include "qkv/error.h"

namespace qkv {

void validate_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const AttentionOptions& options) {
  (void)detail::make_problem(q, k, v, options);
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options) {
  return detail::attention_shifted(q, k, v, options, {});
}

AttentionResult detail::attention_shifted(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const AttentionOptions& options,
                                          const std::vector<std::int64_t>& query_shift) {
  detail::AttentionProblem problem = detail::make_problem(q, k, v, options);
  detail::set_query_shift(problem, options, query_shift);
  switch (options.impl) {
    case AttentionImpl::reference:
      return detail::reference_attention(problem, q, k, v, options);
    case AttentionImpl::automatic:
    case AttentionImpl::fast:
      // The fused kernel never forms the Lq×Lk matrix, so probabilities (for heatmaps)
      // come from the reference, which does; and head dimensions too wide for the kernel's
      // scratch per thread run there too (flash.h). f64 inputs run the reference, which
      // computes them in double (make_problem has refused them to impl fast).
      if (options.return_probs || q.dtype() == DType::f64 || !detail::fast_kernel_takes(problem))
        return detail::reference_attention(problem, q, k, v, options);
      return detail::flash_attention(problem, q, k, v, options.return_lse, detail::selected_isa());
  }
  throw Error("scaled_dot_product_attention: unknown AttentionImpl value");
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options) {
  AttentionOptions only_output = options;
  only_output.return_lse = false;
  only_output.return_probs = false;
  return attention(q, k, v, only_output).out;
}

const char* fast_kernel_isa() { return detail::isa_name(detail::selected_isa()); }

Tensor self_attention_raw(const Tensor& x, std::optional<double> scale) {
  QKV_CHECK(x.defined(), "self_attention_raw: x is undefined");
  QKV_CHECK(x.dim() == 2 || x.dim() == 3,
            "self_attention_raw: x must be (L, D) or (B, L, D), got shape " << x.shape_string());
  const Tensor x4 = x.dim() == 2 ? x.unsqueeze(0).unsqueeze(0) : x.unsqueeze(1);  // (B, 1, L, D)
  AttentionOptions options;
  options.scale = scale;
  const Tensor out = scaled_dot_product_attention(x4, x4, x4, options);  // (B, 1, L, D)
  return x.dim() == 2 ? out.select(0, 0).select(0, 0) : out.select(1, 0);
}

}  // namespace qkv
