// The pointwise kernels of a training step (src/nn/kernels/pointwise.h: GELU tanh forward and
// backward, the cross-entropy row, AdamW, the sum of squares): every ISA variant the machine
// runs bit for bit against the simd128 one (they are written to compute the same bits), and
// each against its naive twin (the C library's exp, plain-order sums) within a bound derived
// beside the check; then the public functions over several thread counts.

#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attention/kernels/flash.h"  // the ISA variants
#include "nn/check.h"
#include "nn/kernels/pointwise.h"

namespace {

using namespace qkv::testing;
namespace pd = qkv::nn::detail;
using qkv::Tensor;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Lengths below, at and above the 16 lanes and the vector widths, and a row of the LM's vocabulary.
const std::int64_t kLengths[] = {0, 1, 3, 15, 16, 17, 31, 33, 64, 1023, 1024, 1025, 8192 + 5};

// n values: normals of standard deviation `scale`, with 0, −0, ±1e-30, ±20, ±200, ±∞ and NaN
// among the first ones when `specials`.
std::vector<float> values(std::int64_t n, std::uint64_t seed, double scale, bool specials) {
  qkv::Rng rng(seed);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  if (specials) {
    const float s[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 200.0f, -200.0f, kInf, -kInf, kNaN};
    for (std::size_t i = 0; i < std::size(s) && i < v.size(); ++i) v[(i * 7) % v.size()] = s[i];
  }
  return v;
}

// Bit for bit (NaNs included), and the 4 floats after `n` untouched.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, std::int64_t n,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << what << ": element " << i << " of " << n << ": " << got[i] << " against " << want[i];
}

// Output buffers: n floats and 4 sentinels after them.
std::vector<float> buffer(std::int64_t n) { return std::vector<float>(static_cast<std::size_t>(n + 4), 1234.5f); }

struct Outputs {
  std::vector<float> gelu, dgelu, p, m, v, ce_grad;
  std::vector<double> ce_loss;
  std::vector<std::int64_t> ce_argmax;
  float squares = 0;
};

Outputs run(const pd::PointwiseKernels& k, std::int64_t n) {
  Outputs o;
  const std::vector<float> x = values(n, 1 + n, 4.0, true), dy = values(n, 2 + n, 1.0, false);
  o.gelu = buffer(n);
  o.dgelu = buffer(n);
  k.gelu_tanh(x.data(), o.gelu.data(), n);
  k.gelu_tanh_backward(dy.data(), x.data(), o.dgelu.data(), n);
  // AdamW from a state that is not zero: θ, m, v as after some steps (v >= 0).
  o.p = values(n, 3 + n, 1.0, false), o.m = values(n, 4 + n, 1e-3, false), o.v = values(n, 5 + n, 1e-3, false);
  for (float& e : o.v) e = e * e;
  for (auto* t : {&o.p, &o.m, &o.v}) t->resize(static_cast<std::size_t>(n + 4), 1234.5f);
  const std::vector<float> g = values(n, 6 + n, 1e-2, false);
  k.adamw({0.999f, 0.9f, 0.999f, 1e-3f / 0.271f, 1.0f / std::sqrt(0.00299f), 1e-8f}, o.p.data(), o.m.data(),
          o.v.data(), g.data(), n);
  o.squares = k.sum_squares(values(n, 7 + n, 1.0, false).data(), n);
  // Cross-entropy rows of width n: plain, with −∞ entries (masked logits) and with a
  // label smoothing, the target anywhere in the row.
  if (n >= 1) {
    std::vector<float> row = values(n, 8 + n, 3.0, false);
    for (int variant = 0; variant < 3; ++variant) {
      if (variant == 1 && n < 2) continue;  // a row of −∞ alone has no probabilities
      if (variant == 1)
        for (std::int64_t i = 0; i < n; i += 3) row[static_cast<std::size_t>(i)] = -kInf;
      const std::int64_t t = variant == 0 ? 0 : variant == 1 ? 1 : (n - 1) % 3 == 0 && n > 1 ? n - 2 : n - 1;  // never −∞
      std::vector<float> d = buffer(n);
      const pd::CrossEntropyRow r = k.cross_entropy_row(row.data(), n, t, variant == 2 ? 0.1 : 0.0, 1.0 / 7, d.data());
      const pd::CrossEntropyRow r2 = k.cross_entropy_row(row.data(), n, t, variant == 2 ? 0.1 : 0.0, 1.0 / 7, nullptr);
      EXPECT_EQ(std::bit_cast<std::uint64_t>(r.loss), std::bit_cast<std::uint64_t>(r2.loss))
          << "the loss must not depend on whether the gradient is asked for";
      o.ce_loss.push_back(r.loss);
      o.ce_argmax.push_back(r.argmax);
      o.ce_grad.insert(o.ce_grad.end(), d.begin(), d.end());
    }
  }
  return o;
}

TEST(PointwiseKernels, EveryIsaComputesTheSimd128Bits) {
  const pd::PointwiseKernels& base = pd::pointwise_kernels(qkv::detail::parse_isa("simd128"));
  for (qkv::detail::Isa isa : qkv::detail::tested_isas()) {
    const std::string name = qkv::detail::isa_name(isa);
    for (const std::int64_t n : kLengths) {
      const Outputs want = run(base, n), got = run(pd::pointwise_kernels(isa), n);
      const std::string what = name + ", n = " + std::to_string(n);
      expect_same_bits(got.gelu, want.gelu, n, what + ", gelu_tanh");
      expect_same_bits(got.dgelu, want.dgelu, n, what + ", gelu_tanh_backward");
      expect_same_bits(got.p, want.p, n, what + ", adamw θ");
      expect_same_bits(got.m, want.m, n, what + ", adamw m");
      expect_same_bits(got.v, want.v, n, what + ", adamw v");
      expect_same_bits(got.ce_grad, want.ce_grad, n, what + ", cross_entropy_row's gradient");
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got.squares), std::bit_cast<std::uint32_t>(want.squares))
          << what << ", sum_squares " << got.squares << " against " << want.squares;
      EXPECT_EQ(got.ce_argmax, want.ce_argmax) << what;
      for (std::size_t r = 0; r < want.ce_loss.size(); ++r)
        EXPECT_EQ(std::bit_cast<std::uint64_t>(got.ce_loss[r]), std::bit_cast<std::uint64_t>(want.ce_loss[r]))
            << what << ", cross_entropy_row's loss, row " << r;
    }
  }
}

// Each variant against the naive twin, with the bounds:
// - gelu_tanh: both evaluate in double and round once to float; their exps differ by a few
//   ulp of double (2^-52), so the float results are equal or, where the double value lies
//   within that of a rounding boundary, one ulp apart: |Δ| <= 2^-23·|y|. Against long
//   double, the forward keeps the naive one's bound: half an ulp, kU·|y| (+1e-30 for zeros).
// - gelu_tanh_backward: in float; e = e^(−2u) within 2 ulp against the C library's ½, so
//   s = 1/(1 + e) within 3u relative and 1 − s within 3u·s absolute; the two terms of
//   dy·(s + 2x·s(1 − s)·c(1 + 3a·x²)) carry ~8 roundings more: |Δ| <= 16u·M + 1e-35·|dy|, M =
//   |dy|·(s + |2x·c(1 + 3a·x²)|·s) (the terms' size; they cancel in part for x near −1.5);
//   1e-35: e^(−2u) past 88, where this one saturates to ∞ early (pointwise_body.inc).
// - adamw: the same IEEE operations in the same order: bit for bit.
// - sum_squares against double: 16 lanes of n/16 terms, then 4 tree levels and the tail:
//   |Δ| <= (n/16 + 20)·u·Σx² (Higham §3.1: a sum of k terms >= 0 is within (k−1)u·Σ).
// - cross_entropy_row: each e^(x − max) within 2 ulp (4u), so Σe within 4u relative (sums in
//   double add nothing at this size) and the loss (1 − ε + ε)·log Σe within 4u + 1e-12·|loss|
//   of the naive (whose own exps are within u); the gradient (e/Σe − ε/V)·scale within
//   9u·(p·scale) + u·|d|: two relative errors of 4u and the rounding to float.
TEST(PointwiseKernels, MatchTheirNaiveTwinsWithinDerivedBounds) {
  const pd::PointwiseKernels& naive = pd::pointwise_naive();
  const double c = std::sqrt(2.0 / M_PI), a = 0.044715;
  for (qkv::detail::Isa isa : qkv::detail::tested_isas()) {
    const std::string name = qkv::detail::isa_name(isa);
    const pd::PointwiseKernels& k = pd::pointwise_kernels(isa);
    // A dense sweep of [−16, 16] for both GELU loops.
    const std::int64_t n = 32 * 4096 + 1;
    std::vector<float> x(static_cast<std::size_t>(n)), dy = values(n, 99, 1.0, false);
    for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(-16.0 + static_cast<double>(i) / 4096.0);
    std::vector<float> y(x.size()), yn(x.size()), d(x.size()), dn(x.size());
    k.gelu_tanh(x.data(), y.data(), n);
    naive.gelu_tanh(x.data(), yn.data(), n);
    k.gelu_tanh_backward(dy.data(), x.data(), d.data(), n);
    naive.gelu_tanh_backward(dy.data(), x.data(), dn.data(), n);
    double worst_y = 0, worst_long = 0, worst_d = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      worst_y = std::max(worst_y, std::abs(y[i] - yn[i]) - 0x1p-23 * std::abs(yn[i]));
      const long double u = std::sqrt(2.0L / M_PIl) * (v + 0.044715L * v * v * v);
      const auto want = static_cast<double>(v / (1.0L + std::exp(-2.0L * u)));
      worst_long = std::max(worst_long, std::abs(y[i] - want) - (kU * std::abs(want) + 1e-30));
      const double s = 1.0 / (1.0 + std::exp(-2.0 * c * (v + a * v * v * v)));
      const double M = std::abs(dy[i]) * (s + std::abs(2 * v * c * (1 + 3 * a * v * v)) * s);
      worst_d = std::max(worst_d, std::abs(d[i] - dn[i]) - (16 * kU * M + 1e-35 * std::abs(dy[i])));
    }
    EXPECT_LE(worst_y, 0.0) << name << " gelu_tanh against its naive twin: worst excess";
    EXPECT_LE(worst_long, 0.0) << name << " gelu_tanh against long double: worst excess over half an ulp";
    EXPECT_LE(worst_d, 0.0) << name << " gelu_tanh_backward against its naive twin: worst excess";

    for (const std::int64_t len : kLengths) {
      const std::string what = name + ", n = " + std::to_string(len);
      const Outputs got = run(k, len), want = run(naive, len);
      expect_same_bits(got.p, want.p, len, what + ", adamw θ");
      expect_same_bits(got.m, want.m, len, what + ", adamw m");
      expect_same_bits(got.v, want.v, len, what + ", adamw v");
      // NaN where the naive one has NaN (x = NaN), else the GELU bounds above on these inputs.
      for (std::int64_t i = 0; i < len; ++i) {
        const auto j = static_cast<std::size_t>(i);
        ASSERT_EQ(std::isnan(got.gelu[j]), std::isnan(want.gelu[j])) << what << " gelu_tanh at " << i;
        ASSERT_EQ(std::isnan(got.dgelu[j]), std::isnan(want.dgelu[j])) << what << " gelu_tanh_backward at " << i;
        if (std::isnan(want.gelu[j])) continue;
        if (std::isinf(want.gelu[j])) {  // x = +∞
          EXPECT_EQ(got.gelu[j], want.gelu[j]) << what << " at " << i;
          continue;
        }
        EXPECT_LE(std::abs(got.gelu[j] - want.gelu[j]), 0x1p-23 * std::abs(want.gelu[j])) << what << " at " << i;
      }
      const std::vector<float> sq = values(len, 7 + len, 1.0, false);
      double exact = 0;
      for (const float e : sq) exact += static_cast<double>(e) * e;
      EXPECT_LE(std::abs(got.squares - exact), (static_cast<double>(len) / 16 + 20) * kU * exact) << what;
      ASSERT_EQ(got.ce_loss.size(), want.ce_loss.size());
      EXPECT_EQ(got.ce_argmax, want.ce_argmax) << what;
      for (std::size_t r = 0; r < want.ce_loss.size(); ++r) {
        if (!std::isfinite(want.ce_loss[r]))  // +∞: a label smoothing on a class of probability 0
          EXPECT_EQ(got.ce_loss[r], want.ce_loss[r]) << what << ", row " << r;
        else
          EXPECT_LE(std::abs(got.ce_loss[r] - want.ce_loss[r]), 4 * kU + 1e-12 * std::abs(want.ce_loss[r]))
              << what << ", row " << r;
        for (std::int64_t i = 0; i < len; ++i) {
          const auto j = r * static_cast<std::size_t>(len + 4) + static_cast<std::size_t>(i);
          // p·scale from the naive gradient: d + target part (at most (1 − ε)·scale, ≤ 1/7)
          const double p_scale = std::abs(want.ce_grad[j]) + 1.0 / 7;
          EXPECT_LE(std::abs(got.ce_grad[j] - want.ce_grad[j]), 9 * kU * p_scale + kU * std::abs(want.ce_grad[j]))
              << what << ", row " << r << ", class " << i;
        }
      }
    }
  }
}

// The public functions give the same bits on 1, 2 and 3 threads (rows and chunks are split
// among threads; nothing is summed across a split in a thread-dependent order).
TEST(PointwiseKernels, PublicFunctionsDoNotDependOnTheThreadCount) {
  const int saved = qkv::num_threads();
  const std::int64_t N = 37, V = 8192 + 3;
  const Tensor logits = randn({N, V}, 5, 3.0);
  std::vector<std::int64_t> targets(static_cast<std::size_t>(N));
  for (std::int64_t r = 0; r < N; ++r) targets[static_cast<std::size_t>(r)] = (r * 977) % V;
  targets[3] = -100;  // ignored
  const Tensor x = randn({300, 1027}, 6, 4.0), dy = randn({300, 1027}, 7, 1.0);
  std::vector<std::vector<float>> seen;
  std::vector<double> losses, norms;
  for (const int threads : {1, 2, 3}) {
    qkv::set_num_threads(threads);
    Tensor dlogits;
    losses.push_back(train::cross_entropy(logits, targets, &dlogits, 0.1).loss);
    Tensor g1 = randn({70000}, 8, 1.0), g2 = randn({513}, 9, 1.0);
    Tensor p1 = randn({70000}, 10, 1.0), p2 = randn({513}, 11, 1.0);
    norms.push_back(train::clip_grad_norm({{"a", &g1}, {"b", &g2}}, 1.0));
    train::AdamW opt({{"a", &p1}, {"b", &p2}}, {});
    opt.step({{"a", &g1}, {"b", &g2}}, 1e-3);
    opt.step({{"a", &g1}, {"b", &g2}}, 1e-3);
    std::vector<float> all = dlogits.to_vector();
    for (const Tensor& t : {nn::gelu(x, nn::GeluApproximation::tanh),
                            nn::gelu_backward(dy, x, nn::GeluApproximation::tanh), g1, g2, p1, p2}) {
      const std::vector<float> v = t.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    seen.push_back(std::move(all));
  }
  qkv::set_num_threads(saved);
  for (std::size_t i = 1; i < seen.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint64_t>(losses[i]), std::bit_cast<std::uint64_t>(losses[0])) << i + 1 << " threads";
    EXPECT_EQ(std::bit_cast<std::uint64_t>(norms[i]), std::bit_cast<std::uint64_t>(norms[0])) << i + 1 << " threads";
    EXPECT_TRUE(std::memcmp(seen[i].data(), seen[0].data(), seen[0].size() * sizeof(float)) == 0)
        << i + 1 << " threads: outputs differ from 1 thread's";
  }
}

}  // namespace
