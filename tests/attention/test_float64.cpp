// f64 attention: the reference computes f64 inputs in double end to end (attention.h).
// The forward against a naive twin in long double written here (reading the f64 values
// exactly, masks broadcast by index, dropout from the documented (seed, b, h, i, j)
// function), the backward against central finite differences of the f64 forward (what
// torch.autograd.gradcheck does), and the rules around it: f64 results are f64, automatic
// is the reference, impl fast and mixed dtypes are errors, float masks of f64 are read
// exactly, the f32 paths do not change. Any rounding of an f64 value to f32 on the way
// (about 2^-24 relative) exceeds every tolerance here by orders of magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attention/backward.h"
#include "attention/kernels/flash.h"
#include "attention/problem.h"
#include "qkv/attention.h"
#include "qkv/error.h"
#include "attention/expect_error.h"
#include "qkv/rng.h"

namespace qkv {
namespace {

constexpr double u = 0x1p-53;  // double's unit roundoff: the reference's arithmetic
constexpr double kInf = std::numeric_limits<double>::infinity();

// Standard normal entries times `scale`, drawn in double: full 53-bit mantissas, so any
// rounding to f32 changes them.
Tensor random_f64(const Shape& shape, Rng& rng, double scale = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f64);
  for (std::int64_t n = 0; n < t.numel(); ++n) t.data_as<double>()[n] = scale * rng.normal();
  return t;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector_f64())
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}

// The largest 2-norm over the rows of the last dimension.
double max_row_norm(const Tensor& t) {
  const std::vector<double> x = t.to_vector_f64();
  const std::int64_t d = t.size(-1);
  double m = 0;
  for (std::size_t r = 0; d > 0 && r < x.size() / static_cast<std::size_t>(d); ++r) {
    double s = 0;
    for (std::int64_t c = 0; c < d; ++c) s += x[r * d + c] * x[r * d + c];
    m = std::max(m, std::sqrt(s));
  }
  return m;
}

// Element (b, h, i, j) of a mask broadcast to (B, Hq, Lq, Lk) by NumPy's rule, from its
// logical row-major values (read exactly, as double).
double mask_at(const Tensor& mask, const std::vector<double>& values, std::int64_t b, std::int64_t h,
               std::int64_t i, std::int64_t j) {
  const std::int64_t full[4] = {b, h, i, j};
  std::int64_t flat = 0;
  for (std::int64_t d = 0; d < mask.dim(); ++d) {
    const std::int64_t which = 4 - mask.dim() + d;
    flat = flat * mask.size(d) + (mask.size(d) == 1 ? 0 : full[which]);
  }
  return values[static_cast<std::size_t>(flat)];
}

struct Twin {
  std::vector<long double> out;    // (B, Hq, Lq, Dv)
  std::vector<long double> lse;    // (B, Hq, Lq)
  std::vector<long double> probs;  // (B, Hq, Lq, Lk)
};

// attention.h's definition once more, in long double (64-bit mantissa), dropout included.
Twin long_double_twin(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const std::int64_t B = q.size(0), Hq = q.size(1), Lq = q.size(2), Dk = q.size(3);
  const std::int64_t Hkv = k.size(1), Lk = k.size(2), Dv = v.size(3);
  const std::vector<double> qv = q.to_vector_f64(), kv = k.to_vector_f64(), vv = v.to_vector_f64();
  const std::vector<double> mv = o.mask.defined() ? o.mask.to_vector_f64() : std::vector<double>();
  const long double scale = o.scale ? static_cast<long double>(*o.scale) : 1.0L / std::sqrt(static_cast<long double>(Dk));
  const long double keep = o.dropout_p < 1 ? 1.0L / (1.0L - o.dropout_p) : 0.0L;
  Twin t;
  t.out.assign(B * Hq * Lq * Dv, 0.0L);
  t.lse.assign(B * Hq * Lq, -kInf);
  t.probs.assign(B * Hq * Lq * Lk, 0.0L);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < Lq; ++i) {
        const std::int64_t hk = h * Hkv / Hq;  // repeat_interleave
        const std::int64_t len = o.key_lengths.empty() ? Lk : o.key_lengths[b];
        const std::int64_t diag = o.alignment == Alignment::top_left ? i : i + len - Lq;
        std::vector<long double> s(Lk, -kInf);
        for (std::int64_t j = 0; j < Lk; ++j) {
          bool ok = j < len;
          if (o.causal && j > diag) ok = false;
          if (o.window && o.window->left >= 0 && j < diag - o.window->left) ok = false;
          if (o.window && o.window->right >= 0 && j > diag + o.window->right) ok = false;
          long double add = 0;
          if (o.mask.defined()) {
            const double m = mask_at(o.mask, mv, b, h, i, j);
            if (o.mask.dtype() == DType::boolean) ok = ok && m != 0;
            else add = m;
          }
          if (!ok) continue;
          long double x = 0;
          for (std::int64_t d = 0; d < Dk; ++d)
            x += static_cast<long double>(qv[((b * Hq + h) * Lq + i) * Dk + d]) * kv[((b * Hkv + hk) * Lk + j) * Dk + d];
          x *= scale;
          if (o.softcap) x = *o.softcap * std::tanh(x / *o.softcap);
          if (!o.alibi_slopes.empty()) x -= o.alibi_slopes[h] * std::abs(static_cast<long double>(diag - j));
          s[j] = x + add;
        }
        long double m = -kInf;
        for (long double x : s) m = std::max(m, x);
        if (m == -kInf) continue;
        long double sum = 0;
        for (long double x : s) sum += std::exp(x - m);
        const std::int64_t row = (b * Hq + h) * Lq + i;
        t.lse[row] = m + std::log(sum);
        for (std::int64_t j = 0; j < Lk; ++j) {
          const long double w = std::exp(s[j] - m) / sum;
          t.probs[row * Lk + j] = w;
          const auto counter = static_cast<std::uint64_t>(row * Lk + j);  // flat (b, h, i, j)
          const bool kept = !(o.dropout_p > 0) || counter_uniform(o.seed, counter) >= o.dropout_p;
          if (!kept) continue;
          for (std::int64_t d = 0; d < Dv; ++d)
            t.out[row * Dv + d] += w * keep * vv[((b * Hkv + hk) * Lk + j) * Dv + d];
        }
      }
  return t;
}

// Error of the double reference against exact arithmetic, derived term by term (u = 2^-53;
// norms are max row 2-norms; the twin's own error, ~2^-64, is negligible):
// - scores: the Dk-term dot product and the scale, (Dk + 2)·u·|scale|·‖q‖·‖k‖; the scale
//   itself (1/sqrt(Dk) rounded), softcap's tanh and division, ALiBi's product and the
//   additions each add a few u of the magnitude `mag` of a score (or of c): 8u·(mag + c);
// - weights w = exp(s − m)/Σ: s − m is off by 2δs + u·|s − m| (|s − m| <= 2·mag), exp by
//   u relative, the sum by Lk·u, the division by u: εw <= 2δs + 4u·mag + (Lk + 4)·u;
// - out = Σ w·keep·v (Σ w = 1): εw·keep·max|v| plus the sum's (Lk + 1)·u·keep·max|v|;
// - lse = m + log Σ: δs + (Lk + 4)·u + 2u·|lse|.
// Everything is doubled for margin. An f32 rounding of any input moves scores by about
// 2^-24·mag, 10^8 times these.
struct ForwardBound {
  double out = 0, lse_abs = 0, lse_rel = 0, probs = 0;
};
ForwardBound forward_bound(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const std::int64_t Dk = q.size(3), Lq = q.size(2), Lk = k.size(2);
  const double scale = o.scale.value_or(1.0 / std::sqrt(double(std::max<std::int64_t>(Dk, 1))));
  const double score_mag = std::abs(scale) * max_row_norm(q) * max_row_norm(k);
  double extra = 0;
  for (float s : o.alibi_slopes) extra = std::max(extra, std::abs(double{s}) * double(Lq + Lk));
  if (o.mask.defined() && o.mask.dtype() != DType::boolean) extra += max_abs(o.mask);
  const double c = o.softcap.value_or(0.0);
  const double mag = (o.softcap ? std::min(score_mag, c) : score_mag) + extra;
  const double ds = (Dk + 2) * u * score_mag + 8 * u * (mag + c);
  const double eps_w = 2 * ds + 4 * u * mag + (Lk + 4) * u;
  const double keep = o.dropout_p > 0 && o.dropout_p < 1 ? 1.0 / (1.0 - o.dropout_p) : 1.0;
  ForwardBound f;
  f.out = 2 * keep * max_abs(v) * (eps_w + (Lk + 1) * u);
  f.lse_abs = 2 * (ds + (Lk + 4) * u);
  f.lse_rel = 4 * u;
  f.probs = 2 * eps_w;
  return f;
}

struct Combo {
  std::string what;
  std::int64_t B, Hq, Hkv, Lq, Lk, Dk, Dv;
  AttentionOptions o;
};

// The option matrix both tests sweep: masks, causal both ways, GQA/MQA, softcap, ALiBi,
// windows, key lengths (one 0: fully masked rows), dropout.
std::vector<Combo> option_matrix(Rng& rng, bool small) {
  const std::int64_t Lq = small ? 3 : 9, Lk = small ? 4 : 13, Dk = small ? 3 : 8, Dv = small ? 2 : 5;
  std::vector<Combo> c;
  c.push_back({"plain", 2, 2, 2, Lq, Lk, Dk, Dv, {}});
  c.push_back({"causal top_left, GQA", 1, 4, 2, Lq, Lk, Dk, Dv, {}});
  c.back().o.causal = true;
  c.push_back({"causal bottom_right, key lengths (one 0), MQA", 2, 2, 1, Lq, Lk, Dk, Dv, {}});
  c.back().o.causal = true;
  c.back().o.alignment = Alignment::bottom_right;
  c.back().o.key_lengths = {Lk - 1, 0};
  c.push_back({"bool mask (Lq, Lk), explicit scale", 2, 2, 2, Lq, Lk, Dk, Dv, {}});
  {
    Tensor m = Tensor::empty({Lq, Lk}, DType::boolean);
    for (std::int64_t n = 0; n < m.numel(); ++n) m.data_as<std::uint8_t>()[n] = (n * 5) % 7 != 1;
    c.back().o.mask = m;
    c.back().o.scale = 0.7;
  }
  c.push_back({"f64 float mask (B, 1, Lq, Lk) with -inf", 2, 2, 2, Lq, Lk, Dk, Dv, {}});
  c.back().o.mask = random_f64({2, 1, Lq, Lk}, rng);
  c.back().o.mask.data_as<double>()[1] = -kInf;
  c.push_back({"f32 float mask (1, Hq, Lq, Lk), alibi", 1, 2, 2, Lq, Lk, Dk, Dv, {}});
  c.back().o.mask = random_f64({1, 2, Lq, Lk}, rng).to(DType::f32);
  c.back().o.alibi_slopes = {0.5f, 0.25f};
  c.push_back({"softcap, window (1, 1), alibi, bottom_right", 1, 2, 1, Lq, Lk, Dk, Dv, {}});
  c.back().o.softcap = 1.3;  // small: tanh far from linear
  c.back().o.window = Window{1, 1};
  c.back().o.alignment = Alignment::bottom_right;
  c.back().o.alibi_slopes = {0.3f, 0.125f};
  c.push_back({"window right only, causal", 2, 2, 2, Lq, Lk, Dk, Dv, {}});
  c.back().o.window = Window{-1, 1};
  c.back().o.causal = true;
  c.push_back({"dropout 0.3, GQA, softcap", 1, 4, 2, Lq, Lk, Dk, Dv, {}});
  c.back().o.dropout_p = 0.3;
  c.back().o.seed = 99;
  c.back().o.softcap = 2.0;
  return c;
}

TEST(Float64Attention, ReferenceMatchesALongDoubleTwinAcrossTheOptionMatrix) {
  Rng rng(64);
  int rows_checked = 0;
  for (const Combo& c : option_matrix(rng, false)) {
    Tensor q = random_f64({c.B, c.Hq, c.Lq, c.Dk}, rng, 1.5), k = random_f64({c.B, c.Hkv, c.Lk, c.Dk}, rng, 1.5),
           v = random_f64({c.B, c.Hkv, c.Lk, c.Dv}, rng);
    AttentionOptions o = c.o;
    o.return_lse = true;
    o.return_probs = true;
    for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::automatic}) {
      o.impl = impl;
      const AttentionResult r = attention(q, k, v, o);
      ASSERT_EQ(r.out.dtype(), DType::f64) << c.what;
      ASSERT_EQ(r.lse.dtype(), DType::f64) << c.what;
      ASSERT_EQ(r.probs.dtype(), DType::f64) << c.what;
      const Twin t = long_double_twin(q, k, v, o);
      const ForwardBound bound = forward_bound(q, k, v, o);
      const std::vector<double> out = r.out.to_vector_f64(), lse = r.lse.to_vector_f64(),
                                probs = r.probs.to_vector_f64();
      double worst = 0;
      std::size_t where = 0;
      for (std::size_t n = 0; n < out.size(); ++n) {
        const double e = std::abs(static_cast<double>(out[n] - t.out[n]));
        if (!(e <= worst)) worst = e, where = n;
      }
      EXPECT_LE(worst, bound.out) << c.what << ": max |out - twin| = " << worst << " at flat index "
                                  << where << " (bound " << bound.out << ")";
      for (std::size_t n = 0; n < lse.size(); ++n) {
        if (std::isinf(static_cast<double>(t.lse[n]))) {
          ASSERT_EQ(lse[n], -kInf) << c.what << " lse " << n;
          continue;
        }
        const double tol = bound.lse_abs + bound.lse_rel * std::abs(static_cast<double>(t.lse[n]));
        ASSERT_LE(std::abs(static_cast<double>(lse[n] - t.lse[n])), tol) << c.what << " lse " << n;
        ++rows_checked;
      }
      for (std::size_t n = 0; n < probs.size(); ++n)
        ASSERT_LE(std::abs(static_cast<double>(probs[n] - t.probs[n])), bound.probs) << c.what << " probs " << n;
    }
  }
  EXPECT_GT(rows_checked, 200);
}

// automatic sends f64 to the reference: the same bits, whatever the request.
TEST(Float64Attention, AutomaticIsTheReferenceAndStridesDoNotMatter) {
  Rng rng(65);
  // (B, L, H, D) projections seen as (B, H, L, D) by permute: strided f64 views.
  const Tensor q = random_f64({2, 7, 4, 6}, rng).permute({0, 2, 1, 3});
  const Tensor k = random_f64({2, 9, 2, 6}, rng).permute({0, 2, 1, 3});
  const Tensor v = random_f64({2, 9, 2, 5}, rng).permute({0, 2, 1, 3});
  AttentionOptions o;
  o.causal = true;
  o.return_lse = true;
  o.alignment = Alignment::bottom_right;
  const AttentionResult automatic = attention(q, k, v, o);
  o.impl = AttentionImpl::reference;
  const AttentionResult reference = attention(q, k, v, o);
  const AttentionResult contiguous = attention(q.contiguous(), k.contiguous(), v.contiguous(), o);
  EXPECT_EQ(automatic.out.to_vector_f64(), reference.out.to_vector_f64());
  EXPECT_EQ(automatic.lse.to_vector_f64(), reference.lse.to_vector_f64());
  EXPECT_EQ(contiguous.out.to_vector_f64(), reference.out.to_vector_f64());
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, o).to_vector_f64(), reference.out.to_vector_f64());

  // The raw form takes f64 too (automatic, so the reference) and gives f64.
  const Tensor x = random_f64({5, 3}, rng);
  const Tensor raw = self_attention_raw(x);
  EXPECT_EQ(raw.dtype(), DType::f64);
  AttentionOptions unscaled;
  unscaled.scale = 1.0;
  unscaled.impl = AttentionImpl::reference;
  const Tensor x4 = x.unsqueeze(0).unsqueeze(0);
  EXPECT_EQ(raw.to_vector_f64(), scaled_dot_product_attention(x4, x4, x4, unscaled).to_vector_f64());
}

// Dropout keeps the same (b, h, i, j) under f64 as under f32. With v the identity
// (Lk = Dv), out_i[j] = P_ij·Z_ij: zero exactly where dropped.
TEST(Float64Attention, DropoutKeepsTheSamePatternAsF32) {
  Rng rng(66);
  const std::int64_t B = 2, H = 3, L = 16;
  Tensor eye = Tensor::zeros({B, H, L, L}, DType::f64);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t j = 0; j < L; ++j) eye.data_as<double>()[((b * H + h) * L + j) * L + j] = 1.0;
  const Tensor q = random_f64({B, H, L, 4}, rng, 0.3).to(DType::f32), k = random_f64({B, H, L, 4}, rng, 0.3).to(DType::f32);
  AttentionOptions o;
  o.dropout_p = 0.4;
  o.seed = 1234;
  o.impl = AttentionImpl::reference;
  const std::vector<double> f64 = attention(q.to(DType::f64), k.to(DType::f64), eye, o).out.to_vector_f64();
  const std::vector<float> f32 = attention(q, k, eye.to(DType::f32), o).out.to_vector();
  o.impl = AttentionImpl::fast;
  const std::vector<float> fast = attention(q, k, eye.to(DType::f32), o).out.to_vector();
  ASSERT_EQ(f64.size(), f32.size());
  int dropped = 0;
  for (std::size_t n = 0; n < f64.size(); ++n) {
    EXPECT_EQ(f64[n] == 0.0, f32[n] == 0.0f) << "flat index " << n;
    EXPECT_EQ(f64[n] == 0.0, fast[n] == 0.0f) << "flat index " << n;
    dropped += f64[n] == 0.0;
  }
  // About 40% of B·H·L·L = 1536 weights; a binomial's 6 sigma either way.
  EXPECT_GT(dropped, 614 - 6 * 19);
  EXPECT_LT(dropped, 614 + 6 * 19);
}

// ---------------------------------------------------------------------------------------
// The f64 backward against central finite differences of the f64 forward, every element
// of q, k and v (as gradcheck does).
//
// loss(q, k, v) = Σ dout ∘ out(q, k, v), summed in long double. For an entry x,
// D(h) = (loss(x + h⁺) − loss(x − h⁻)) / (h⁺ + h⁻), with h± the steps actually taken after
// rounding x ± h to double, is f' + c₂h² + c₄h⁴ + …; Richardson's R(h) = (4D(h) − D(2h))/3
// removes the h² term. Its error is
//   truncation: c·h⁴, estimated from the step doubled: R(2h) − R(h) ≈ 15c·h⁴, so
//               |R(2h) − R(h)| bounds it with a factor 15 to spare;
//   rounding:   each output is off by at most forward_bound(...).out, so each loss by
//               ε = out·Σ|dout|, D(h) by ε/h, and R(h) by (4ε/h + ε/2h)/3 = 1.5ε/h.
// h = 0.01 keeps both near 10^-10, far below what an f32 rounding anywhere would do: of
// the gradients, 2^-24 relative; of the inputs, the steps h± (not a multiple of an f32
// ulp) would be off by up to 2^-24·|x|, the quotient by ~10^-5 relative.
long double loss(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions o) {
  o.impl = AttentionImpl::reference;
  o.return_lse = false;
  const std::vector<double> out = attention(q, k, v, o).out.to_vector_f64();
  const std::vector<double> g = dout.to_vector_f64();
  long double s = 0;
  for (std::size_t n = 0; n < out.size(); ++n) s += static_cast<long double>(g[n]) * out[n];
  return s;
}

TEST(Float64AttentionBackward, MatchesCentralDifferencesOfTheForwardEverywhere) {
  Rng rng(67);
  constexpr double h = 0.003;
  int stand_out = 0, checked = 0;
  double worst_bound = 0;
  for (const Combo& c : option_matrix(rng, true)) {
    Tensor q = random_f64({c.B, c.Hq, c.Lq, c.Dk}, rng), k = random_f64({c.B, c.Hkv, c.Lk, c.Dk}, rng),
           v = random_f64({c.B, c.Hkv, c.Lk, c.Dv}, rng);
    const Tensor dout = random_f64({c.B, c.Hq, c.Lq, c.Dv}, rng);
    AttentionOptions o = c.o;
    o.return_lse = true;
    o.impl = AttentionImpl::reference;
    const AttentionResult fwd = attention(q, k, v, o);
    for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::automatic}) {
      o.impl = impl;
      const AttentionGradients g = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
      ASSERT_EQ(g.dq.dtype(), DType::f64);
      ASSERT_EQ(g.dk.dtype(), DType::f64);
      ASSERT_EQ(g.dv.dtype(), DType::f64);
      if (impl == AttentionImpl::automatic) continue;  // the same function: the reference

      double dout_sum = 0;
      for (double x : dout.to_vector_f64()) dout_sum += std::abs(x);
      // A loss's rounding; the forward bound is taken with every entry up to 4h larger.
      const double eps = forward_bound(q, k, v, o).out * (1 + 8 * h) * dout_sum;
      for (int which = 0; which < 3; ++which) {
        Tensor& x = which == 0 ? q : which == 1 ? k : v;
        const Tensor& grad = which == 0 ? g.dq : which == 1 ? g.dk : g.dv;
        const char* name = which == 0 ? "dq" : which == 1 ? "dk" : "dv";
        for (std::int64_t flat = 0; flat < x.numel(); ++flat) {
          double* p = x.data_as<double>() + flat;
          const double x0 = *p;
          const auto D = [&](double step) {
            *p = x0 + step;
            const double up = *p - x0;
            const long double f_up = loss(dout, q, k, v, o);
            *p = x0 - step;
            const double down = x0 - *p;
            const long double f_down = loss(dout, q, k, v, o);
            *p = x0;
            return static_cast<double>((f_up - f_down) / (up + down));
          };
          const double d1 = D(h), d2 = D(2 * h), d4 = D(4 * h);
          const double r1 = (4 * d1 - d2) / 3, r2 = (4 * d2 - d4) / 3;
          const double bound = std::abs(r2 - r1) + 2 * 1.5 * eps / h + 1.5 * eps / (2 * h);
          worst_bound = std::max(worst_bound, bound / std::max(1.0, std::abs(r1)));
          const double analytic = grad.data_as<double>()[flat];
          EXPECT_LE(std::abs(analytic - r1), bound)
              << c.what << ": " << name << " at flat index " << flat << ": backward " << analytic
              << ", finite difference " << r1 << ", bound " << bound;
          stand_out += std::abs(analytic) > 1e3 * bound;
          ++checked;
        }
      }
    }
  }
  // The check is sharp: gradcheck's tolerance is 1e-5 (eps 1e-6), f32's rounding ~6e-8.
  EXPECT_LE(worst_bound, 1e-8) << "finite differences too coarse to test a double backward";
  EXPECT_GT(stand_out, checked / 2) << "too few gradients stand out of the noise to test anything";
}

// A fully masked row and a key nobody attends get exactly zero, in f64 as in f32.
TEST(Float64AttentionBackward, MaskedRowsAndKeysGetExactlyZero) {
  Rng rng(68);
  const Tensor q = random_f64({2, 2, 4, 3}, rng), k = random_f64({2, 2, 5, 3}, rng),
               v = random_f64({2, 2, 5, 2}, rng), dout = random_f64({2, 2, 4, 2}, rng);
  AttentionOptions o;
  o.key_lengths = {0, 3};  // batch 0: every row masked; batch 1: keys 3 and 4 unread
  o.return_lse = true;
  const AttentionResult fwd = attention(q, k, v, o);
  const AttentionGradients g = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
  const std::vector<double> dq = g.dq.to_vector_f64(), dk = g.dk.to_vector_f64(), dv = g.dv.to_vector_f64();
  for (std::size_t n = 0; n < dq.size() / 2; ++n) EXPECT_EQ(dq[n], 0.0) << n;
  for (std::size_t n = 0; n < dk.size() / 2; ++n) EXPECT_EQ(dk[n], 0.0) << n;
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t j = 3; j < 5; ++j) {
      for (std::int64_t d = 0; d < 3; ++d) EXPECT_EQ(g.dk.to_vector_f64()[((2 + h) * 5 + j) * 3 + d], 0.0);
      for (std::int64_t d = 0; d < 2; ++d) EXPECT_EQ(g.dv.to_vector_f64()[((2 + h) * 5 + j) * 2 + d], 0.0);
    }
  EXPECT_NE(dv[((2 + 0) * 5 + 1) * 2], 0.0);  // batch 1, head 0, key 1: attended
  EXPECT_EQ(fwd.lse.to_vector_f64()[0], -kInf);
}

// ---------------------------------------------------------------------------------------
// The rules: f64 goes all the way or is an error naming the argument.

using testing::expect_error;

TEST(Float64Attention, FastAndMixedDtypesAreTypeErrorsNamingTheArguments) {
  Rng rng(69);
  const Tensor q = random_f64({1, 2, 5, 4}, rng), k = random_f64({1, 2, 6, 4}, rng),
               v = random_f64({1, 2, 6, 3}, rng), dout = random_f64({1, 2, 5, 3}, rng);
  const ErrorKind type = ErrorKind::type;
  AttentionOptions fast;
  fast.impl = AttentionImpl::fast;
  expect_error([&] { attention(q, k, v, fast); }, "impl fast computes in float32 and does not take f64", type);
  expect_error([&] { validate_attention(q, k, v, fast); }, "impl reference computes f64 in double", type);
  expect_error([&] { attention(q, k.to(DType::f32), v, {}); }, "q, k and v must share one dtype, got q f64, k f32, v f64", type);
  expect_error([&] { attention(q.to(DType::bf16), k.to(DType::bf16), v, {}); }, "got q bf16, k bf16, v f64", type);

  AttentionOptions o;
  o.return_lse = true;
  const AttentionResult fwd = attention(q, k, v, o);
  expect_error([&] { attention_backward(dout, q, k, v, fwd.out, fwd.lse, fast); }, "impl fast", type);
  expect_error([&] { attention_backward(dout.to(DType::f32), q, k, v, fwd.out, fwd.lse, o); },
               "dout must be f64, as q, k and v are, got f32", type);
  expect_error([&] { attention_backward(dout, q, k, v, fwd.out.to(DType::f32), fwd.lse, o); },
               "out must be f64, as q, k and v are, got f32", type);
  expect_error([&] { attention_backward(dout, q, k, v, fwd.out, fwd.lse.to(DType::f32), o); },
               "lse must be f64, as q, k and v are, got f32", type);
  // And f64 next to f32 inputs, which the f32 computation would round.
  const Tensor q32 = q.to(DType::f32), k32 = k.to(DType::f32), v32 = v.to(DType::f32);
  const AttentionResult fwd32 = attention(q32, k32, v32, o);
  expect_error([&] { attention_backward(dout, q32, k32, v32, fwd32.out, fwd32.lse, o); },
               "dout must be f32, bf16 or f16 (f64 only with f64 q, k and v), got f64", type);
  expect_error([&] { attention_backward(dout.to(DType::f32), q32, k32, v32, fwd32.out, fwd.lse, o); },
               "lse must be f32, got f64", type);

  // The kernels themselves refuse f64 data, should anything call them directly.
  const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
  expect_error([&] { detail::flash_attention(problem, q, k, v, false, detail::selected_isa()); },
               "the fast kernel does not take f64", type);
  expect_error([&] { detail::flash_attention_backward(problem, dout, q, k, v, fwd.out, fwd.lse, detail::selected_isa()); },
               "the fast kernel does not take f64", type);
}

// Float options are checked in the precision they are used in: double, for f64 under
// automatic too (the reference runs), where 1e39 is a finite scale.
TEST(Float64Attention, OptionsAreCheckedInDouble) {
  Rng rng(70);
  const Tensor q = random_f64({1, 1, 2, 2}, rng, 1e-40), k = random_f64({1, 1, 3, 2}, rng),
               v = random_f64({1, 1, 3, 2}, rng);
  AttentionOptions o;
  o.scale = 1e39;
  EXPECT_NO_THROW(attention(q, k, v, o));
  EXPECT_THROW(attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), o), Error);
}

// Float masks of f64 are read exactly by the reference and rounded to f32 by the kernels:
// with f32-representable values either is the same as an f32 mask, bit for bit, and the
// f32 paths give what they gave.
TEST(Float64Attention, F64MasksOnF32InputsChangeNothing) {
  Rng rng(71);
  const Tensor q = random_f64({2, 2, 70, 16}, rng).to(DType::f32), k = random_f64({2, 2, 67, 16}, rng).to(DType::f32),
               v = random_f64({2, 2, 67, 16}, rng).to(DType::f32);
  Tensor mask32 = random_f64({2, 1, 70, 67}, rng).to(DType::f32);
  mask32.set({0, 0, 3, 4}, -std::numeric_limits<float>::infinity());
  const Tensor mask64 = mask32.to(DType::f64);
  for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::fast}) {
    AttentionOptions o;
    o.impl = impl;
    o.return_lse = true;
    o.mask = mask32;
    const AttentionResult a = attention(q, k, v, o);
    o.mask = mask64;
    const AttentionResult b = attention(q, k, v, o);
    EXPECT_EQ(a.out.dtype(), DType::f32);
    EXPECT_EQ(b.lse.dtype(), DType::f32);
    EXPECT_EQ(a.out.to_vector(), b.out.to_vector()) << static_cast<int>(impl);
    EXPECT_EQ(a.lse.to_vector(), b.lse.to_vector()) << static_cast<int>(impl);
    const Tensor dout = random_f64({2, 2, 70, 16}, rng).to(DType::f32);
    const AttentionGradients ga = attention_backward(dout, q, k, v, a.out, a.lse, o);
    o.mask = mask32;
    const AttentionGradients gb = attention_backward(dout, q, k, v, a.out, a.lse, o);
    EXPECT_EQ(ga.dq.dtype(), DType::f32);
    EXPECT_EQ(ga.dq.to_vector(), gb.dq.to_vector()) << static_cast<int>(impl);
    EXPECT_EQ(ga.dk.to_vector(), gb.dk.to_vector()) << static_cast<int>(impl);
  }
  // The reference reads an f64 mask exactly: mask values 1 and 1 + 2^-40, the same in
  // f32, give weights 1/2 ± 2^-42 in f64.
  Tensor fine = Tensor::full({1, 1, 1, 2}, 1.0f, DType::f64);
  fine.data_as<double>()[1] = 1.0 + 0x1p-40;
  const Tensor one = Tensor::full({1, 1, 1, 1}, 1.0f, DType::f64), two = Tensor::zeros({1, 1, 2, 1}, DType::f64);
  Tensor vals = Tensor::zeros({1, 1, 2, 1}, DType::f64);
  vals.data_as<double>()[1] = 1.0;
  AttentionOptions o;
  o.mask = fine;
  const double w = attention(one, two, vals, o).out.to_vector_f64()[0];  // softmax([1, 1 + 2^-40])[1]
  EXPECT_DOUBLE_EQ(w, 1.0 / (1.0 + std::exp(-0x1p-40)));
  EXPECT_NE(w, 0.5);
}

}  // namespace
}  // namespace qkv
