#include "attention/reference.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "qkv/error.h"
#include "qkv/threads.h"

namespace qkv::detail {

template <class E>
double reference_score_row(const AttentionProblem& p, std::int64_t b, std::int64_t h,
                           std::int64_t i, const E* qi, const E* kb, double* s,
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
      // Exact for every mask dtype (an f64 mask is not rounded to f32).
      mask_value = load_as_f64(p.mask_data, p.mask_offset(b, h, i, j), p.mask_dtype);
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

template double reference_score_row<float>(const AttentionProblem&, std::int64_t, std::int64_t,
                                           std::int64_t, const float*, const float*, double*,
                                           double*, bool*);
template double reference_score_row<double>(const AttentionProblem&, std::int64_t, std::int64_t,
                                            std::int64_t, const double*, const double*, double*,
                                            double*, bool*);

namespace {

template <class E>
AttentionResult reference_attention_planned(const AttentionProblem& p, const Tensor& q_in,
                                            const Tensor& k_in, const Tensor& v_in,
                                            const AttentionOptions& options);

}  // namespace

AttentionResult reference_attention(const AttentionProblem& p, const Tensor& q_in,
                                    const Tensor& k_in, const Tensor& v_in,
                                    const AttentionOptions& options) {
  // make_problem has checked that q, k and v share one dtype.
  const DType compute = reference_compute_dtype(q_in.dtype());
  const bool f64 = compute == DType::f64;
  MemoryPlan plan("scaled_dot_product_attention (reference)");
  plan_compute_contiguous(plan, f64 ? "q as contiguous f64" : "q as contiguous f32", q_in, compute);
  plan_compute_contiguous(plan, f64 ? "k as contiguous f64" : "k as contiguous f32", k_in, compute);
  plan_compute_contiguous(plan, f64 ? "v as contiguous f64" : "v as contiguous f32", v_in, compute);
  plan.add("the output (B, Hq, Lq, Dv)", {p.B, p.Hq, p.Lq, p.Dv, static_cast<std::int64_t>(dtype_size(q_in.dtype()))});
  const auto stat_size = static_cast<std::int64_t>(dtype_size(compute));  // lse, probs: f32 or f64
  if (options.return_lse)
    plan.add(f64 ? "the log-sum-exp (B, Hq, Lq) f64" : "the log-sum-exp (B, Hq, Lq) f32", {p.B, p.Hq, p.Lq, stat_size});
  if (options.return_probs)
    plan.add(f64 ? "the probabilities (B, Hq, Lq, Lk) f64" : "the probabilities (B, Hq, Lq, Lk) f32",
             {p.B, p.Hq, p.Lq, p.Lk, stat_size});
  plan.add_per_thread("a row of scores and one of output in double", num_threads(), (p.Lk + p.Dv) * 8);
  return plan.run([&] {
    return f64 ? reference_attention_planned<double>(p, q_in, k_in, v_in, options)
               : reference_attention_planned<float>(p, q_in, k_in, v_in, options);
  });
}

namespace {

// E: the compute element type (float, or double for f64 inputs), which is also the type
// of lse and probs (f32 or f64).
template <class E>
AttentionResult reference_attention_planned(const AttentionProblem& p, const Tensor& q_in,
                                            const Tensor& k_in, const Tensor& v_in,
                                            const AttentionOptions& options) {
  constexpr DType kCompute = kComputeDType<E>;
  const Tensor q = as_compute_contiguous(q_in, kCompute);  // (B, Hq, Lq, Dk)
  const Tensor k = as_compute_contiguous(k_in, kCompute);  // (B, Hkv, Lk, Dk)
  const Tensor v = as_compute_contiguous(v_in, kCompute);  // (B, Hkv, Lk, Dv)
  const E* qd = q.data_as<E>();
  const E* kd = k.data_as<E>();
  const E* vd = v.data_as<E>();

  AttentionResult result;
  result.out = Tensor::empty({p.B, p.Hq, p.Lq, p.Dv}, q_in.dtype());  // (B, Hq, Lq, Dv)
  if (options.return_lse) result.lse = Tensor::empty({p.B, p.Hq, p.Lq}, kCompute);          // (B, Hq, Lq)
  if (options.return_probs) result.probs = Tensor::zeros({p.B, p.Hq, p.Lq, p.Lk}, kCompute);  // (B, Hq, Lq, Lk)
  void* out = result.out.data();
  E* lse = options.return_lse ? result.lse.data_as<E>() : nullptr;
  E* probs = options.return_probs ? result.probs.data_as<E>() : nullptr;
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
      const E* qi = qd + row * p.Dk;
      const E* kb = kd + (b * p.Hkv + hk) * p.Lk * p.Dk;
      const E* vb = vd + (b * p.Hkv + hk) * p.Lk * p.Dv;
      bool saw_nan = false;
      const double m = reference_score_row(p, b, h, i, qi, kb, s.data(), nullptr, &saw_nan);

      std::fill(acc.begin(), acc.end(), saw_nan ? std::numeric_limits<double>::quiet_NaN() : 0.0);
      if (saw_nan) {  // NaN scores make the whole row NaN, as softmax would
        if (lse) lse[row] = std::numeric_limits<E>::quiet_NaN();
        if (probs) std::fill_n(probs + row * p.Lk, p.Lk, std::numeric_limits<E>::quiet_NaN());
      } else if (m == kMinusInf) {  // fully masked row: zeros, documented
        if (lse) lse[row] = -std::numeric_limits<E>::infinity();
      } else {
        double sum = 0.0;
        for (std::int64_t j = 0; j < p.Lk; ++j) {
          s[j] = std::exp(s[j] - m);  // masked: exp(−inf) = 0 exactly
          sum += s[j];
        }
        if (lse) lse[row] = static_cast<E>(m + std::log(sum));
        for (std::int64_t j = 0; j < p.Lk; ++j) {
          double w = s[j] / sum;
          if (probs) probs[row * p.Lk + j] = static_cast<E>(w);
          if (p.dropout_p > 0.0 && !p.dropout_keeps(b, h, i, j)) w = 0.0;
          w *= keep_scale;
          // Keys of weight exactly 0 (masked, dropped, underflowed) are never read, so a NaN
          // in them cannot leak in; fused kernels skip the same keys.
          if (w == 0.0) continue;
          for (std::int64_t d = 0; d < p.Dv; ++d) acc[d] += w * double{vb[j * p.Dv + d]};
        }
      }
      if constexpr (std::is_same_v<E, double>)  // f64: as computed
        std::copy_n(acc.data(), p.Dv, static_cast<double*>(out) + row * p.Dv);
      else
        for (std::int64_t d = 0; d < p.Dv; ++d)
          store_from_f32(out, row * p.Dv + d, out_dtype, static_cast<float>(acc[d]));
    });
  }
  errors.rethrow();
  return result;
}

}  // namespace

}  // namespace qkv::detail
