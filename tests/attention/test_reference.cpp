// The reference attention against a second, independent naive twin written here
// (element access through Tensor::get, masks built as explicit index tests), plus the
// properties every implementation must keep: GQA without copies, strided views,
// thread-count independence, dropout determinism, dtypes, NaN locality, empty sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/rng.h"
#include "qkv/threads.h"
#include "attention/random_inputs.h"

namespace qkv {
namespace {

using testing::max_abs;
using testing::random_bool_mask;
using testing::random_float_mask;
using testing::random_tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Reads a broadcast mask at (b, h, i, j) by the NumPy rule, independently of the library.
double mask_at(const Tensor& mask, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const std::int64_t full[4] = {b, h, i, j};
  std::vector<std::int64_t> index;
  for (std::int64_t d = 0; d < mask.dim(); ++d) {
    const std::int64_t which = 4 - mask.dim() + d;
    index.push_back(mask.size(d) == 1 ? 0 : full[which]);
  }
  return mask.get(index);
}

struct Twin {
  std::vector<double> out;    // (B, Hq, Lq, Dv)
  std::vector<double> lse;    // (B, Hq, Lq)
  std::vector<double> probs;  // (B, Hq, Lq, Lk)
};

// The textbook definition in attention.h, written out a second time.
Twin naive_twin(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const std::int64_t B = q.size(0), Hq = q.size(1), Lq = q.size(2), Dk = q.size(3);
  const std::int64_t Hkv = k.size(1), Lk = k.size(2), Dv = v.size(3);
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(Dk)));
  Twin t;
  t.out.assign(B * Hq * Lq * Dv, 0.0);
  t.lse.assign(B * Hq * Lq, -kInf);
  t.probs.assign(B * Hq * Lq * Lk, 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < Lq; ++i) {
        const std::int64_t hk = h * Hkv / Hq;  // repeat_interleave
        const std::int64_t len = o.key_lengths.empty() ? Lk : o.key_lengths[b];
        const std::int64_t diag = o.alignment == Alignment::top_left ? i : i + len - Lq;
        std::vector<double> s(Lk, -kInf);
        for (std::int64_t j = 0; j < Lk; ++j) {
          bool ok = j < len;
          if (o.causal && j > diag) ok = false;
          if (o.window && o.window->left >= 0 && j < diag - o.window->left) ok = false;
          if (o.window && o.window->right >= 0 && j > diag + o.window->right) ok = false;
          double add = 0;
          if (o.mask.defined()) {
            const double m = mask_at(o.mask, b, h, i, j);
            if (o.mask.dtype() == DType::boolean) ok = ok && m != 0;
            else add = m;
          }
          if (!ok) continue;
          double x = 0;
          for (std::int64_t d = 0; d < Dk; ++d) x += double{q.get({b, h, i, d})} * k.get({b, hk, j, d});
          x *= scale;
          if (o.softcap) x = *o.softcap * std::tanh(x / *o.softcap);
          if (!o.alibi_slopes.empty()) x -= o.alibi_slopes[h] * std::abs(double(diag - j));
          s[j] = x + add;
        }
        double m = -kInf;
        for (double x : s) m = std::max(m, x);
        if (m == -kInf) continue;
        double sum = 0;
        for (double x : s) sum += std::exp(x - m);
        const std::int64_t row = (b * Hq + h) * Lq + i;
        t.lse[row] = m + std::log(sum);
        for (std::int64_t j = 0; j < Lk; ++j) {
          const double w = std::exp(s[j] - m) / sum;
          t.probs[row * Lk + j] = w;
          for (std::int64_t d = 0; d < Dv; ++d) t.out[row * Dv + d] += w * v.get({b, hk, j, d});
        }
      }
  return t;
}

// Both sides compute in double; the only real difference is the final rounding of the
// output to f32 (half an ulp) plus summation-order noise ~Lk·2^-53. Each output is a
// convex combination of v values, so |error| <= 2^-23 · max|v| covers it with margin 2.
void expect_matches_twin(const AttentionResult& r, const Twin& t, double max_abs_v, const char* what) {
  const double tol = 0x1p-23 * std::max(max_abs_v, 1e-30);
  const std::vector<float> out = r.out.to_vector();
  ASSERT_EQ(out.size(), t.out.size()) << what;
  double worst = 0;
  std::size_t where = 0;
  for (std::size_t n = 0; n < out.size(); ++n) {
    const double e = std::abs(out[n] - t.out[n]);
    if (!std::isnan(worst) && !(e <= worst)) { worst = e; where = n; }  // the first NaN stays
  }
  EXPECT_LE(worst, tol) << what << ": max |out - twin| = " << worst << " at flat index " << where;
  if (r.lse.defined()) {
    const std::vector<float> lse = r.lse.to_vector();
    for (std::size_t n = 0; n < lse.size(); ++n) {
      if (std::isinf(t.lse[n])) ASSERT_EQ(lse[n], -std::numeric_limits<float>::infinity()) << what << " lse " << n;
      // lse is rounded to f32: half an ulp of its magnitude, plus the same tiny noise.
      else ASSERT_NEAR(lse[n], t.lse[n], 0x1p-23 * std::max(1.0, std::abs(t.lse[n]))) << what << " lse " << n;
    }
  }
  if (r.probs.defined()) {
    const std::vector<float> probs = r.probs.to_vector();
    for (std::size_t n = 0; n < probs.size(); ++n)
      ASSERT_NEAR(probs[n], t.probs[n], 0x1p-23) << what << " probs " << n;  // p <= 1
  }
}

struct Case {
  std::int64_t B, Hq, Hkv, Lq, Lk, Dk, Dv;
};

// Randomized sweep over shapes and option combinations (seeded, so reproducible).
TEST(ReferenceAttention, MatchesNaiveTwinAcrossOptionMatrix) {
  const Case cases[] = {{1, 1, 1, 1, 1, 1, 1},  {2, 2, 1, 3, 5, 4, 3},  {1, 4, 2, 17, 17, 8, 8},
                        {2, 8, 1, 16, 33, 5, 7}, {1, 2, 2, 33, 16, 16, 4}, {1, 4, 4, 1, 40, 8, 8}};
  Rng rng(2024);
  int combos = 0;
  for (const Case& c : cases) {
    for (int variant = 0; variant < 24; ++variant) {
      Tensor q = random_tensor({c.B, c.Hq, c.Lq, c.Dk}, rng);
      Tensor k = random_tensor({c.B, c.Hkv, c.Lk, c.Dk}, rng);
      Tensor v = random_tensor({c.B, c.Hkv, c.Lk, c.Dv}, rng);
      AttentionOptions o;
      o.return_lse = true;
      o.return_probs = true;
      o.causal = variant & 1;
      o.alignment = (variant & 2) ? Alignment::bottom_right : Alignment::top_left;
      if (variant % 3 == 1) o.scale = 0.37;
      switch (variant % 6) {
        case 1:  // bool mask (Lq, Lk)
          o.mask = random_bool_mask({c.Lq, c.Lk}, rng, 0.7);
          break;
        case 2:  // float mask (B, 1, Lq, Lk) with some −inf
          o.mask = random_float_mask({c.B, 1, c.Lq, c.Lk}, rng, 0.2);
          break;
        case 3: {  // per-head bool mask (1, Hq, Lq, Lk) and key lengths
          o.mask = random_bool_mask({1, c.Hq, c.Lq, c.Lk}, rng, 0.8);
          for (std::int64_t b = 0; b < c.B; ++b) o.key_lengths.push_back(static_cast<std::int64_t>(rng.uniform() * (c.Lk + 1)));
          break;
        }
        case 4:  // window with one unbounded side, ALiBi, softcap
          o.window = Window{static_cast<std::int64_t>(rng.uniform() * 4), variant % 4 == 0 ? -1 : 1};
          for (std::int64_t h = 0; h < c.Hq; ++h) o.alibi_slopes.push_back(std::pow(2.0f, -float(h + 1)));
          o.softcap = 2.5;
          break;
        case 5: {  // full (B, Hq, Lq, Lk) float mask, half-precision, plus a window
          o.mask = random_tensor({c.B, c.Hq, c.Lq, c.Lk}, rng, 1.0, DType::f16);
          o.window = Window{2, 2};
          break;
        }
        default:
          break;
      }
      const AttentionResult r = attention(q, k, v, o);
      const Twin t = naive_twin(q, k, v, o);
      const std::string what = "case B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) +
                               " Hkv" + std::to_string(c.Hkv) + " Lq" + std::to_string(c.Lq) +
                               " Lk" + std::to_string(c.Lk) + " variant " + std::to_string(variant);
      expect_matches_twin(r, t, max_abs(v), what.c_str());
      ++combos;
    }
  }
  EXPECT_EQ(combos, 144);
}

TEST(ReferenceAttention, ProbabilityRowsSumToOneOrZeroWhenFullyMasked) {
  Rng rng(1);
  Tensor q = random_tensor({1, 2, 6, 8}, rng), k = random_tensor({1, 2, 9, 8}, rng),
         v = random_tensor({1, 2, 9, 8}, rng);
  AttentionOptions o;
  o.return_probs = true;
  o.return_lse = true;
  o.key_lengths = {4};
  o.causal = true;
  o.alignment = Alignment::bottom_right;  // diagonal i + 4 - 6: rows 0, 1 see nothing
  const AttentionResult r = attention(q, k, v, o);
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t i = 0; i < 6; ++i) {
      double sum = 0;
      for (std::int64_t j = 0; j < 9; ++j) sum += r.probs.get({0, h, i, j});
      const bool fully_masked = i < 2;
      EXPECT_NEAR(sum, fully_masked ? 0.0 : 1.0, 1e-6) << "h " << h << " i " << i;
      if (fully_masked) {
        EXPECT_EQ(r.lse.get({0, h, i}), -std::numeric_limits<float>::infinity());
        for (std::int64_t d = 0; d < 8; ++d) EXPECT_EQ(r.out.get({0, h, i, d}), 0.0f);
      }
    }
}

TEST(ReferenceAttention, GqaEqualsExplicitlyRepeatedKeysAndValues) {
  Rng rng(3);
  for (std::int64_t group : {1, 2, 4, 8}) {
    const std::int64_t Hkv = 2, Hq = Hkv * group;
    Tensor q = random_tensor({2, Hq, 5, 8}, rng), k = random_tensor({2, Hkv, 7, 8}, rng),
           v = random_tensor({2, Hkv, 7, 6}, rng);
    Tensor k_rep = Tensor::empty({2, Hq, 7, 8}), v_rep = Tensor::empty({2, Hq, 7, 6});
    for (std::int64_t h = 0; h < Hq; ++h) {
      k_rep.select(1, h).copy_from(k.select(1, h / group));
      v_rep.select(1, h).copy_from(v.select(1, h / group));
    }
    AttentionOptions o;
    o.causal = true;
    EXPECT_EQ(scaled_dot_product_attention(q, k, v, o).to_vector(),
              scaled_dot_product_attention(q, k_rep, v_rep, o).to_vector())
        << "group " << group;
  }
}

TEST(ReferenceAttention, StridedViewsNeedNoCopyAndGiveTheSameResult) {
  Rng rng(4);
  // Projections laid out (B, L, H, D), viewed as (B, H, L, D) with permute.
  Tensor q_blhd = random_tensor({2, 9, 3, 8}, rng), k_blhd = random_tensor({2, 11, 3, 8}, rng),
         v_blhd = random_tensor({2, 11, 3, 5}, rng);
  Tensor q = q_blhd.permute({0, 2, 1, 3}), k = k_blhd.permute({0, 2, 1, 3}),
         v = v_blhd.permute({0, 2, 1, 3});
  ASSERT_FALSE(q.is_contiguous());
  Tensor mask = Tensor::full({9, 11}, 1.0f, DType::boolean).transpose(0, 1).contiguous().transpose(0, 1);
  mask.set({0, 3}, 0.0f);
  AttentionOptions o;
  o.mask = mask;
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, o).to_vector(),
            scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous(), o).to_vector());
}

TEST(ReferenceAttention, DropoutIsDeterministicUnbiasedAndBounded) {
  Rng rng(6);
  Tensor q = random_tensor({1, 2, 8, 8}, rng), k = random_tensor({1, 2, 8, 8}, rng),
         v = random_tensor({1, 2, 8, 8}, rng);
  AttentionOptions o;
  o.dropout_p = 0.25;
  o.seed = 11;
  const std::vector<float> a = scaled_dot_product_attention(q, k, v, o).to_vector();
  EXPECT_EQ(a, scaled_dot_product_attention(q, k, v, o).to_vector());
  o.seed = 12;
  EXPECT_NE(a, scaled_dot_product_attention(q, k, v, o).to_vector());
  // Averaged over 400 seeds, dropout's 1/(1-p) scaling makes the mean the plain output.
  // Each output's per-seed deviation is bounded by Σ_j w_j|v_j|/(1-p) <= max|v|/(1-p), so
  // 5 standard errors of a 400-sample mean stay below 5·max|v|/(0.75·20) ≈ 0.33·max|v|;
  // the check uses the mean absolute deviation over all outputs, much tighter in practice.
  const std::vector<float> plain = scaled_dot_product_attention(q, k, v).to_vector();
  std::vector<double> mean(plain.size(), 0.0);
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    o.seed = seed;
    const std::vector<float> x = scaled_dot_product_attention(q, k, v, o).to_vector();
    for (std::size_t n = 0; n < x.size(); ++n) mean[n] += x[n] / 400.0;
  }
  double mad = 0;
  for (std::size_t n = 0; n < plain.size(); ++n) mad += std::abs(mean[n] - plain[n]) / plain.size();
  EXPECT_LT(mad, 0.05 * max_abs(v));
  o.dropout_p = 1.0;
  for (float x : scaled_dot_product_attention(q, k, v, o).to_vector()) EXPECT_EQ(x, 0.0f);
  o.dropout_p = 0.0;
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, o).to_vector(), plain);
}

TEST(ReferenceAttention, HalfPrecisionInputsComputeInFloatAndRoundOnce) {
  Rng rng(7);
  for (DType dtype : {DType::bf16, DType::f16}) {
    Tensor q = random_tensor({1, 2, 17, 16}, rng, 1.0, dtype), k = random_tensor({1, 2, 19, 16}, rng, 1.0, dtype),
           v = random_tensor({1, 2, 19, 16}, rng, 1.0, dtype);
    AttentionOptions o;
    o.causal = true;
    o.impl = AttentionImpl::reference;  // the fast kernel's bf16 path rounds P (test_fast.cpp)
    const Tensor out = scaled_dot_product_attention(q, k, v, o);
    EXPECT_EQ(out.dtype(), dtype);
    // The same computation on the exactly upcast inputs, rounded once to the dtype.
    const Tensor expected = scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), o).to(dtype);
    EXPECT_EQ(out.to_vector(), expected.to_vector()) << dtype_name(dtype);
  }
}

TEST(ReferenceAttention, DecodeWithBottomRightCausalSeesEveryKey) {
  Rng rng(8);
  Tensor q = random_tensor({1, 4, 1, 16}, rng), k = random_tensor({1, 4, 50, 16}, rng),
         v = random_tensor({1, 4, 50, 16}, rng);
  AttentionOptions causal;
  causal.causal = true;
  causal.alignment = Alignment::bottom_right;
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, causal).to_vector(),
            scaled_dot_product_attention(q, k, v).to_vector());
  causal.alignment = Alignment::top_left;  // the single query sees key 0 only: output = v[0]
  const Tensor out = scaled_dot_product_attention(q, k, v, causal);
  for (std::int64_t h = 0; h < 4; ++h)
    for (std::int64_t d = 0; d < 16; ++d) EXPECT_EQ(out.get({0, h, 0, d}), v.get({0, h, 0, d}));
}

TEST(ReferenceAttention, RawSelfAttentionIsSoftmaxOfXXTransposeTimesX) {
  Rng rng(9);
  Tensor x = random_tensor({5, 4}, rng, 0.5);
  const Tensor out = self_attention_raw(x);
  ASSERT_EQ(out.shape(), (Shape{5, 4}));
  for (std::int64_t i = 0; i < 5; ++i) {
    std::vector<double> s(5);
    double sum = 0;
    for (std::int64_t j = 0; j < 5; ++j) {
      for (std::int64_t d = 0; d < 4; ++d) s[j] += double{x.get({i, d})} * x.get({j, d});
    }
    const double m = *std::max_element(s.begin(), s.end());
    for (double& e : s) sum += (e = std::exp(e - m));
    for (std::int64_t d = 0; d < 4; ++d) {
      double expect = 0;
      for (std::int64_t j = 0; j < 5; ++j) expect += s[j] / sum * x.get({j, d});
      EXPECT_NEAR(out.get({i, d}), expect, 0x1p-23 * max_abs(x)) << i << "," << d;
    }
  }
  Tensor batched = random_tensor({3, 6, 2}, rng);
  EXPECT_EQ(self_attention_raw(batched).shape(), (Shape{3, 6, 2}));
  EXPECT_EQ(self_attention_raw(batched).select(1, 0).shape(), (Shape{3, 2}));
  EXPECT_THROW(self_attention_raw(random_tensor({2, 2, 2, 2}, rng)), Error);
}

TEST(ReferenceAttention, NanReachesOnlyTheRowsThatReadIt) {
  Rng rng(10);
  Tensor q = random_tensor({2, 2, 8, 4}, rng), k = random_tensor({2, 2, 8, 4}, rng),
         v = random_tensor({2, 2, 8, 4}, rng);
  k.set({0, 0, 5, 1}, std::numeric_limits<float>::quiet_NaN());
  v.set({1, 1, 6, 0}, std::numeric_limits<float>::quiet_NaN());
  AttentionOptions o;
  o.causal = true;  // rows i >= 5 read key 5
  o.key_lengths = {8, 6};  // batch 1 never reads key 6, so v's NaN is masked away
  const Tensor out = scaled_dot_product_attention(q, k, v, o);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 8; ++i)
        for (std::int64_t d = 0; d < 4; ++d) {
          const bool reads_nan = b == 0 && h == 0 && i >= 5;
          EXPECT_EQ(std::isnan(out.get({b, h, i, d})), reads_nan) << b << h << i << d;
        }
}

TEST(ReferenceAttention, EmptySizesGiveEmptyOrZeroOutputs) {
  Rng rng(11);
  // Lk = 0: every row is fully masked, so the output is zeros of shape (B, H, Lq, Dv).
  Tensor out = scaled_dot_product_attention(random_tensor({1, 2, 3, 4}, rng), Tensor::zeros({1, 2, 0, 4}),
                                            Tensor::zeros({1, 2, 0, 5}));
  EXPECT_EQ(out.shape(), (Shape{1, 2, 3, 5}));
  for (float x : out.to_vector()) EXPECT_EQ(x, 0.0f);
  // Lq = 0 and B = 0: empty outputs.
  EXPECT_EQ(scaled_dot_product_attention(Tensor::zeros({1, 2, 0, 4}), random_tensor({1, 2, 3, 4}, rng),
                                         random_tensor({1, 2, 3, 4}, rng)).numel(), 0);
  EXPECT_EQ(scaled_dot_product_attention(Tensor::zeros({0, 2, 3, 4}), Tensor::zeros({0, 2, 3, 4}),
                                         Tensor::zeros({0, 2, 3, 4})).shape(), (Shape{0, 2, 3, 4}));
}

}  // namespace
}  // namespace qkv
