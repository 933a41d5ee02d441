#include "attention/problem.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "qkv/error.h"
#include "qkv/rng.h"

namespace qkv::detail {
namespace {

constexpr const char* kWhere = "scaled_dot_product_attention: ";

void check_rank4(const Tensor& t, const char* name, const char* layout) {
  QKV_CHECK(t.defined(), kWhere << name << " is undefined");
  QKV_CHECK(t.dim() == 4, kWhere << name << " must be 4-d " << layout << ", got shape "
                                 << t.shape_string());
  QKV_CHECK_TYPE(is_floating(t.dtype()), kWhere << name << " must be f32, bf16, f16 or f64, got "
                                                << dtype_name(t.dtype()));
}

// The mask as (B, Hq, Lq, Lk) strides, NumPy broadcasting from the right.
void resolve_mask(const Tensor& mask, AttentionProblem& p) {
  QKV_CHECK(mask.dim() <= 4, kWhere << "mask must have rank <= 4 to broadcast to (B, Hq, Lq, Lk) = "
                                    << shape_to_string({p.B, p.Hq, p.Lq, p.Lk}) << ", got shape "
                                    << mask.shape_string());
  const std::int64_t target[4] = {p.B, p.Hq, p.Lq, p.Lk};
  const std::int64_t lead = 4 - mask.dim();
  for (std::int64_t d = 0; d < 4; ++d) {
    if (d < lead) continue;  // missing leading dimensions broadcast
    const std::int64_t size = mask.size(d - lead);
    QKV_CHECK(size == target[d] || size == 1,
              kWhere << "mask of shape " << mask.shape_string()
                     << " does not broadcast to (B, Hq, Lq, Lk) = "
                     << shape_to_string({p.B, p.Hq, p.Lq, p.Lk}) << ": dimension " << d - lead
                     << " has size " << size << ", expected " << target[d] << " or 1");
    p.mask_stride[d] = size == 1 ? 0 : mask.stride(d - lead);
  }
  p.has_mask = true;
  p.mask_is_bool = mask.dtype() == DType::boolean;
  p.mask_data = mask.data();
  p.mask_dtype = mask.dtype();
}

}  // namespace

bool AttentionProblem::dropout_keeps(std::int64_t b, std::int64_t h, std::int64_t i,
                                     std::int64_t j) const {
  return counter_uniform(seed, dropout_counter(b, h, i, j)) >= dropout_p;
}

std::uint64_t dropout_threshold(double p) { return static_cast<std::uint64_t>(std::ceil(p * 0x1.0p53)); }

AttentionProblem make_problem(const Tensor& q, const Tensor& k, const Tensor& v,
                              const AttentionOptions& o) {
  check_rank4(q, "q", "(B, Hq, Lq, Dk)");
  check_rank4(k, "k", "(B, Hkv, Lk, Dk)");
  check_rank4(v, "v", "(B, Hkv, Lk, Dv)");
  QKV_CHECK_TYPE(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
                 kWhere << "q, k and v must share one dtype, got q " << dtype_name(q.dtype())
                        << ", k " << dtype_name(k.dtype()) << ", v " << dtype_name(v.dtype()));
  // f64 is computed by the reference alone, in double (attention.h); the fused kernels
  // accumulate in f32 and read nothing wider, so rounding there would defeat the point.
  const bool f64 = q.dtype() == DType::f64;
  QKV_CHECK_TYPE(!(f64 && o.impl == AttentionImpl::fast),
                 kWhere << "impl fast computes in float32 and does not take f64 inputs (q, k and "
                           "v are f64); impl reference computes f64 in double (impl automatic "
                           "picks it for f64)");

  AttentionProblem p;
  p.B = q.size(0);
  p.Hq = q.size(1);
  p.Lq = q.size(2);
  p.Dk = q.size(3);
  p.Hkv = k.size(1);
  p.Lk = k.size(2);
  p.Dv = v.size(3);
  QKV_CHECK(k.size(0) == p.B, kWhere << "k.size(0) (B) must equal q.size(0) = " << p.B << ", got "
                                     << k.size(0));
  QKV_CHECK(v.size(0) == p.B, kWhere << "v.size(0) (B) must equal q.size(0) = " << p.B << ", got "
                                     << v.size(0));
  QKV_CHECK(k.size(3) == p.Dk, kWhere << "k.size(3) (Dk) must equal q.size(3) = " << p.Dk
                                      << ", got " << k.size(3));
  QKV_CHECK(v.size(1) == p.Hkv, kWhere << "v.size(1) (Hkv) must equal k.size(1) = " << p.Hkv
                                       << ", got " << v.size(1));
  QKV_CHECK(v.size(2) == p.Lk, kWhere << "v.size(2) (Lk) must equal k.size(2) = " << p.Lk
                                      << ", got " << v.size(2));
  QKV_CHECK(p.Hkv >= 1 && p.Hq % p.Hkv == 0,
            kWhere << "the number of query heads q.size(1) = " << p.Hq
                   << " must be a multiple of the key/value heads k.size(1) = " << p.Hkv);
  p.group = p.Hq / p.Hkv;

  // Float options are checked in the precision the computation uses them in: the fast
  // kernels (automatic and fast, even where they hand over to the reference) in float32,
  // where 1e39 is infinite and made every score NaN; the reference in double, and so
  // automatic with f64 inputs, which always runs the reference.
  const bool in_float = o.impl != AttentionImpl::reference && !f64;
  const auto representable = [in_float](double x) {
    return in_float ? std::isfinite(static_cast<float>(x)) : std::isfinite(x);
  };
  // What to add to a message about x when only float32 rules it out.
  const auto in_float_note = [in_float](double x) -> std::string {
    if (!in_float || !std::isfinite(x)) return "";
    return std::string(static_cast<float>(x) == 0.0f ? ", which is 0" : ", which is not finite") +
           " in float32, the fast kernels' precision (impl = reference computes in double)";
  };
  if (o.scale) {
    QKV_CHECK(representable(*o.scale),
              kWhere << "scale must be finite, got " << *o.scale << in_float_note(*o.scale));
    p.scale = *o.scale;
  } else {
    p.scale = p.Dk > 0 ? 1.0 / std::sqrt(static_cast<double>(p.Dk)) : 1.0;
  }

  p.causal = o.causal;
  p.alignment = o.alignment;
  if (o.window) {
    QKV_CHECK(o.window->left >= -1, kWhere << "window.left must be >= 0, or -1 for unbounded, got "
                                           << o.window->left);
    QKV_CHECK(o.window->right >= -1, kWhere << "window.right must be >= 0, or -1 for unbounded, got "
                                            << o.window->right);
    p.has_window = o.window->left >= 0 || o.window->right >= 0;
    // A side wider than Lq + Lk keys reaches past every key from every diagonal (i′ lies in
    // [−Lq, Lk)), so it is the same window; clamped, i′ ± side cannot overflow.
    p.window_left = std::min(o.window->left, p.Lq + p.Lk);
    p.window_right = std::min(o.window->right, p.Lq + p.Lk);
  }

  if (o.key_lengths.empty()) {
    p.key_lengths.assign(static_cast<std::size_t>(p.B), p.Lk);
  } else {
    QKV_CHECK(static_cast<std::int64_t>(o.key_lengths.size()) == p.B,
              kWhere << "key_lengths must have B = " << p.B << " entries, got "
                     << o.key_lengths.size());
    for (std::size_t b = 0; b < o.key_lengths.size(); ++b) {
      const std::int64_t n = o.key_lengths[b];
      QKV_CHECK(n >= 0 && n <= p.Lk, kWhere << "key_lengths[" << b << "] must be in [0, Lk = "
                                            << p.Lk << "], got " << n);
    }
    p.key_lengths = o.key_lengths;
  }

  if (!o.alibi_slopes.empty()) {
    QKV_CHECK(static_cast<std::int64_t>(o.alibi_slopes.size()) == p.Hq,
              kWhere << "alibi_slopes must have Hq = " << p.Hq << " entries, got "
                     << o.alibi_slopes.size());
    // The kernels subtract slope·|i′ − j| in float32, and |i′ − j| < Lq + Lk.
    const double reach = static_cast<double>(p.Lq + p.Lk);
    for (std::size_t h = 0; h < o.alibi_slopes.size(); ++h) {
      QKV_CHECK(std::isfinite(o.alibi_slopes[h]),
                kWhere << "alibi_slopes[" << h << "] must be finite, got " << o.alibi_slopes[h]);
      const double reached = std::abs(static_cast<double>(o.alibi_slopes[h])) * reach;
      QKV_CHECK(representable(reached),
                kWhere << "alibi_slopes[" << h << "] times the largest distance |i' - j| < Lq + Lk = "
                       << p.Lq + p.Lk << " must be finite, got slope " << o.alibi_slopes[h] << " (times "
                       << p.Lq + p.Lk << ": " << reached << in_float_note(reached) << ")");
    }
    p.alibi_slopes = o.alibi_slopes;
  }

  if (o.softcap) {
    // In float32 also not so small that it rounds to 0 (c·tanh(s/c) would then be 0·…).
    QKV_CHECK(representable(*o.softcap) && *o.softcap > 0 && (!in_float || static_cast<float>(*o.softcap) > 0.0f),
              kWhere << "softcap must be a finite number > 0, got " << *o.softcap
                     << (*o.softcap > 0 ? in_float_note(*o.softcap) : ""));
    p.has_softcap = true;
    p.softcap = *o.softcap;
  }

  // dropout_p is used in double and as an integer threshold (dropout_threshold), exact for
  // every double in [0, 1]; 1/(1 − p) <= 2^53 is finite in float32 as well.
  QKV_CHECK(o.dropout_p >= 0.0 && o.dropout_p <= 1.0,
            kWhere << "dropout_p must be in [0, 1], got " << o.dropout_p);
  p.dropout_p = o.dropout_p;
  p.dropout_threshold = dropout_threshold(o.dropout_p);
  p.seed = o.seed;
  p.dropout_key = counter_key(o.seed);

  if (o.mask.defined()) resolve_mask(o.mask, p);
  return p;
}

void set_query_shift(AttentionProblem& p, const AttentionOptions& o,
                     const std::vector<std::int64_t>& query_shift) {
  if (query_shift.empty()) return;
  QKV_CHECK(static_cast<std::int64_t>(query_shift.size()) == p.B,
            "attention: query_shift must have B = " << p.B << " entries, got " << query_shift.size());
  std::int64_t reach = 0;
  for (const std::int64_t s : query_shift) reach = std::max(reach, s < 0 ? -s : s);
  p.query_shift = query_shift;
  // i' now lies in [−Lq − reach, Lk + reach): a side clamped at Lq + Lk (make_problem) could
  // stop short of keys it reaches on the whole sequence.
  if (o.window) {
    p.window_left = std::min(o.window->left, p.Lq + p.Lk + reach);
    p.window_right = std::min(o.window->right, p.Lq + p.Lk + reach);
  }
}

}  // namespace qkv::detail
