// The fused kernel (every ISA variant this CPU runs, and the AMX tile model) against the reference, across tile
// boundaries, head dims, dtypes, the option matrix and thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention/kernels/flash.h"
#include "qkv/attention.h"
#include "qkv/rng.h"
#include "qkv/threads.h"
#include "attention/random_inputs.h"

namespace qkv {
namespace {

using testing::max_abs;
using testing::max_row_norm;
using testing::random_bool_mask;
using testing::random_float_mask;
using testing::random_tensor;

using detail::Isa;
constexpr double u = 0x1p-24;  // f32 unit roundoff

// Forward error of the f32 kernel against the double reference, derived term by term:
// - a score is an f32 dot product of length Dk (q pre-scaled): |δs| <= (Dk + 2)·u·scale·‖q‖·‖k‖
//   (Higham's γ_n bound with Cauchy–Schwarz); softcap adds ≤ 6u·c (s·(1/c) rounds twice,
//   the kernel's tanh <= 2.2 ulp (measured: vector.inc), ·c once); ALiBi
//   and float masks add one rounding of their magnitude;
// - a weight exp(s − m)/l then has relative error <= 2·max|δs| (numerator and the max/sum)
//   plus the kernel's exp (<= 7.2u relative, measured: vector.inc) in numerator and
//   sum, the running sum (Lk·u) and the division (u);
// - the output Σ w_j v_j adds Lk·u relative, so |Δout| <= (2δs + (2Lk + 16)·u)·max|v|,
//   times 1/(1 − p) under dropout; bf16/f16 outputs add one rounding of the result (both
//   sides round, so one ulp at max|v|); on AVX512-BF16 the weights are rounded to bf16
//   for P·V (relative 2^-9 each, so at most 2^-9·max|v| more: one more bf16 ulp).
struct Bounds {
  double out, lse;
};
Bounds derive_bounds(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const std::int64_t Dk = q.size(3), Lk = k.size(2);
  const double scale = o.scale.value_or(1.0 / std::sqrt(double(std::max<std::int64_t>(Dk, 1))));
  const double score_mag = std::abs(scale) * max_row_norm(q) * max_row_norm(k);
  double ds = (Dk + 2) * u * score_mag;
  if (o.softcap) ds += 6 * u * *o.softcap;
  double extra_mag = 0;
  for (float s : o.alibi_slopes) extra_mag = std::max(extra_mag, std::abs(s) * double(q.size(2) + Lk));
  if (o.mask.defined() && o.mask.dtype() != DType::boolean) extra_mag += max_abs(o.mask);
  ds += 2 * u * (score_mag + extra_mag);
  const double keep = o.dropout_p > 0 && o.dropout_p < 1 ? 1.0 / (1.0 - o.dropout_p) : 1.0;
  double out = (2 * ds + (2 * Lk + 16) * u) * max_abs(v) * keep;
  if (q.dtype() == DType::bf16) out += 2 * 0x1p-8 * max_abs(v) * keep;
  if (q.dtype() == DType::f16) out += 0x1p-11 * max_abs(v) * keep;
  return {out, ds + (Lk + 8) * u + u * (score_mag + extra_mag)};
}

// Compares fast with reference; returns the worst output error seen (for the log).
double expect_fast_matches_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                     AttentionOptions o, Isa isa, const std::string& what) {
  o.return_lse = true;
  o.impl = AttentionImpl::reference;
  const AttentionResult ref = attention(q, k, v, o);
  const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
  const AttentionResult fast = detail::flash_attention(problem, q, k, v, true, isa);
  const Bounds bound = derive_bounds(q, k, v, o);
  const std::vector<float> a = fast.out.to_vector(), b = ref.out.to_vector();
  EXPECT_EQ(fast.out.shape(), ref.out.shape()) << what;
  EXPECT_EQ(fast.out.dtype(), ref.out.dtype()) << what;
  double worst = 0;
  std::size_t where = 0;
  for (std::size_t n = 0; n < a.size(); ++n) {
    if (std::isnan(b[n])) {
      EXPECT_TRUE(std::isnan(a[n])) << what << " index " << n << ": reference NaN, fast " << a[n];
      continue;
    }
    const double e = std::abs(double{a[n]} - b[n]);
    if (!std::isnan(worst) && !(e <= worst)) { worst = e; where = n; }  // the first NaN stays
  }
  EXPECT_LE(worst, bound.out) << what << " [" << detail::isa_name(isa) << "]: max |fast - reference| = "
                              << worst << " at flat index " << where << ", bound " << bound.out;
  const std::vector<float> la = fast.lse.to_vector(), lb = ref.lse.to_vector();
  for (std::size_t n = 0; n < la.size(); ++n) {
    if (std::isinf(lb[n]) || std::isnan(lb[n])) {
      EXPECT_EQ(std::isnan(la[n]), std::isnan(lb[n])) << what << " lse " << n;
      if (std::isinf(lb[n])) EXPECT_EQ(la[n], lb[n]) << what << " lse " << n;
      continue;
    }
    EXPECT_NEAR(la[n], lb[n], bound.lse * std::max(1.0, double{std::abs(lb[n])}))
        << what << " [" << detail::isa_name(isa) << "] lse " << n;
  }
  return worst;
}

// Tasks are 64 queries, tiles 64 keys, microtiles 4-32 wide, vectors 4-16 lanes: the
// lengths and head dims straddle all of them.
TEST(FastAttention, MatchesReferenceAcrossTileBoundariesAndHeadDims) {
  Rng rng(31);
  const std::int64_t lengths[] = {1, 4, 5, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1000};
  const std::int64_t dims[] = {1, 7, 32, 64, 72, 80, 96, 100, 128, 256};
  for (Isa isa : detail::tested_isas()) {
    int n = 0;
    for (std::int64_t L : lengths)
      for (std::int64_t D : dims) {
        if ((L * D + n) % 4 != 0 && L > 65) continue;  // a sample of the big ones
        const std::int64_t Lk = (n % 2) ? L : L + 19;   // square and Lq != Lk
        Tensor q = random_tensor({1, 2, L, D}, rng), k = random_tensor({1, 2, Lk, D}, rng),
               v = random_tensor({1, 2, Lk, D + (n % 3)}, rng);
        AttentionOptions o;
        o.causal = n % 4 == 1;
        o.alignment = n % 8 == 5 ? Alignment::bottom_right : Alignment::top_left;
        expect_fast_matches_reference(q, k, v, o, isa,
                                      "L " + std::to_string(L) + " Lk " + std::to_string(Lk) +
                                          " D " + std::to_string(D) + (o.causal ? " causal" : ""));
        ++n;
      }
    EXPECT_GT(n, 60);
  }
}

TEST(FastAttention, MatchesReferenceAcrossTheOptionMatrix) {
  Rng rng(32);
  for (Isa isa : detail::tested_isas()) {
    for (int variant = 0; variant < 48; ++variant) {
      const std::int64_t B = 2, Hkv = 2, group = std::int64_t{1} << (variant % 4), Hq = Hkv * group;
      const std::int64_t Lq = (variant % 5 == 0) ? 1 : 37 + variant, Lk = 70 + 3 * variant, D = 24;
      Tensor q = random_tensor({B, Hq, Lq, D}, rng), k = random_tensor({B, Hkv, Lk, D}, rng),
             v = random_tensor({B, Hkv, Lk, D}, rng);
      AttentionOptions o;
      o.causal = variant & 1;
      o.alignment = (variant & 2) ? Alignment::bottom_right : Alignment::top_left;
      if (variant % 7 == 3) o.scale = 0.2;
      switch (variant % 6) {
        case 1: o.mask = random_bool_mask({Lq, Lk}, rng, 0.6); break;
        case 2:
          o.mask = random_float_mask({B, 1, Lq, Lk}, rng, 0.3);
          o.key_lengths = {Lk - 5, 3};
          break;
        case 3:
          o.window = Window{variant % 4 == 3 ? -1 : 9, 4};
          o.softcap = 3.0;
          break;
        case 4:
          for (std::int64_t h = 0; h < Hq; ++h) o.alibi_slopes.push_back(std::pow(2.0f, -float(h) / 2));
          o.key_lengths = {0, Lk / 2};  // batch 0 fully masked
          break;
        case 5:
          o.dropout_p = 0.2;
          o.seed = static_cast<std::uint64_t>(variant);
          o.mask = random_tensor({1, Hq, Lq, Lk}, rng, 1.0, DType::bf16);
          break;
        default:
          o.window = Window{20, -1};
          break;
      }
      expect_fast_matches_reference(q, k, v, o, isa, "variant " + std::to_string(variant));
    }
  }
}

// Decode shapes (Lq <= 16, long keys) take the split-KV path: chunks of keys computed
// apart and merged. Chunk edges, empty chunks and every option must survive the merge.
TEST(FastAttention, SplitKvDecodeMatchesReference) {
  Rng rng(37);
  for (Isa isa : detail::tested_isas()) {
    int n = 0;
    for (std::int64_t Lq : {1, 3, 16})
      for (std::int64_t Lk : {1025, 1536, 2100}) {
        // K/V as a strided view into a larger cache (B, Hkv, capacity, D), as a KV cache is.
        Tensor k_cache = random_tensor({2, 2, Lk + 37, 40}, rng), v_cache = random_tensor({2, 2, Lk + 37, 40}, rng);
        Tensor k = k_cache.slice(2, 0, Lk), v = v_cache.slice(2, 0, Lk);
        Tensor q = random_tensor({2, 4, Lq, 40}, rng);
        AttentionOptions o;
        o.causal = n % 2 == 0;
        o.alignment = Alignment::bottom_right;
        switch (n % 5) {
          case 1: o.key_lengths = {Lk - 513, 700}; break;  // chunks past the length: empty
          case 2: o.window = Window{600, 0}; break;        // only the last chunks attended
          case 3: {
            o.dropout_p = 0.1;
            o.seed = 3;
            o.mask = random_bool_mask({Lq, Lk}, rng, 0.9);
            break;
          }
          case 4: o.key_lengths = {0, Lk}; break;  // batch 0 fully masked
          default: break;
        }
        expect_fast_matches_reference(q, k, v, o, isa, "decode Lq " + std::to_string(Lq) + " Lk " +
                                                           std::to_string(Lk) + " variant " + std::to_string(n % 5));
        ++n;
      }
    // NaN in one key of one chunk: only the rows that read it turn NaN.
    Tensor q = random_tensor({1, 2, 1, 16}, rng), k = random_tensor({1, 2, 3000, 16}, rng),
           v = random_tensor({1, 2, 3000, 16}, rng);
    k.set({0, 1, 2500, 0}, std::numeric_limits<float>::quiet_NaN());
    v.set({0, 0, 2999, 0}, std::numeric_limits<float>::quiet_NaN());
    AttentionOptions o;
    o.key_lengths = {2999};  // v's NaN sits past the length: never read
    const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
    const Tensor out = detail::flash_attention(problem, q, k, v, false, isa).out;
    EXPECT_FALSE(std::isnan(out.get({0, 0, 0, 0}))) << detail::isa_name(isa);
    EXPECT_TRUE(std::isnan(out.get({0, 1, 0, 0}))) << detail::isa_name(isa);
  }
}

// The kernels decide dropout on integers (counter_bits >= dropout_threshold(p)), the
// references on doubles (counter_uniform >= p): the same decision for every 53-bit value.
// Checked at the threshold and on either side of it, for p on and between multiples of
// 2^-53, and for the keeps of a real problem's counters.
TEST(FastAttention, DropoutThresholdDecidesAsTheUniformDoes) {
  Rng rng(48);
  std::vector<double> ps = {0.0, 1.0, 0.5, 0.1, 1.0 / 3, 0x1p-53, 3 * 0x1p-53, 1 - 0x1p-53};
  for (int n = 0; n < 2000; ++n) ps.push_back(rng.uniform());
  for (std::size_t n = 0, count = ps.size(); n < count; ++n) {
    ps.push_back(std::nextafter(ps[n], 0.0));
    ps.push_back(std::nextafter(ps[n], 1.0));
  }
  constexpr std::int64_t kTop = std::int64_t{1} << 53;  // 53-bit values lie in [0, kTop)
  for (double p : ps) {
    if (p < 0 || p > 1) continue;
    const auto threshold = static_cast<std::int64_t>(detail::dropout_threshold(p));
    for (std::int64_t x = threshold - 2; x <= threshold + 2; ++x)
      if (x >= 0 && x < kTop)
        ASSERT_EQ(x >= threshold, static_cast<double>(x) * 0x1p-53 >= p) << "p " << p << " x " << x;
  }
  Tensor q = random_tensor({2, 3, 40, 8}, rng), k = random_tensor({2, 3, 50, 8}, rng);
  AttentionOptions o;
  o.dropout_p = 0.3;
  o.seed = 77;
  const detail::AttentionProblem p = detail::make_problem(q, k, k, o);
  int kept = 0;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 3; ++h)
      for (std::int64_t i = 0; i < 40; ++i)
        for (std::int64_t j = 0; j < 50; ++j) {
          const bool keeps = detail::counter_bits(p.dropout_key, p.dropout_counter(b, h, i, j)) >= p.dropout_threshold;
          ASSERT_EQ(keeps, p.dropout_keeps(b, h, i, j)) << b << " " << h << " " << i << " " << j;
          kept += keeps;
        }
  EXPECT_NEAR(kept / 12000.0, 0.7, 0.03);
}

// Mask tensors on whole tiles (more than 4 queries) in each layout the kernel reads
// differently: broadcast over the queries (a padding mask, one value per key), over the
// keys (one per query), by query with unit key stride (transposed kLanes × kLanes in
// registers), and a transposed view (key stride Lq). Lengths straddle the 64-query tasks,
// the 64-key tiles and the vectors; ALiBi and causal ride along (terms before and after).
TEST(FastAttention, MaskLayoutsOnTilesMatchReference) {
  Rng rng(47);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (Isa isa : detail::tested_isas()) {
    int n = 0;
    for (std::int64_t Lq : {5, 70, 129})
      for (std::int64_t Lk : {33, 130}) {
        const std::int64_t B = 2, H = 2, D = 24;
        Tensor q = random_tensor({B, H, Lq, D}, rng), k = random_tensor({B, H, Lk, D}, rng),
               v = random_tensor({B, H, Lk, D}, rng);
        for (int layout = 0; layout < 4; ++layout, ++n) {
          AttentionOptions o;
          o.causal = n % 3 == 1;
          o.alignment = Alignment::bottom_right;
          if (n % 4 == 2) o.alibi_slopes = {0.5f, 0.125f};
          std::string what;
          switch (layout) {
            case 0:
              o.mask = random_bool_mask({B, 1, 1, Lk}, rng, 0.7);
              what = "bool (B, 1, 1, Lk)";
              break;
            case 1: {
              Tensor m = random_tensor({B, H, Lq, 1}, rng, 3.0);
              m.set({1, 0, Lq / 2, 0}, -kInf);  // a query that sees nothing
              o.mask = m;
              what = "float (B, H, Lq, 1)";
              break;
            }
            case 2: {
              Tensor m = random_tensor({1, H, Lq, Lk}, rng, 2.0, n % 2 ? DType::f16 : DType::f32);
              for (std::int64_t j = 0; j < Lk; j += 4) m.set({0, 1, Lq - 1, j}, -kInf);
              o.mask = m;
              what = "float (1, H, Lq, Lk)";
              break;
            }
            default:
              o.mask = random_bool_mask({Lk, Lq}, rng, 0.6).transpose(0, 1);
              what = "bool (Lk, Lq) transposed";
              break;
          }
          expect_fast_matches_reference(q, k, v, o, isa,
                                        what + " Lq " + std::to_string(Lq) + " Lk " + std::to_string(Lk));
        }
      }
  }
}

// Softcap's tanh, score by score: one key k = e_0 and queries q_i = x_i·e_0 with scale 1
// make each row's lse exactly the row's capped score c·tanh(x_i/c) (lse = m + log l, l = 1
// up to exp's rounding), compared with double tanh. x/c sweeps 1e-7 to 1e4 in both signs
// (both of the kernel tanh's branches and its cut at 0.55), ±0, ±inf (c·tanh = ±c) and NaN,
// through few queries (the decode path, Lq = 1 per batch) and whole tiles (Lq = 300).
// The error allowed: s·(1/c) rounds twice, tanh <= 2.2 ulp, ·c and the lse's m + log l
// once each: 6u relative, plus log l <= 2u absolute.
TEST(FastAttention, SoftcapScoresMatchDoubleTanh) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const double c = 3.0;
  std::vector<float> xs = {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), 0.55f * 3.0f,
                           std::nextafter(0.55f * 3.0f, 0.0f)};
  for (double t = 1e-7; t < 1e4; t *= 1.1) {
    xs.push_back(static_cast<float>(t * c));
    xs.push_back(static_cast<float>(-t * c));
  }
  const auto n = static_cast<std::int64_t>(xs.size());
  constexpr std::int64_t D = 16;  // whole vectors on every path: few queries take it
  for (Isa isa : detail::tested_isas())
    for (bool few : {true, false}) {
      // few: (n, 1, 1, D) queries, one per batch; else (1, 1, n, D), tiles of 64 queries.
      const std::int64_t B = few ? n : 1, Lq = few ? 1 : n;
      Tensor q = Tensor::zeros({B, 1, Lq, D}), k = Tensor::zeros({B, 1, 1, D}), v = Tensor::zeros({B, 1, 1, D});
      for (std::int64_t i = 0; i < n; ++i) q.data_as<float>()[i * D] = xs[i];
      for (std::int64_t b = 0; b < B; ++b) k.data_as<float>()[b * D] = 1.0f;
      AttentionOptions o;
      o.scale = 1.0;
      o.softcap = c;
      const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
      const std::vector<float> lse = detail::flash_attention(problem, q, k, v, true, isa).lse.to_vector();
      for (std::int64_t i = 0; i < n; ++i) {
        const std::string what = std::string(detail::isa_name(isa)) + (few ? " few queries" : " tiles") +
                                 ": x = " + std::to_string(xs[i]);
        if (std::isnan(xs[i])) {
          EXPECT_TRUE(std::isnan(lse[i])) << what;
          continue;
        }
        const double expected = c * std::tanh(double{xs[i]} / c);
        EXPECT_NEAR(lse[i], expected, 6 * u * std::abs(expected) + 2 * u) << what;
      }
    }
}

// A cap too small for 1/c in f32 (1e-40): every score ±c or 0, so the weights are
// uniform and finite, as the reference's (s = 0 must not become 0·inf = NaN).
TEST(FastAttention, TinySoftcapGivesUniformWeights) {
  Rng rng(45);
  for (Isa isa : detail::tested_isas())
    for (std::int64_t Lq : {1, 70}) {
      Tensor q = random_tensor({1, 2, Lq, 16}, rng), k = random_tensor({1, 2, 33, 16}, rng),
             v = random_tensor({1, 2, 33, 16}, rng);
      for (std::int64_t d = 0; d < 16; ++d) k.set({0, 0, 5, d}, 0.0f);  // scores exactly 0
      AttentionOptions o;
      o.softcap = 1e-40;
      expect_fast_matches_reference(q, k, v, o, isa, "softcap 1e-40, Lq " + std::to_string(Lq));
    }
}

// Few queries without dropout (decode from a KV cache; causal, windows, ALiBi, softcap
// and mask tensors included) are scored a vector of keys at a time with the softmax along
// the keys (attend_few_queries); anything it does not take, or a non-finite score or
// output, goes through attend() instead. Key
// counts straddle the vectors (4, 8, 16 lanes), the 64-key tiles and the split-KV chunks;
// Dk = 40 is a whole number of vectors only below 16 lanes; D = 64 and 80 take the
// narrower P·V microtiles on AVX-512; K/V are views into a cache.
TEST(FastAttention, FewQueriesScoredAlongKeysMatchReference) {
  Rng rng(43);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (Isa isa : detail::tested_isas()) {
    int n = 0;
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      for (std::int64_t Lq : {1, 2, 4})
        for (std::int64_t Lk : {1, 7, 16, 17, 63, 64, 65, 200, 1100})
          for (std::int64_t D : {16, 40, 64, 80, 128}) {
            if ((n++ + Lk) % 3 != 0 && Lk > 65) continue;  // a sample of the long ones
            const std::int64_t Hkv = 2, group = n % 2 ? 2 : 1, capacity = Lk + 9;
            Tensor k = random_tensor({1, Hkv, capacity, D}, rng, 1.0, dtype).slice(2, 0, Lk);
            Tensor v = random_tensor({1, Hkv, capacity, D}, rng, 1.0, dtype).slice(2, 0, Lk);
            Tensor q = random_tensor({1, Hkv * group, Lq, D}, rng, 1.0, dtype);
            AttentionOptions o;
            o.causal = n % 4 == 1;  // bottom-right with Lq > 1: the first queries see fewer keys
            o.alignment = n % 8 == 7 ? Alignment::top_left : Alignment::bottom_right;
            if (n % 5 == 2) o.key_lengths = {Lk / 2 + 1};
            if (n % 6 == 3) o.window = n % 12 == 3 ? Window{30, 0} : Window{-1, 2};
            if (n % 7 == 5)
              for (std::int64_t h = 0; h < Hkv * group; ++h) o.alibi_slopes.push_back(0.25f / float(h + 1));
            if (n % 3 == 1) o.softcap = 1.5;  // scores ~N(0, 1): both of tanh's branches
            // Mask tensors: bool broadcast over heads and queries (a padding mask), bool
            // per query, float per head and query with −inf holes, float in the inputs'
            // dtype broadcast over keys (stride 0), each beside the options above.
            switch (n % 5) {
              case 1: o.mask = random_bool_mask({1, 1, 1, Lk}, rng, 0.8); break;
              case 2: o.mask = random_bool_mask({Lq, Lk}, rng, 0.5); break;
              case 3: {
                Tensor mask = random_tensor({1, Hkv * group, Lq, Lk}, rng, 2.0);
                for (std::int64_t j = 0; j < Lk; j += 3) mask.set({0, 0, Lq - 1, j}, -kInf);
                o.mask = mask;
                break;
              }
              case 4: o.mask = random_tensor({1, 1, Lq, 1}, rng, 2.0, dtype); break;
              default: break;
            }
            expect_fast_matches_reference(q, k, v, o, isa,
                                          std::string(dtype_name(dtype)) + " Lq " + std::to_string(Lq) + " Lk " +
                                              std::to_string(Lk) + " D " + std::to_string(D));
          }
    // Values of width 0 (an empty output): nothing may read them (a vector load past an
    // empty V was found here, in attend() as well).
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      for (std::int64_t Lq : {1, 70})
        expect_fast_matches_reference(random_tensor({1, 1, Lq, 16}, rng, 1.0, dtype),
                                      random_tensor({1, 1, 40, 16}, rng, 1.0, dtype),
                                      Tensor::zeros({1, 1, 40, 0}, dtype), AttentionOptions{}, isa,
                                      std::string("Dv 0 ") + dtype_name(dtype) + " Lq " + std::to_string(Lq));
    // An infinite value of a key outside the window: weight 0, never read (attention.h).
    {
      Tensor q = random_tensor({1, 1, 1, 32}, rng), k = random_tensor({1, 1, 300, 32}, rng);
      Tensor clean = random_tensor({1, 1, 300, 32}, rng), v = clean.clone();
      v.set({0, 0, 10, 1}, kInf);
      AttentionOptions o;
      o.window = Window{50, 0};
      o.alignment = Alignment::bottom_right;
      const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
      const std::vector<float> fast = detail::flash_attention(problem, q, k, v, false, isa).out.to_vector();
      o.impl = AttentionImpl::reference;
      const std::vector<float> ref = attention(q, k, clean, o).out.to_vector();
      for (std::size_t d = 0; d < fast.size(); ++d)
        EXPECT_NEAR(fast[d], ref[d], 1e-5) << detail::isa_name(isa) << " window, d " << d;
    }
    // An infinite value of an attended key: the output turns infinite (or NaN where +inf
    // meets -inf) exactly as the reference's, through the fallback.
    for (std::int64_t Lk : {40, 1500}) {
      Tensor q = random_tensor({1, 1, 1, 32}, rng), k = random_tensor({1, 1, Lk, 32}, rng);
      Tensor v = random_tensor({1, 1, Lk, 32}, rng);
      v.set({0, 0, Lk - 3, 2}, kInf);
      v.set({0, 0, 5, 4}, -kInf);
      v.set({0, 0, 6, 4}, kInf);
      AttentionOptions o;
      const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
      const std::vector<float> fast = detail::flash_attention(problem, q, k, v, false, isa).out.to_vector();
      o.impl = AttentionImpl::reference;
      const std::vector<float> ref = attention(q, k, v, o).out.to_vector();
      for (std::size_t d = 0; d < fast.size(); ++d) {
        if (std::isfinite(ref[d])) continue;
        EXPECT_EQ(std::isnan(fast[d]), std::isnan(ref[d])) << detail::isa_name(isa) << " Lk " << Lk << " d " << d;
        if (std::isinf(ref[d])) EXPECT_EQ(fast[d], ref[d]) << detail::isa_name(isa) << " Lk " << Lk << " d " << d;
      }
      EXPECT_TRUE(std::isinf(fast[2]) && std::isnan(fast[4]) && std::isfinite(fast[0])) << detail::isa_name(isa);
    }
    // A NaN or +inf in a float mask: that query's row comes out NaN as the reference's
    // (softmax with +inf takes exp(inf − inf)), the other query's row as it was; on the
    // decode path through the fallback (Lq 2), and in attend() itself (Lq 70), which gave
    // +inf's row zeros until this test.
    for (std::int64_t Lq : {2, 70}) {
      for (float odd : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
        Tensor q = random_tensor({1, 1, Lq, 32}, rng), k = random_tensor({1, 1, 100, 32}, rng);
        Tensor v = random_tensor({1, 1, 100, 32}, rng), mask = random_tensor({1, 1, Lq, 100}, rng);
        mask.set({0, 0, 0, 70}, odd);
        AttentionOptions o;
        o.mask = mask;
        const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
        const std::vector<float> fast = detail::flash_attention(problem, q, k, v, false, isa).out.to_vector();
        o.impl = AttentionImpl::reference;
        const std::vector<float> ref = attention(q, k, v, o).out.to_vector();
        for (std::size_t d = 0; d < fast.size(); ++d) {
          EXPECT_EQ(std::isnan(fast[d]), std::isnan(ref[d])) << detail::isa_name(isa) << " mask " << odd << " d " << d;
          if (!std::isnan(ref[d])) EXPECT_NEAR(fast[d], ref[d], 1e-5) << detail::isa_name(isa) << " mask " << odd;
        }
        EXPECT_TRUE(std::isnan(fast[0]) && std::isfinite(fast[32])) << detail::isa_name(isa) << " mask " << odd;
      }
    }
  }
}

// bf16 inputs: on AVX512-BF16 they multiply as bf16 pairs, so odd Dk (a half-empty last
// pair), odd key counts (a half-empty last key pair) and every option must hold there.
TEST(FastAttention, HalfPrecisionAcrossShapesAndOptions) {
  Rng rng(38);
  for (Isa isa : detail::tested_isas())
    for (DType dtype : {DType::bf16, DType::f16}) {
      int n = 0;
      for (std::int64_t L : {5, 17, 64, 65, 130})
        for (std::int64_t D : {1, 7, 64, 100}) {
          Tensor q = random_tensor({1, 4, L, D}, rng, 1.0, dtype);
          Tensor k = random_tensor({1, 2, L + 3, D}, rng, 1.0, dtype);
          Tensor v = random_tensor({1, 2, L + 3, D + 16}, rng, 1.0, dtype);
          AttentionOptions o;
          o.causal = n % 2 == 1;
          if (n % 4 == 2) {
            o.dropout_p = 0.2;
            o.seed = 9;
            o.key_lengths = {L - 1};
          }
          if (n % 5 == 3) o.mask = random_tensor({L, L + 3}, rng);
          if (n % 7 == 4) v.set({0, 1, 2, 0}, std::numeric_limits<float>::quiet_NaN());  // read: NaN rows
          if (n % 9 == 5) k.set({0, 0, 1, 0}, std::numeric_limits<float>::infinity());  // NaN or ±inf scores
          expect_fast_matches_reference(q, k, v, o, isa,
                                        std::string(dtype_name(dtype)) + " L " + std::to_string(L) + " D " +
                                            std::to_string(D));
          ++n;
        }
    }
}

TEST(FastAttention, HalfPrecisionAndStridedInputs) {
  Rng rng(33);
  for (Isa isa : detail::tested_isas())
    for (DType dtype : {DType::bf16, DType::f16}) {
      // (B, L, H, D) storage viewed as (B, H, L, D): strided, no copy.
      Tensor q = random_tensor({2, 45, 4, 64}, rng, 1.0, dtype).permute({0, 2, 1, 3});
      Tensor k = random_tensor({2, 77, 2, 64}, rng, 1.0, dtype).permute({0, 2, 1, 3});
      Tensor v = random_tensor({2, 77, 2, 48}, rng, 1.0, dtype).permute({0, 2, 1, 3});
      AttentionOptions o;
      o.causal = true;
      o.alignment = Alignment::bottom_right;
      expect_fast_matches_reference(q, k, v, o, isa, std::string("strided ") + dtype_name(dtype));
    }
}

// bf16 and f16 are widened to f32 exactly (vectors of them with vcvtph2ps or a shift,
// the rest of a row one by one): every bit pattern, as the value of a lone key, comes
// back unchanged through the kernel (weight e / sum e = 1 up to an f32 rounding, which
// rounding to 16 bits undoes), NaN as a NaN. Dv = 255: whole vectors and a tail.
// (Before vcvtph2ps, every f16 went through f16_to_f32; this pins the vector path to it.)
TEST(FastAttention, EveryHalfPrecisionValueConvertsExactly) {
  constexpr std::int64_t H = 258, Dv = 255;  // 258 · 255 >= 65536 patterns
  for (Isa isa : detail::tested_isas())
    for (DType dtype : {DType::bf16, DType::f16}) {
      Tensor q = Tensor::zeros({1, H, 1, 8}, dtype), k = Tensor::zeros({1, H, 1, 8}, dtype);
      Tensor v = Tensor::zeros({1, H, 1, Dv}, dtype);
      auto* bits = v.data_as<std::uint16_t>();
      for (std::int64_t n = 0; n < 65536; ++n) bits[n] = static_cast<std::uint16_t>(n);
      const detail::AttentionProblem problem = detail::make_problem(q, k, v, AttentionOptions{});
      const Tensor out = detail::flash_attention(problem, q, k, v, false, isa).out;
      const auto* got = out.data_as<std::uint16_t>();
      int wrong = 0;
      for (std::int64_t n = 0; n < 65536 && wrong < 5; ++n) {
        // Each output element is e·v / e of its own value alone: NaN stays NaN, ±inf stay
        // (the careful path), and −0 may come back +0 (0 + e·(−0)), which compares equal.
        const float want = load_as_f32(bits, n, dtype), have = load_as_f32(got, n, dtype);
        if (std::isnan(want) ? !std::isnan(have) : have != want) {
          ++wrong;
          ADD_FAILURE() << detail::isa_name(isa) << " " << dtype_name(dtype) << " bits 0x" << std::hex << bits[n]
                        << " came back as 0x" << got[n];
        }
      }
    }
}

// Both implementations: every row is computed by the same operations whichever thread
// takes it, and dropout draws from (seed, index), so no bit may change.
TEST(FastAttention, ThreadCountDoesNotChangeOneBitInEitherImplementation) {
  Rng rng(34);
  Tensor q = random_tensor({2, 3, 100, 32}, rng), k = random_tensor({2, 3, 100, 32}, rng),
         v = random_tensor({2, 3, 100, 32}, rng);
  AttentionOptions o;
  o.causal = true;
  o.dropout_p = 0.1;
  o.seed = 5;
  o.return_lse = true;
  const int before = num_threads();
  for (AttentionImpl impl : {AttentionImpl::reference, AttentionImpl::fast}) {
    o.impl = impl;
    std::vector<AttentionResult> results;
    for (int threads : {1, 2, 3}) {  // 3: more threads than cores, an uneven split
      set_num_threads(threads);
      results.push_back(attention(q, k, v, o));
    }
    for (std::size_t n = 1; n < results.size(); ++n) {
      EXPECT_EQ(results[0].out.to_vector(), results[n].out.to_vector()) << "threads " << n + 1;
      EXPECT_EQ(results[0].lse.to_vector(), results[n].lse.to_vector()) << "threads " << n + 1;
    }
  }
  set_num_threads(before);
}

TEST(FastAttention, NanStaysInItsRowsAndMaskedNanIsNeverRead) {
  Rng rng(35);
  for (Isa isa : detail::tested_isas())
    for (DType dtype : {DType::f32, DType::bf16}) {  // bf16: pairs, and AMX tiles
      Tensor q = random_tensor({1, 2, 70, 8}, rng, 1.0, dtype), k = random_tensor({1, 2, 70, 8}, rng, 1.0, dtype),
             v = random_tensor({1, 2, 70, 8}, rng, 1.0, dtype);
      k.set({0, 0, 40, 0}, std::numeric_limits<float>::quiet_NaN());
      v.set({0, 1, 69, 3}, std::numeric_limits<float>::quiet_NaN());
      AttentionOptions o;
      o.causal = true;  // head 0 rows >= 40 read the NaN key; row 69 of head 1 reads v[69]
      const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
      const Tensor out = detail::flash_attention(problem, q, k, v, false, isa).out;
      for (std::int64_t h = 0; h < 2; ++h)
        for (std::int64_t i = 0; i < 70; ++i) {
          const bool nan_row = (h == 0 && i >= 40);
          EXPECT_EQ(std::isnan(out.get({0, h, i, 1})), nan_row)
              << detail::isa_name(isa) << " " << dtype_name(dtype) << " h" << h << " i" << i;
        }
      EXPECT_TRUE(std::isnan(out.get({0, 1, 69, 3})));
    }
}

// A key of weight 0 is never read (attention.h), so neither a NaN nor an infinity in the
// value of a masked key reaches the output: multiplied by its zero weight, an infinity
// would be NaN (0·inf). Whole query blocks, a few queries and split-KV decode; f32 read in
// place, bf16 as pairs, f16 converted; with and without a causal mask.
TEST(FastAttention, NonFiniteValuesOfMaskedKeysAreNeverRead) {
  Rng rng(41);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  struct Shape {
    std::int64_t Lq, Lk;
  };
  for (Isa isa : detail::tested_isas())
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      for (Shape s : {Shape{70, 70}, Shape{3, 100}, Shape{1, 1500}})
        for (bool causal : {false, true}) {
          const std::string what = std::string(detail::isa_name(isa)) + " " + dtype_name(dtype) + " Lq " +
                                   std::to_string(s.Lq) + " Lk " + std::to_string(s.Lk) + (causal ? " causal" : "");
          Tensor q = random_tensor({1, 2, s.Lq, 32}, rng, 1.0, dtype);
          Tensor k = random_tensor({1, 2, s.Lk, 32}, rng, 1.0, dtype);
          Tensor clean = random_tensor({1, 2, s.Lk, 32}, rng, 1.0, dtype);
          Tensor v = clean.clone();
          Tensor mask = Tensor::full({s.Lq, s.Lk}, 1.0f, DType::boolean);
          const std::int64_t poisoned[] = {5, s.Lk / 2, s.Lk - 1};
          const float values[] = {kInf, -kInf, std::numeric_limits<float>::quiet_NaN()};
          for (int n = 0; n < 3; ++n) {
            v.set({0, n % 2, poisoned[n], 3 + n}, values[n]);
            for (std::int64_t i = 0; i < s.Lq; ++i) mask.set({i, poisoned[n]}, 0.0f);
          }
          AttentionOptions o;
          o.mask = mask;
          o.causal = causal;
          o.alignment = Alignment::bottom_right;  // every query sees keys: no empty rows
          const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
          const std::vector<float> fast = detail::flash_attention(problem, q, k, v, false, isa).out.to_vector();
          o.impl = AttentionImpl::reference;
          const std::vector<float> ref = attention(q, k, clean, o).out.to_vector();
          const double bound = derive_bounds(q, k, clean, o).out;
          double worst = 0;
          for (std::size_t n = 0; n < fast.size(); ++n) {
            ASSERT_TRUE(std::isfinite(fast[n])) << what << " index " << n << ": " << fast[n];
            worst = std::max(worst, std::abs(double{fast[n]} - ref[n]));
          }
          EXPECT_LE(worst, bound) << what;
        }
}

// bf16 pair buffers outlive a task: a NaN value packed for batch 0 (whose rows are NaN,
// rightly) must not reach batch 1, whose one short key tile leaves those buffer rows
// stale. On tiles that means zeroing the value pairs past the tile's keys (0·NaN = NaN).
TEST(FastAttention, Bf16StaleValuePairsOfAnEarlierTaskAreNeverMultiplied) {
  Rng rng(39);
  const int before = num_threads();
  set_num_threads(1);  // one scratch buffer sees batch 0, then batch 1
  for (Isa isa : detail::tested_isas()) {
    Tensor q = random_tensor({2, 1, 40, 64}, rng, 1.0, DType::bf16);
    Tensor k = random_tensor({2, 1, 64, 64}, rng, 1.0, DType::bf16);
    Tensor v = random_tensor({2, 1, 64, 64}, rng, 1.0, DType::bf16);
    v.set({0, 0, 12, 5}, std::numeric_limits<float>::quiet_NaN());
    AttentionOptions o;
    o.key_lengths = {64, 10};
    const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
    const Tensor out = detail::flash_attention(problem, q, k, v, false, isa).out;
    for (std::int64_t i = 0; i < 40; ++i) {
      EXPECT_TRUE(std::isnan(out.get({0, 0, i, 5}))) << detail::isa_name(isa) << " row " << i;
      EXPECT_FALSE(std::isnan(out.get({1, 0, i, 5}))) << detail::isa_name(isa) << " row " << i;
    }
    expect_fast_matches_reference(q, k, v, o, isa, "stale value pairs");
  }
  set_num_threads(before);
}

// Value pairs packed once per head pair key 2i with 2i + 1. Where the visible keys end on
// an odd count, the last pair's partner is a masked key, here an infinity, which a zero
// weight would still turn into NaN (0·inf): such a tile must pair the last key with 0.
TEST(FastAttention, Bf16MaskedInfinityPairedWithTheLastVisibleKeyIsNeverRead) {
  Rng rng(40);
  for (Isa isa : detail::tested_isas()) {
    Tensor q = random_tensor({1, 2, 70, 32}, rng, 1.0, DType::bf16);  // two query blocks
    Tensor k = random_tensor({1, 2, 80, 32}, rng, 1.0, DType::bf16);
    Tensor v = random_tensor({1, 2, 80, 32}, rng, 1.0, DType::bf16);
    v.set({0, 0, 65, 3}, std::numeric_limits<float>::infinity());
    AttentionOptions o;
    o.key_lengths = {65};  // keys 0-64: the last tile holds one key
    const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
    const Tensor out = detail::flash_attention(problem, q, k, v, false, isa).out;
    for (std::int64_t i = 0; i < 70; ++i)
      EXPECT_FALSE(std::isnan(out.get({0, 0, i, 3}))) << detail::isa_name(isa) << " row " << i;
    expect_fast_matches_reference(q, k, v, o, isa, "masked infinity after an odd last key");
  }
}

// bf16 queries multiplied as pairs are packed kLanes rows × kLanes pairs at a time where
// the rows already are pairs (unit stride, even Dk), pair by pair otherwise: row counts
// and Dk around 16-row and 16-pair blocks, odd key counts (the softmax pairs an odd last
// key with 0), and queries read through views whose rows are strided, whose columns are
// strided or whose first element is not 4-byte aligned.
TEST(FastAttention, Bf16QueryPairsFromEveryLayoutMatchReference) {
  Rng rng(43);
  for (Isa isa : detail::tested_isas()) {
    int n = 0;
    for (std::int64_t Dk : {2, 30, 32, 40, 64, 66, 128})
      for (std::int64_t Lq : {17, 64, 100})
        for (int layout = 0; layout < 4; ++layout) {
          if ((Dk + Lq + layout) % 3 == 0 && Dk != 64) continue;  // a sample
          const std::int64_t Lk = (n % 2) ? 65 : 129 - (n % 4);
          Tensor q;
          switch (layout) {
            case 0: q = random_tensor({1, 2, Lq, Dk}, rng, 1.0, DType::bf16); break;  // contiguous
            case 1:  // (B, L, H, D) seen as (B, H, L, D): rows H·Dk apart
              q = random_tensor({1, Lq, 2, Dk}, rng, 1.0, DType::bf16).permute({0, 2, 1, 3});
              break;
            case 2:  // every other column
              q = random_tensor({1, 2, Lq, 2 * Dk}, rng, 1.0, DType::bf16).slice(3, 0, 2 * Dk, 2);
              break;
            default:  // from column 1: rows start on odd elements (Dk + 1 apart)
              q = random_tensor({1, 2, Lq, Dk + 1}, rng, 1.0, DType::bf16).slice(3, 1, Dk + 1);
          }
          Tensor k = random_tensor({1, 2, Lk, Dk}, rng, 1.0, DType::bf16);
          Tensor v = random_tensor({1, 2, Lk, 24}, rng, 1.0, DType::bf16);
          AttentionOptions o;
          o.causal = n % 3 == 1;
          o.alignment = Alignment::bottom_right;
          expect_fast_matches_reference(q, k, v, o, isa,
                                        "layout " + std::to_string(layout) + " Lq " + std::to_string(Lq) + " Lk " +
                                            std::to_string(Lk) + " Dk " + std::to_string(Dk) +
                                            (o.causal ? " causal" : ""));
          ++n;
        }
    EXPECT_GT(n, 50);
  }
}

// bf16 outputs are the f32 results rounded to nearest even (NaN kept, quiet), whole vectors
// at a time and the tail one by one. Where bf16 inputs are widened to f32 (no bf16 pairs),
// the arithmetic is the f32 kernel's on the same values, so each output's bits must be
// f32_to_bf16 of the f32 kernel's output exactly; Dv 37 and 64 (vectors and a tail), whole
// query blocks and a few queries (their own path), and a NaN query (a row of NaN).
TEST(FastAttention, Bf16OutputsAreTheF32ResultsRoundedToNearestEven) {
  Rng rng(44);
  for (Isa isa : detail::tested_isas()) {
    const std::string name = detail::isa_name(isa);
    if (name == "avx512_bf16" || name == "amx" || name == "amx_emulated") continue;  // bf16 pairs: P rounded
    for (std::int64_t Lq : {3, 70})
      for (std::int64_t Dv : {37, 64}) {
        Tensor q = random_tensor({1, 2, Lq, 32}, rng, 1.0, DType::bf16);
        Tensor k = random_tensor({1, 2, 90, 32}, rng, 1.0, DType::bf16);
        Tensor v = random_tensor({1, 2, 90, Dv}, rng, 3.0, DType::bf16);
        q.set({0, 1, Lq - 1, 5}, std::numeric_limits<float>::quiet_NaN());
        const AttentionOptions o;
        const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
        const Tensor out = detail::flash_attention(problem, q, k, v, false, isa).out;
        const Tensor q32 = q.to(DType::f32), k32 = k.to(DType::f32), v32 = v.to(DType::f32);
        const detail::AttentionProblem problem32 = detail::make_problem(q32, k32, v32, o);
        const Tensor out32 = detail::flash_attention(problem32, q32, k32, v32, false, isa).out;
        ASSERT_EQ(out.dtype(), DType::bf16);
        const auto* bits = out.data_as<std::uint16_t>();
        const auto* wide = out32.data_as<float>();
        int mismatches = 0;
        for (std::int64_t n = 0; n < out.numel(); ++n)
          if (bits[n] != f32_to_bf16(wide[n]) && ++mismatches <= 3)
            ADD_FAILURE() << name << " Lq " << Lq << " Dv " << Dv << " index " << n << ": bits " << bits[n]
                          << ", f32 " << wide[n] << " rounds to " << f32_to_bf16(wide[n]);
        EXPECT_TRUE(std::isnan(out.get({0, 1, Lq - 1, 0}))) << name;
      }
  }
}

TEST(FastAttention, AutomaticUsesTheKernelAndProbabilitiesStillWork) {
  Rng rng(36);
  Tensor q = random_tensor({1, 2, 20, 16}, rng), k = random_tensor({1, 2, 20, 16}, rng),
         v = random_tensor({1, 2, 20, 16}, rng);
  AttentionOptions o;
  o.return_probs = true;
  const AttentionResult r = attention(q, k, v, o);
  ASSERT_TRUE(r.probs.defined());
  EXPECT_EQ(r.probs.shape(), (Shape{1, 2, 20, 20}));
  o.return_probs = false;
  o.impl = AttentionImpl::fast;
  const AttentionResult fast = attention(q, k, v, o);
  EXPECT_FALSE(fast.probs.defined());
  EXPECT_EQ(fast.out.to_vector(), scaled_dot_product_attention(q, k, v).to_vector());  // automatic = fast
}

}  // namespace
}  // namespace qkv
