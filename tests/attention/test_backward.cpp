// The attention backward: the reference (double) against central finite differences of
// the reference forward, the tiled kernel (every ISA variant this CPU runs) against the
// reference across tile boundaries, head dims and the option matrix, thread-count
// independence, and the argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attention/backward.h"
#include "attention/kernels/flash.h"
#include "qkv/attention.h"
#include "qkv/error.h"
#include "attention/expect_error.h"
#include "qkv/rng.h"
#include "qkv/threads.h"
#include "attention/random_inputs.h"

namespace qkv {
namespace {

using detail::Isa;
using testing::max_abs;
using testing::max_row_norm;
using testing::random_bool_mask;
using testing::random_float_mask;
using testing::random_tensor;

constexpr double u = 0x1p-24;  // f32 unit roundoff

// How much probability each key and each query row carries, from the reference's
// probabilities (f32, before dropout):
//   column[(b·Hkv + hk)·Lk + j] = Σ_{query heads h of the group, i} P_bhij  (<= group·Lq)
//   row[(b·Hq + h)·Lq + i]      = Σ_j P_bhij                              (1, or 0 if masked)
struct ProbabilitySums {
  std::vector<double> column, row;
};
ProbabilitySums probability_sums(const Tensor& q, const Tensor& k, const Tensor& v, AttentionOptions o) {
  o.return_probs = true;
  o.impl = AttentionImpl::reference;
  const Tensor P = attention(q, k, v, o).probs;  // (B, Hq, Lq, Lk)
  const std::int64_t B = P.size(0), Hq = P.size(1), Lq = P.size(2), Lk = P.size(3);
  const std::int64_t Hkv = k.size(1), group = Hq / Hkv;
  const std::vector<float> p = P.to_vector();
  ProbabilitySums sums;
  sums.column.assign(B * Hkv * Lk, 0.0);
  sums.row.assign(B * Hq * Lq, 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < Lq; ++i)
        for (std::int64_t j = 0; j < Lk; ++j) {
          const double x = p[((b * Hq + h) * Lq + i) * Lk + j];
          sums.column[(b * Hkv + h / group) * Lk + j] += x;
          sums.row[(b * Hq + h) * Lq + i] += x;
        }
  return sums;
}

// Error of the f32 tiled backward against the double reference, derived term by term
// (u = 2^-24; norms are max row 2-norms; keep = 1/(1 − p) under dropout):
// - scores: |δs| <= (Dk + 2)·u·|scale|·‖q‖·‖k‖ + softcap's 6u·c (test_fast.cpp) + two roundings
//   of the score and ALiBi/mask magnitude (as test_fast.cpp);
// - lse = m + log l from the forward: |δlse| <= δs + (Lk + 8)·u (the running sum and its
//   exp, relative, through the log) + 2u·|lse|, |lse| <= magnitude + log Lk;
// - a recomputed probability exp(s − lse) has relative error εP <= δs + δlse + 8u (the
//   kernel's exp, <= 7.2 ulp), and the forward's weights εw <= 2δs + (2Lk + 16)·u;
// - G = keep·‖dO‖·‖v‖ bounds |dP_ij| and |D_i| = |dO_i·out_i| (‖out_i‖ <= keep·‖v‖);
//   dP is a length-Dv f32 dot product, (Dv + 3)·u·G; D_i comes from the forward's out,
//   whose row error ‖Δout_i‖ <= εw·keep·‖v‖ plus the rounding to a bf16/f16 output
//   (and, for bf16 on AVX512-BF16, P rounded to bf16 for P·V: 2^-9 relative), so
//   |ΔD| <= G·(εw + r) + (Dv + 2)·u·G;
// - so |ΔdS_ij| <= P_ij·E with E = 2G·εP + ΔdP + ΔD + 4u·G (+ 2G·Δ(1 − t²) under softcap,
//   Δ(1 − t²) <= 2·(δs_raw/c + 6u) + 2u, tanh being 1-Lipschitz);
// - dq_i = scale·Σ_j dS_ij·k_j, with Σ_j P_ij = R_i (1, or 0 for a fully masked row):
//     |Δdq_i| <= R_i·|scale|·max|k|·(E + (Lk + 2)·u·2G);
// - dk_j = scale·Σ_i dS_ij·q_i and dv_j = Σ_i P_ij·Z_ij·dO_i, with Σ_i P_ij = C_j the
//   key's column sum over its group (n = group·Lq terms):
//     |Δdk_j| <= C_j·|scale|·max|q|·(E + (n + 2)·u·2G),
//     |Δdv_j| <= C_j·keep·max|dO|·(εP + (n + 2)·u);
//   a probability below f32's range (exp < 2^-126) is 0 in the kernel: a floor of
//   n·2^-126 for C_j.
// Each gradient element gets the bound of its own row or key, so a row or key that should
// get nothing must get exactly nothing.
struct GradBounds {
  ProbabilitySums sums;
  std::int64_t Dk = 1, Dv = 1;
  double dq = 0, dk = 0, dv = 0;  // per unit of R_i or C_j
  double floor() const { return double(sums.row.size()) * 0x1p-126; }
  double dq_at(std::size_t n) const { return dq * sums.row[n / Dk]; }
  double dk_at(std::size_t n) const { return dk * (sums.column[n / Dk] + floor()); }
  double dv_at(std::size_t n) const { return dv * (sums.column[n / Dv] + floor()); }
};
GradBounds derive_bounds(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                         const AttentionOptions& o) {
  const std::int64_t Dk = q.size(3), Dv = v.size(3), Lq = q.size(2), Lk = k.size(2);
  const std::int64_t group = q.size(1) / k.size(1);
  const double scale = o.scale.value_or(1.0 / std::sqrt(double(std::max<std::int64_t>(Dk, 1))));
  const double score_mag = std::abs(scale) * max_row_norm(q) * max_row_norm(k);
  const double ds_raw = (Dk + 2) * u * score_mag;
  double ds = ds_raw;
  if (o.softcap) ds += 6 * u * *o.softcap;
  double extra_mag = 0;
  for (float s : o.alibi_slopes) extra_mag = std::max(extra_mag, std::abs(s) * double(Lq + Lk));
  if (o.mask.defined() && o.mask.dtype() != DType::boolean) {
    double m = 0;  // finite entries only: −inf masks and adds no magnitude
    for (float x : o.mask.to_vector()) if (std::isfinite(x)) m = std::max(m, double{std::abs(x)});
    extra_mag += m;
  }
  const double mag = (o.softcap ? std::min(score_mag, *o.softcap) : score_mag) + extra_mag;
  ds += 2 * u * mag;
  const double dlse = ds + (Lk + 8) * u + 2 * u * (mag + std::log(double(Lk) + 1));
  const double eps_p = ds + dlse + 8 * u;
  const double eps_w = 2 * ds + (2 * Lk + 16) * u;
  double r = 0;  // rounding of the forward's output (and weights) to its dtype
  if (q.dtype() == DType::bf16) r = 0x1p-9 + 0x1p-9;
  if (q.dtype() == DType::f16) r = 0x1p-11;

  const double keep = o.dropout_p > 0 && o.dropout_p < 1 ? 1.0 / (1.0 - o.dropout_p) : 1.0;
  const double G = keep * max_row_norm(dout) * max_row_norm(v);
  const double dD = G * (eps_w + r) + (Dv + 2) * u * G;
  const double dP = (Dv + 3) * u * G;
  double E = 2 * G * eps_p + dP + dD + 4 * u * G;
  if (o.softcap) E += 2 * G * (2 * (ds_raw / *o.softcap + 6 * u) + 2 * u);
  const double n = double(group * Lq + 2);
  GradBounds b;
  b.sums = probability_sums(q, k, v, o);
  for (double& c : b.sums.column) c *= 1 + 1e-5;  // the f32 probabilities' own rounding
  for (double& c : b.sums.row) c *= 1 + 1e-5;
  b.Dk = std::max<std::int64_t>(Dk, 1);
  b.Dv = std::max<std::int64_t>(Dv, 1);
  b.dq = std::abs(scale) * max_abs(k) * (E + (Lk + 2) * u * 2 * G);
  b.dk = std::abs(scale) * max_abs(q) * (E + n * u * 2 * G);
  b.dv = keep * max_abs(dout) * (eps_p + n * u);
  return b;
}

// The element whose error most exceeds its bound (NaN in `got` where `want` has none
// counts as infinitely wrong), and the largest error anywhere.
struct Worst {
  double excess = -std::numeric_limits<double>::infinity(), error = 0, bound = 0;
  std::size_t where = 0;
  double max_error = 0;
};
Worst compare(const Tensor& got, const Tensor& want, const std::function<double(std::size_t)>& bound_at) {
  const std::vector<float> x = got.to_vector(), y = want.to_vector();
  Worst w;
  for (std::size_t n = 0; n < x.size(); ++n) {
    double e = std::isnan(y[n]) ? 0.0 : std::abs(double{x[n]} - y[n]);
    if (std::isnan(e)) e = std::numeric_limits<double>::infinity();
    const double b = bound_at(n);
    if (e - b > w.excess) {
      w.excess = e - b;
      w.error = e;
      w.bound = b;
      w.where = n;
    }
    w.max_error = std::max(w.max_error, e);
  }
  return w;
}

// Runs the forward (fast, as training would), then the reference and the ISA's tiled
// backward on its out and lse, and checks the three gradients against the derived bounds.
void expect_backward_matches_reference(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, AttentionOptions o, Isa isa,
                                       const std::string& what) {
  o.return_lse = true;
  o.impl = AttentionImpl::fast;
  const AttentionResult fwd = attention(q, k, v, o);
  o.impl = AttentionImpl::reference;
  const AttentionGradients ref = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
  const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
  const AttentionGradients fast =
      detail::flash_attention_backward(problem, dout, q, k, v, fwd.out, fwd.lse, isa);
  const GradBounds bound = derive_bounds(dout, q, k, v, o);
  const std::string tag = what + " [" + detail::isa_name(isa) + "]";
  const struct {
    const char* name;
    const Tensor& got;
    const Tensor& want;
    std::function<double(std::size_t)> bound_at;
  } grads[] = {{"dq", fast.dq, ref.dq, [&](std::size_t n) { return bound.dq_at(n); }},
               {"dk", fast.dk, ref.dk, [&](std::size_t n) { return bound.dk_at(n); }},
               {"dv", fast.dv, ref.dv, [&](std::size_t n) { return bound.dv_at(n); }}};
  for (const auto& g : grads) {
    ASSERT_EQ(g.got.shape(), g.want.shape()) << tag << " " << g.name;
    ASSERT_EQ(g.got.dtype(), DType::f32) << tag << " " << g.name;
    ASSERT_TRUE(g.got.is_contiguous()) << tag << " " << g.name;
    if (g.got.numel() == 0) continue;
    const Worst w = compare(g.got, g.want, g.bound_at);
    EXPECT_LE(w.error, w.bound) << tag << ": " << g.name << " at flat index " << w.where << ": fast "
                                << g.got.to_vector()[w.where] << ", reference "
                                << g.want.to_vector()[w.where] << ", error " << w.error << " > bound "
                                << w.bound << " (max error anywhere " << w.max_error << ")";
  }
}

// Tiles are 64 queries × 64 keys, microtiles 4 rows × up to 4 vectors of 4-16 lanes: the
// lengths and head dims straddle all of them.
TEST(AttentionBackward, FastMatchesReferenceAcrossTileBoundariesAndHeadDims) {
  Rng rng(41);
  const std::int64_t lengths[] = {1, 15, 16, 17, 63, 64, 65, 200};
  const std::int64_t dims[] = {1, 7, 32, 64, 100};
  for (Isa isa : detail::supported_isas()) {
    int n = 0;
    for (std::int64_t L : lengths)
      for (std::int64_t D : dims) {
        const std::int64_t Lk = (n % 2) ? L : L + 19;  // square and Lq != Lk
        const std::int64_t Dv = D + (n % 3);
        Tensor q = random_tensor({1, 2, L, D}, rng), k = random_tensor({1, 2, Lk, D}, rng),
               v = random_tensor({1, 2, Lk, Dv}, rng), dout = random_tensor({1, 2, L, Dv}, rng);
        AttentionOptions o;
        o.causal = n % 4 == 1 || n % 4 == 2;
        o.alignment = n % 4 == 2 ? Alignment::bottom_right : Alignment::top_left;
        expect_backward_matches_reference(dout, q, k, v, o, isa,
                                          "L " + std::to_string(L) + " Lk " + std::to_string(Lk) +
                                              " D " + std::to_string(D) + (o.causal ? " causal" : ""));
        ++n;
      }
    // Long enough for many tiles in both directions, and the causal tile skipping.
    Tensor q = random_tensor({1, 1, 700, 64}, rng), k = random_tensor({1, 1, 700, 64}, rng),
           v = random_tensor({1, 1, 700, 64}, rng), dout = random_tensor({1, 1, 700, 64}, rng);
    AttentionOptions o;
    o.causal = true;
    expect_backward_matches_reference(dout, q, k, v, o, isa, "L 700 causal");
  }
}

TEST(AttentionBackward, FastMatchesReferenceAcrossTheOptionMatrix) {
  Rng rng(42);
  for (Isa isa : detail::supported_isas()) {
    for (int variant = 0; variant < 40; ++variant) {
      // group 1, 2, 4: Hq = 2, 4 (Hkv = 2), 4 (Hkv = 1: MQA).
      const std::int64_t group = std::int64_t{1} << (variant % 3);
      const std::int64_t Hkv = group == 4 ? 1 : 2, Hq = Hkv * group, B = 2;
      const std::int64_t Lq = (variant % 5 == 0) ? 1 : 30 + variant, Lk = 50 + 3 * variant, D = 24;
      Tensor q = random_tensor({B, Hq, Lq, D}, rng), k = random_tensor({B, Hkv, Lk, D}, rng),
             v = random_tensor({B, Hkv, Lk, D}, rng), dout = random_tensor({B, Hq, Lq, D}, rng);
      AttentionOptions o;
      o.causal = variant & 1;
      o.alignment = (variant & 2) ? Alignment::bottom_right : Alignment::top_left;
      if (variant % 7 == 3) o.scale = -0.3;  // explicit (and negative: no sign assumed)
      std::string what;
      switch (variant % 8) {
        case 1: {
          o.mask = random_bool_mask({Lq, Lk}, rng, 0.6);
          what = "bool mask";
          break;
        }
        case 2: {
          o.mask = random_float_mask({B, 1, Lq, Lk}, rng, 0.3);
          o.key_lengths = {Lk - 5, 3};
          what = "float mask, key lengths";
          break;
        }
        case 3:
          o.window = Window{variant % 4 == 3 ? -1 : 9, 4};
          o.softcap = 2.0;
          what = "window, softcap";
          break;
        case 4:
          for (std::int64_t h = 0; h < Hq; ++h) o.alibi_slopes.push_back(std::pow(2.0f, -float(h) / 2));
          o.key_lengths = {0, Lk / 2};  // batch 0 fully masked
          what = "alibi, key length 0";
          break;
        case 5:
          o.dropout_p = 0.3;
          o.seed = static_cast<std::uint64_t>(variant) * 77 + 1;
          o.mask = random_tensor({1, Hq, Lq, Lk}, rng, 1.0, DType::bf16);
          what = "dropout 0.3, bf16 float mask";
          break;
        case 6:
          o.dropout_p = 0.3;
          o.seed = 12345;
          o.softcap = 1.5;
          o.key_lengths = {Lk, Lk - 40};
          what = "dropout 0.3, softcap, key lengths";
          break;
        case 7:
          o.window = Window{20, -1};
          for (std::int64_t h = 0; h < Hq; ++h) o.alibi_slopes.push_back(0.1f * float(h + 1));
          what = "left window, alibi";
          break;
        default:
          what = "plain";
          break;
      }
      expect_backward_matches_reference(
          dout, q, k, v, o, isa,
          "variant " + std::to_string(variant) + " (" + what + ", group " + std::to_string(group) +
              (o.causal ? ", causal " : ", ") +
              (o.alignment == Alignment::bottom_right ? "bottom_right)" : "top_left)"));
    }
  }
}

// The shapes training runs: encoder self-attention with padding, decoder causal
// self-attention, cross-attention with padded memory (B = 12 of the real 128, to keep the
// reference quick); and (B, L, H, D) storage permuted to (B, H, L, D), bf16 and f16.
TEST(AttentionBackward, TrainingShapesStridedAndHalfPrecisionInputs) {
  Rng rng(43);
  for (Isa isa : detail::supported_isas()) {
    const std::int64_t B = 12, H = 4, D = 32, Ls = 37, Lt = 29;
    std::vector<std::int64_t> lengths;
    for (std::int64_t b = 0; b < B; ++b) lengths.push_back(1 + (b * 7) % Ls);
    Tensor src = random_tensor({B, Ls, H, D}, rng).permute({0, 2, 1, 3});
    Tensor tgt = random_tensor({B, Lt, H, D}, rng).permute({0, 2, 1, 3});
    AttentionOptions enc;
    enc.key_lengths = lengths;
    expect_backward_matches_reference(random_tensor({B, H, Ls, D}, rng), src, src, src, enc, isa,
                                      "encoder self-attention, padded, strided");
    AttentionOptions dec;
    dec.causal = true;
    dec.dropout_p = 0.1;
    dec.seed = 3;
    expect_backward_matches_reference(random_tensor({B, H, Lt, D}, rng), tgt,
                                      tgt, tgt, dec, isa, "decoder causal self-attention, dropout");
    expect_backward_matches_reference(random_tensor({B, Lt, H, D}, rng).permute({0, 2, 1, 3}), tgt,
                                      src, src, enc, isa, "cross-attention, padded memory, strided dout");

    for (DType dtype : {DType::bf16, DType::f16}) {
      Tensor q = random_tensor({2, 45, 4, 40}, rng, 1.0, dtype).permute({0, 2, 1, 3});
      Tensor k = random_tensor({2, 77, 2, 40}, rng, 1.0, dtype).permute({0, 2, 1, 3});
      Tensor v = random_tensor({2, 77, 2, 48}, rng, 1.0, dtype).permute({0, 2, 1, 3});
      Tensor dout = random_tensor({2, 4, 45, 48}, rng, 1.0, dtype);
      AttentionOptions o;
      o.causal = true;
      o.alignment = Alignment::bottom_right;
      expect_backward_matches_reference(dout, q, k, v, o, isa, std::string("strided ") + dtype_name(dtype));
    }
  }
}

// Every key a row cannot see contributes nothing: a fully masked batch has zero gradients
// (not NaN), and keys past key_lengths get dk = dv = 0 even when they hold NaN.
TEST(AttentionBackward, MaskedRowsAndKeysGetExactlyZero) {
  Rng rng(44);
  Tensor q = random_tensor({2, 2, 20, 8}, rng), k = random_tensor({2, 2, 30, 8}, rng),
         v = random_tensor({2, 2, 30, 8}, rng), dout = random_tensor({2, 2, 20, 8}, rng);
  for (std::int64_t j = 25; j < 30; ++j) {
    k.set({1, 0, j, 3}, std::numeric_limits<float>::quiet_NaN());
    v.set({1, 1, j, 2}, std::numeric_limits<float>::quiet_NaN());
  }
  AttentionOptions o;
  o.key_lengths = {0, 25};
  o.return_lse = true;
  const AttentionResult fwd = attention(q, k, v, o);
  for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::fast}) {
    o.impl = impl;
    const AttentionGradients g = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
    const std::vector<float> dq = g.dq.to_vector(), dk = g.dk.to_vector(), dv = g.dv.to_vector();
    for (std::size_t n = 0; n < dq.size(); ++n) {
      const bool batch0 = n < dq.size() / 2;
      if (batch0) EXPECT_EQ(dq[n], 0.0f) << "dq " << n;
      else EXPECT_TRUE(std::isfinite(dq[n]) && dq[n] != 0.0f) << "dq " << n << " = " << dq[n];
    }
    for (std::int64_t hk = 0; hk < 2; ++hk)
      for (std::int64_t j = 0; j < 30; ++j)
        for (std::int64_t d = 0; d < 8; ++d) {
          EXPECT_EQ(g.dk.get({0, hk, j, d}), 0.0f);
          EXPECT_EQ(g.dv.get({0, hk, j, d}), 0.0f);
          if (j >= 25) {
            EXPECT_EQ(g.dk.get({1, hk, j, d}), 0.0f) << "padding key " << j;
            EXPECT_EQ(g.dv.get({1, hk, j, d}), 0.0f) << "padding key " << j;
          } else {
            EXPECT_TRUE(std::isfinite(g.dk.get({1, hk, j, d})));
            EXPECT_TRUE(std::isfinite(g.dv.get({1, hk, j, d})));
          }
        }
  }
}

// Empty sizes: no queries (dk = dv = 0), no keys (every row fully masked: dq = 0), no
// batch. Outputs are allocated uninitialized, so every element must be written.
TEST(AttentionBackward, EmptySizesGiveEmptyOrZeroGradients) {
  Rng rng(49);
  const struct {
    std::int64_t B, Lq, Lk;
  } shapes[] = {{2, 0, 5}, {2, 4, 0}, {0, 3, 3}};
  for (const auto& s : shapes)
    for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::fast}) {
      Tensor q = random_tensor({s.B, 2, s.Lq, 8}, rng), k = random_tensor({s.B, 1, s.Lk, 8}, rng),
             v = random_tensor({s.B, 1, s.Lk, 6}, rng), dout = random_tensor({s.B, 2, s.Lq, 6}, rng);
      AttentionOptions o;
      o.return_lse = true;
      o.impl = impl;
      const AttentionResult fwd = attention(q, k, v, o);
      const AttentionGradients g = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
      EXPECT_EQ(g.dq.shape(), q.shape());
      EXPECT_EQ(g.dk.shape(), k.shape());
      EXPECT_EQ(g.dv.shape(), v.shape());
      for (const Tensor* t : {&g.dq, &g.dk, &g.dv})
        for (float x : t->to_vector()) EXPECT_EQ(x, 0.0f) << "B " << s.B << " Lq " << s.Lq << " Lk " << s.Lk;
    }
}

// ---------------------------------------------------------------------------------------
// The reference backward against central finite differences of the reference forward.
//
// loss(q, k, v) = Σ dout ∘ out(q, k, v), in double over the forward's f32 outputs. For an
// entry x, D(h) = (loss(x + h⁺) − loss(x − h⁻)) / (h⁺ + h⁻), with h± the steps actually
// taken after rounding x ± h to f32. Its error is
//   truncation:  c·h² (+ O(h⁴)), estimated from the step doubled: D(2h) − D(h) ≈ 3c·h²,
//                so |D(2h) − D(h)| bounds it with a factor 3 to spare;
//   rounding:    each output is the double result rounded to f32 (<= u·|out|), so each
//                loss is off by <= u·Σ|dout|·|out|, and D(h) by twice that over h⁺ + h⁻.
double loss(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
            AttentionOptions o, double* abs_sum = nullptr) {
  o.impl = AttentionImpl::reference;
  o.return_lse = false;
  const std::vector<float> out = attention(q, k, v, o).out.to_vector();
  const std::vector<float> g = dout.to_vector();
  double s = 0, a = 0;
  for (std::size_t n = 0; n < out.size(); ++n) {
    s += double{g[n]} * out[n];
    a += std::abs(double{g[n]} * out[n]);
  }
  if (abs_sum) *abs_sum = a;
  return s;
}

struct Difference {
  double value, bound;
};
Difference central_difference(const Tensor& dout, Tensor& q, Tensor& k, Tensor& v, Tensor& x,
                              std::int64_t flat, const AttentionOptions& o) {
  float* p = x.data_as<float>() + flat;
  const float x0 = *p;
  double abs_sum = 0;
  auto at = [&](double h) {  // (D, rounding bound) for step h
    *p = static_cast<float>(x0 + h);
    const double up = double{*p} - x0;
    const double f_up = loss(dout, q, k, v, o, &abs_sum);
    *p = static_cast<float>(x0 - h);
    const double down = x0 - double{*p};
    const double f_down = loss(dout, q, k, v, o);
    *p = x0;
    return Difference{(f_up - f_down) / (up + down), 2 * 2 * u * abs_sum / (up + down)};
  };
  const double h = 0x1p-7;
  const Difference d1 = at(h), d2 = at(2 * h);
  return {d1.value, std::abs(d2.value - d1.value) + 2 * d1.bound + d2.bound};
}

TEST(AttentionBackward, ReferenceMatchesFiniteDifferencesOfTheForward) {
  Rng rng(45);
  struct Combo {
    const char* what;
    std::int64_t Hq, Hkv;
    AttentionOptions o;
  };
  std::vector<Combo> combos(7);
  combos[0] = {"plain", 2, 2, {}};
  combos[1] = {"causal bottom_right, bool mask", 2, 2, {}};
  combos[1].o.causal = true;
  combos[1].o.alignment = Alignment::bottom_right;
  {
    Tensor m = Tensor::empty({5, 7}, DType::boolean);
    for (std::int64_t n = 0; n < m.numel(); ++n) m.data_as<std::uint8_t>()[n] = (n * 5) % 7 != 1;
    combos[1].o.mask = m;
  }
  combos[2] = {"float mask, alibi, key lengths (one 0)", 2, 2, {}};
  combos[2].o.mask = random_tensor({2, 1, 5, 7}, rng);
  combos[2].o.alibi_slopes = {0.5f, 0.25f};
  combos[2].o.key_lengths = {0, 5};
  combos[3] = {"softcap, window, explicit scale", 2, 2, {}};
  combos[3].o.softcap = 1.2;  // small: tanh far from linear, so 1 − t² matters
  combos[3].o.window = Window{2, 1};
  combos[3].o.scale = 0.9;
  combos[4] = {"dropout 0.3, GQA", 4, 2, {}};
  combos[4].o.dropout_p = 0.3;
  combos[4].o.seed = 99;
  combos[5] = {"dropout 0.3, softcap, MQA, causal", 4, 1, {}};
  combos[5].o.dropout_p = 0.3;
  combos[5].o.seed = 7;
  combos[5].o.softcap = 1.0;
  combos[5].o.causal = true;
  combos[6] = {"window right only, float mask with -inf", 2, 1, {}};
  combos[6].o.window = Window{-1, 1};
  combos[6].o.mask = random_tensor({5, 7}, rng);
  combos[6].o.mask.set({2, 0}, -std::numeric_limits<float>::infinity());

  for (const Combo& c : combos) {
    const std::int64_t B = 2, Lq = 5, Lk = 7, Dk = 4, Dv = 3;
    Tensor q = random_tensor({B, c.Hq, Lq, Dk}, rng), k = random_tensor({B, c.Hkv, Lk, Dk}, rng),
           v = random_tensor({B, c.Hkv, Lk, Dv}, rng), dout = random_tensor({B, c.Hq, Lq, Dv}, rng);
    AttentionOptions o = c.o;
    o.impl = AttentionImpl::reference;
    o.return_lse = true;
    const AttentionResult fwd = attention(q, k, v, o);
    const AttentionGradients g = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
    int nonzero = 0;
    for (int which = 0; which < 3; ++which) {
      Tensor& x = which == 0 ? q : which == 1 ? k : v;
      const Tensor& grad = which == 0 ? g.dq : which == 1 ? g.dk : g.dv;
      const char* name = which == 0 ? "dq" : which == 1 ? "dk" : "dv";
      for (int sample = 0; sample < 8; ++sample) {
        const auto flat = static_cast<std::int64_t>(rng.uniform() * double(x.numel()));
        const Difference fd = central_difference(dout, q, k, v, x, flat, o);
        const double analytic = grad.data_as<float>()[flat];
        EXPECT_LE(std::abs(analytic - fd.value), fd.bound)
            << c.what << ": " << name << " at flat index " << flat << ": backward " << analytic
            << ", finite difference " << fd.value << ", bound " << fd.bound;
        nonzero += std::abs(analytic) > 10 * fd.bound;
      }
    }
    EXPECT_GT(nonzero, 6) << c.what << ": too few gradients stand out of the noise to test anything";
  }
}

// Each (b, key/value head) is one task whose sums run in a fixed order, and dropout draws
// from (seed, index): no bit may change with the thread count, in either implementation.
TEST(AttentionBackward, ThreadCountDoesNotChangeOneBit) {
  Rng rng(46);
  Tensor q = random_tensor({2, 4, 100, 32}, rng), k = random_tensor({2, 2, 90, 32}, rng),
         v = random_tensor({2, 2, 90, 32}, rng), dout = random_tensor({2, 4, 100, 32}, rng);
  AttentionOptions o;
  o.causal = true;
  o.alignment = Alignment::bottom_right;
  o.dropout_p = 0.1;
  o.seed = 5;
  o.key_lengths = {90, 71};
  o.return_lse = true;
  const int before = num_threads();
  const AttentionResult fwd = attention(q, k, v, o);
  for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::fast}) {
    o.impl = impl;
    std::vector<AttentionGradients> results;
    for (int threads : {1, 2, 3}) {  // 3: more threads than cores, an uneven split
      set_num_threads(threads);
      results.push_back(attention_backward(dout, q, k, v, fwd.out, fwd.lse, o));
    }
    for (std::size_t n = 1; n < results.size(); ++n) {
      EXPECT_EQ(results[0].dq.to_vector(), results[n].dq.to_vector()) << "threads " << n + 1;
      EXPECT_EQ(results[0].dk.to_vector(), results[n].dk.to_vector()) << "threads " << n + 1;
      EXPECT_EQ(results[0].dv.to_vector(), results[n].dv.to_vector()) << "threads " << n + 1;
    }
  }
  set_num_threads(before);
}

TEST(AttentionBackward, AutomaticIsTheKernel) {
  Rng rng(47);
  Tensor q = random_tensor({1, 2, 20, 16}, rng), k = random_tensor({1, 2, 20, 16}, rng),
         v = random_tensor({1, 2, 20, 16}, rng), dout = random_tensor({1, 2, 20, 16}, rng);
  AttentionOptions o;
  o.return_lse = true;
  const AttentionResult fwd = attention(q, k, v, o);
  const AttentionGradients automatic = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
  o.impl = AttentionImpl::fast;
  const AttentionGradients fast = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
  EXPECT_EQ(automatic.dq.to_vector(), fast.dq.to_vector());
  EXPECT_EQ(automatic.dk.to_vector(), fast.dk.to_vector());
  o.impl = AttentionImpl::reference;
  o.return_probs = true;  // ignored by the backward
  const AttentionGradients ref = attention_backward(dout, q, k, v, fwd.out, fwd.lse, o);
  EXPECT_NE(ref.dq.to_vector(), fast.dq.to_vector());  // double vs f32: not the same path
}

using testing::expect_error;

TEST(AttentionBackward, ArgumentErrorsNameTheArgument) {
  Rng rng(48);
  Tensor q = random_tensor({2, 4, 5, 8}, rng), k = random_tensor({2, 2, 6, 8}, rng),
         v = random_tensor({2, 2, 6, 3}, rng), dout = random_tensor({2, 4, 5, 3}, rng);
  AttentionOptions o;
  o.return_lse = true;
  const AttentionResult fwd = attention(q, k, v, o);
  const Tensor& out = fwd.out;
  const Tensor& lse = fwd.lse;
  for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::fast}) {
    o.impl = impl;
    const ErrorKind value = ErrorKind::value, type = ErrorKind::type;
    expect_error([&] { attention_backward(random_tensor({2, 4, 5, 8}, rng), q, k, v, out, lse, o); },
                 "dout must have the output's shape (B, Hq, Lq, Dv) = (2, 4, 5, 3), got (2, 4, 5, 8)", value);
    expect_error([&] { attention_backward(Tensor(), q, k, v, out, lse, o); }, "dout is undefined", value);
    expect_error([&] { attention_backward(dout, q, k, v, out.slice(2, 0, 4), lse, o); },
                 "out must have the output's shape", value);
    expect_error([&] { attention_backward(dout, q, k, v, Tensor(), lse, o); }, "out is undefined", value);
    expect_error([&] { attention_backward(dout, q, k, v, out, lse.slice(1, 0, 2), o); },
                 "lse must have shape (B, Hq, Lq) = (2, 4, 5), got (2, 2, 5)", value);
    expect_error([&] { attention_backward(dout, q, k, v, out, Tensor(), o); }, "lse is undefined", value);
    expect_error([&] { attention_backward(dout, q, k, v, out, lse.to(DType::bf16), o); },
                 "lse must be f32, got bf16", type);
    expect_error([&] { attention_backward(dout, q, k, v, out, lse.unsqueeze(0), o); },
                 "lse must have shape", value);
    // The forward's own checks come first, with the forward's messages.
    expect_error([&] { attention_backward(dout, q, k.slice(3, 0, 4), v, out, lse, o); }, "k.size(3) (Dk)", value);
    AttentionOptions bad = o;
    bad.dropout_p = 1.5;
    expect_error([&] { attention_backward(dout, q, k, v, out, lse, bad); }, "dropout_p", value);
  }
}

}  // namespace
}  // namespace qkv
