#include "attention/reference.h"

#include <omp.h>

#include <cmath>
#include <limits>
#include <new>
#include <vector>

#include "core/parallel.h"
#include "qkv/error.h"
#include "qkv/threads.h"

namespace qkv::detail {

double reference_score_row(const AttentionProblem& p, std::int64_t b, std::int64_t h,
                           std::int64_t i, const float* qi, const float* kb, double* s,
                           double* t, bool* saw_nan) {
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  const double slope = p.alibi_slopes.empty() ? 0.0 : p.alibi_slopes[h];
  const std::int64_t diagonal = p.aligned_query(b, i);
  double m = kMinusInf;
  *saw_nan = false;
  for (std::int64_t j = 0; j < p.Lk; ++j) {
    double mask_value = 0.0;
    bool allowed = p.structurally_allowed(b, i, j);
    if (allowed && p.has_mask) {
      mask_value = load_as_f32(p.mask_data, p.mask_offset(b, h, i, j), p.mask_dtype);
      if (p.mask_is_bool) allowed = mask_value != 0.0;
    }
    double x = kMinusInf;
    if (t) t[j] = 0.0;
    if (allowed) {
      double dot = 0.0;
      for (std::int64_t d = 0; d < p.Dk; ++d) dot += double{qi[d]} * double{kb[j * p.Dk + d]};
      x = p.scale * dot;
      if (p.has_softcap) {
        const double tanh_x = std::tanh(x / p.softcap);
        if (t) t[j] = tanh_x;
        x = p.softcap * tanh_x;
      }
      if (slope != 0.0) x -= slope * static_cast<double>(std::abs(diagonal - j));
      if (p.has_mask && !p.mask_is_bool) x += mask_value;
    }
    s[j] = x;
    if (std::isnan(x)) *saw_nan = true;
    else if (x > m) m = x;
  }
  return m;
}

namespace {

AttentionResult reference_attention_planned(const AttentionProblem& p, const Tensor& q_in,
                                            const Tensor& k_in, const Tensor& v_in,
                                            const AttentionOptions& options);

}  // namespace

AttentionResult reference_attention(const AttentionProblem& p, const Tensor& q_in,
                                    const Tensor& k_in, const Tensor& v_in,
                                    const AttentionOptions& options) {
  MemoryPlan plan("scaled_dot_product_attention (reference)");
  plan_f32_contiguous(plan, "q as contiguous f32", q_in);
  plan_f32_contiguous(plan, "k as contiguous f32", k_in);
  plan_f32_contiguous(plan, "v as contiguous f32", v_in);
  plan.add("the output (B, Hq, Lq, Dv)", {p.B, p.Hq, p.Lq, p.Dv, static_cast<std::int64_t>(dtype_size(q_in.dtype()))});
  if (options.return_lse) plan.add("the log-sum-exp (B, Hq, Lq) f32", {p.B, p.Hq, p.Lq, 4});
  if (options.return_probs) plan.add("the probabilities (B, Hq, Lq, Lk) f32", {p.B, p.Hq, p.Lq, p.Lk, 4});
  plan.add_per_thread("a row of scores and one of output in double", num_threads(), (p.Lk + p.Dv) * 8);
  return plan.run([&] {
    return reference_attention_planned(p, q_in, k_in, v_in, options);
  });
}

namespace {

AttentionResult reference_attention_planned(const AttentionProblem& p, const Tensor& q_in,
                                            const Tensor& k_in, const Tensor& v_in,
                                            const AttentionOptions& options) {
  const Tensor q = as_f32_contiguous(q_in);  // (B, Hq, Lq, Dk)
  const Tensor k = as_f32_contiguous(k_in);  // (B, Hkv, Lk, Dk)
  const Tensor v = as_f32_contiguous(v_in);  // (B, Hkv, Lk, Dv)
  const float* qd = q.data_as<float>();
  const float* kd = k.data_as<float>();
  const float* vd = v.data_as<float>();

  AttentionResult result;
  result.out = Tensor::empty({p.B, p.Hq, p.Lq, p.Dv}, q_in.dtype());  // (B, Hq, Lq, Dv)
  if (options.return_lse) result.lse = Tensor::empty({p.B, p.Hq, p.Lq}, DType::f32);
  if (options.return_probs) result.probs = Tensor::zeros({p.B, p.Hq, p.Lq, p.Lk}, DType::f32);
  void* out = result.out.data();
  float* lse = options.return_lse ? result.lse.data_as<float>() : nullptr;
  float* probs = options.return_probs ? result.probs.data_as<float>() : nullptr;
  const DType out_dtype = q_in.dtype();

  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  const std::int64_t rows = p.B * p.Hq * p.Lq;
  // 1/(1 − p) for kept weights; p = 1 drops everything.
  const double keep_scale = p.dropout_p < 1.0 ? 1.0 / (1.0 - p.dropout_p) : 0.0;

  RegionErrors errors("attention.reference");
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<double> s, acc;
    errors.run([&] {
      s.resize(static_cast<std::size_t>(p.Lk));    // (Lk) scores, then weights
      acc.resize(static_cast<std::size_t>(p.Dv));  // (Dv) output accumulator
    });
#pragma omp for schedule(static)
    for (std::int64_t row = 0; row < rows; ++row) errors.run([&] {  // not where the buffers failed
      const std::int64_t i = row % p.Lq;
      const std::int64_t h = (row / p.Lq) % p.Hq;
      const std::int64_t b = row / (p.Lq * p.Hq);
      const std::int64_t hk = h / p.group;  // GQA: the key/value head this query head reads
      const float* qi = qd + row * p.Dk;
      const float* kb = kd + (b * p.Hkv + hk) * p.Lk * p.Dk;
      const float* vb = vd + (b * p.Hkv + hk) * p.Lk * p.Dv;
      bool saw_nan = false;
      const double m = reference_score_row(p, b, h, i, qi, kb, s.data(), nullptr, &saw_nan);

      std::fill(acc.begin(), acc.end(), saw_nan ? std::numeric_limits<double>::quiet_NaN() : 0.0);
      if (saw_nan) {  // NaN scores make the whole row NaN, as softmax would
        if (lse) lse[row] = std::numeric_limits<float>::quiet_NaN();
        if (probs) std::fill_n(probs + row * p.Lk, p.Lk, std::numeric_limits<float>::quiet_NaN());
      } else if (m == kMinusInf) {  // fully masked row: zeros, documented
        if (lse) lse[row] = -std::numeric_limits<float>::infinity();
      } else {
        double sum = 0.0;
        for (std::int64_t j = 0; j < p.Lk; ++j) {
          s[j] = std::exp(s[j] - m);  // masked: exp(−inf) = 0 exactly
          sum += s[j];
        }
        if (lse) lse[row] = static_cast<float>(m + std::log(sum));
        for (std::int64_t j = 0; j < p.Lk; ++j) {
          double w = s[j] / sum;
          if (probs) probs[row * p.Lk + j] = static_cast<float>(w);
          if (p.dropout_p > 0.0 && !p.dropout_keeps(b, h, i, j)) w = 0.0;
          w *= keep_scale;
          // Keys of weight exactly 0 (masked, dropped, underflowed) are never read, so a NaN
          // in them cannot leak in; fused kernels skip the same keys.
          if (w == 0.0) continue;
          for (std::int64_t d = 0; d < p.Dv; ++d) acc[d] += w * double{vb[j * p.Dv + d]};
        }
      }
      for (std::int64_t d = 0; d < p.Dv; ++d)
        store_from_f32(out, row * p.Dv + d, out_dtype, static_cast<float>(acc[d]));
    });
  }
  errors.rethrow();
  return result;
}

}  // namespace

}  // namespace qkv::detail
