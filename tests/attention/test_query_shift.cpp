// detail::attention_shifted (attention/problem.h): a block of queries whose diagonal is
// moved by query_shift must give exactly the rows the whole sequence gives, on the fast
// kernel and the reference, for every option the diagonal matters to. This is what the
// distributed layer's blocks rely on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "attention/problem.h"
#include "attention/random_inputs.h"
#include "qkv/attention.h"
#include "qkv/error.h"

namespace qkv {
namespace {

using testing::random_tensor;

struct ShiftCase {
  const char* name;
  bool causal = false;
  Alignment alignment = Alignment::top_left;
  std::optional<Window> window;
  bool alibi = false;
  bool key_lengths = false;
};

// Rows [q0, q0 + rows) of the whole problem against keys [k0, k1): options with top_left
// alignment, block key lengths and shift = q0 − k0 (+ Lk_b − L for bottom_right).
void check_block(const ShiftCase& c, AttentionImpl impl, std::int64_t q0, std::int64_t rows, std::int64_t k0,
                 std::int64_t k1) {
  const std::int64_t B = 2, H = 2, L = 70, D = 16;
  Rng rng(7);
  const Tensor q = random_tensor({B, H, L, D}, rng), k = random_tensor({B, H, L, D}, rng),
               v = random_tensor({B, H, L, D}, rng), dout = random_tensor({B, H, L, D}, rng);
  AttentionOptions whole;
  whole.causal = c.causal;
  whole.alignment = c.alignment;
  whole.window = c.window;
  if (c.alibi) whole.alibi_slopes = {0.25f, 0.0625f};
  if (c.key_lengths) whole.key_lengths = {L - 9, 40};
  whole.return_lse = true;
  whole.impl = impl;
  const AttentionResult full = attention(q, k, v, whole);
  const AttentionGradients full_grads = attention_backward(dout, q, k, v, full.out, full.lse, whole);

  AttentionOptions block = whole;
  block.alignment = Alignment::top_left;
  block.key_lengths.clear();
  std::vector<std::int64_t> shift;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t kl = c.key_lengths ? whole.key_lengths[static_cast<std::size_t>(b)] : L;
    block.key_lengths.push_back(std::clamp<std::int64_t>(kl - k0, 0, k1 - k0));
    shift.push_back(q0 - k0 + (c.alignment == Alignment::bottom_right ? kl - L : 0));
  }
  const Tensor qb = q.slice(2, q0, q0 + rows), kb = k.slice(2, k0, k1), vb = v.slice(2, k0, k1);
  const AttentionResult part = detail::attention_shifted(qb, kb, vb, block, shift);
  // The oracle: the whole problem with keys outside [k0, k1) masked out by a bool mask
  // (positions, and so causal, window and ALiBi, unchanged); its rows [q0, q0 + rows) are
  // the block's.
  Tensor mask = Tensor::full({L, L}, 1.0f, DType::boolean);
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = 0; j < L; ++j)
      if (j < k0 || j >= k1) mask.set({i, j}, 0.0f);
  AttentionOptions cut = whole;
  cut.mask = mask;
  const AttentionResult want = attention(q, k, v, cut);
  const Tensor want_out = want.out.slice(2, q0, q0 + rows), want_lse = want.lse.slice(2, q0, q0 + rows);
  const std::vector<float> got_o = part.out.to_vector(), want_o = want_out.to_vector();
  const std::vector<float> got_l = part.lse.to_vector(), want_l = want_lse.to_vector();
  // f32 accumulation over <= 70 keys of |s| <~ 10: 1e-5 absolute is a few hundred ulps of
  // headroom; the reference (double) and the fast kernel agree to that elsewhere too.
  double worst = 0;
  for (std::size_t n = 0; n < got_o.size(); ++n) worst = std::max(worst, double(std::abs(got_o[n] - want_o[n])));
  EXPECT_LT(worst, 1e-5) << c.name << " out, rows from " << q0;
  for (std::size_t n = 0; n < got_l.size(); ++n) {
    if (std::isinf(want_l[n])) {
      EXPECT_EQ(got_l[n], want_l[n]) << c.name << " lse " << n;
    } else {
      EXPECT_NEAR(got_l[n], want_l[n], 1e-5) << c.name << " lse " << n;
    }
  }

  // Backward of the block against the same cut problem's backward, with its out and lse.
  const AttentionGradients cut_grads = attention_backward(dout, q, k, v, want.out, want.lse, cut);
  const AttentionGradients g = detail::attention_backward_shifted(
      dout.slice(2, q0, q0 + rows), qb, kb, vb, want_out, want_lse, block, shift);
  const auto close = [&](const Tensor& got, const Tensor& expect, const char* what) {
    const std::vector<float> a = got.to_vector(), e = expect.to_vector();
    double err = 0, scale = 1;
    for (std::size_t n = 0; n < a.size(); ++n) {
      err = std::max(err, double(std::abs(a[n] - e[n])));
      scale = std::max(scale, double(std::abs(e[n])));
    }
    EXPECT_LT(err, 2e-5 * scale) << c.name << " " << what << ", rows from " << q0;
  };
  close(g.dq, cut_grads.dq.slice(2, q0, q0 + rows), "dq");
  (void)full_grads;
  if (q0 == 0 && rows == L) {  // every query: dk and dv of keys [k0, k1) are complete
    close(g.dk, cut_grads.dk.slice(2, k0, k1), "dk");
    close(g.dv, cut_grads.dv.slice(2, k0, k1), "dv");
  }
}

TEST(AttentionQueryShift, BlocksOfTheWholeSequence) {
  const ShiftCase cases[] = {
      {"none"},
      {"causal", true},
      {"causal bottom_right", true, Alignment::bottom_right},
      {"causal bottom_right key_lengths", true, Alignment::bottom_right, std::nullopt, false, true},
      {"window", false, Alignment::top_left, Window{7, 3}},
      {"causal window", true, Alignment::top_left, Window{12, -1}},
      {"alibi", false, Alignment::top_left, std::nullopt, true},
      {"causal alibi key_lengths", true, Alignment::top_left, std::nullopt, true, true},
      {"bottom_right window alibi key_lengths", false, Alignment::bottom_right, Window{5, 20}, true, true},
      // Wider than the block's Lq + Lk but not than the distance from the block's queries to
      // its keys: make_problem's clamp at Lq + Lk alone would cut it.
      {"causal wide window", true, Alignment::top_left, Window{50, -1}},
      {"wide window both sides", false, Alignment::top_left, Window{50, 45}, true},
  };
  for (const ShiftCase& c : cases)
    for (AttentionImpl impl : {AttentionImpl::fast, AttentionImpl::reference})
      for (auto [q0, rows] : {std::pair<std::int64_t, std::int64_t>{0, 70}, {33, 21}, {64, 6}})
        for (auto [k0, k1] : {std::pair<std::int64_t, std::int64_t>{10, 70}, {10, 24}, {52, 70}})
          check_block(c, impl, q0, rows, k0, k1);
}

TEST(AttentionQueryShift, WrongCountIsAnError) {
  Rng rng(1);
  const Tensor q = random_tensor({2, 1, 4, 8}, rng);
  EXPECT_THROW(detail::attention_shifted(q, q, q, {}, {1, 2, 3}), Error);
}

}  // namespace
}  // namespace qkv
