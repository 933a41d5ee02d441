// nn::MultiheadAttention against a naive double loop in torch's polarity (masks, KV
// caches, separate projections), and its backward against finite differences.

#include <limits>

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

struct NaiveMha {
  std::vector<double> out;      // (B, L, E)
  std::vector<double> weights;  // (B, H, L, S)
};

// allowed(b, h, i, j) / added(b, h, i, j) describe the masks in the test's own terms.
template <class Allowed, class Added>
NaiveMha naive_mha(const nn::MultiheadAttention& m, const Tensor& query, const Tensor& key,
                   const Tensor& value, Allowed allowed, Added added) {
  const std::int64_t B = query.size(0), L = query.size(1), S = key.size(1);
  const std::int64_t E = m.config.embed_dim, H = m.config.num_heads, D = E / H;
  auto project = [&](const Tensor& x, std::int64_t which, std::int64_t n) {
    const Tensor w = m.joint_in_proj() ? m.in_proj.weight.slice(0, which * E, (which + 1) * E)
                                : (which == 0 ? m.q_proj_weight
                                              : which == 1 ? m.k_proj_weight : m.v_proj_weight);
    std::vector<double> y(static_cast<std::size_t>(B * n * E));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t e = 0; e < E; ++e) {
          double s = m.in_proj.bias.defined() ? m.in_proj.bias.get({which * E + e}) : 0.0;
          for (std::int64_t c = 0; c < x.size(2); ++c) s += double(x.get({b, t, c})) * w.get({e, c});
          y[(b * n + t) * E + e] = s;
        }
    return y;  // (B, n, E)
  };
  const auto q = project(query, 0, L), k = project(key, 1, S), v = project(value, 2, S);
  NaiveMha r;
  r.weights.assign(static_cast<std::size_t>(B * H * L * S), 0);
  std::vector<double> merged(static_cast<std::size_t>(B * L * E), 0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < L; ++i) {
        std::vector<double> s(static_cast<std::size_t>(S));
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d)
            dot += q[(b * L + i) * E + h * D + d] * k[(b * S + j) * E + h * D + d];
          s[j] = allowed(b, h, i, j) ? dot / std::sqrt(double(D)) + added(b, h, i, j)
                                     : -std::numeric_limits<double>::infinity();
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (std::int64_t j = 0; j < S; ++j) z += s[j] == -INFINITY ? 0 : std::exp(s[j] - mx);
        for (std::int64_t j = 0; j < S; ++j) {
          const double p = s[j] == -INFINITY ? 0 : std::exp(s[j] - mx) / z;
          r.weights[((b * H + h) * L + i) * S + j] = p;
          for (std::int64_t d = 0; d < D; ++d)
            merged[(b * L + i) * E + h * D + d] += p * v[(b * S + j) * E + h * D + d];
        }
      }
  r.out.assign(merged.size(), 0);
  for (std::int64_t bl = 0; bl < B * L; ++bl)
    for (std::int64_t e = 0; e < E; ++e) {
      double s = m.out_proj.bias.defined() ? m.out_proj.bias.get({e}) : 0.0;
      for (std::int64_t c = 0; c < E; ++c) s += merged[bl * E + c] * m.out_proj.weight.get({e, c});
      r.out[bl * E + e] = s;
    }
  return r;
}

// Three f32 products of at most max(E, kdim, vdim) terms each, on inputs of size ~1 and
// weights ~1/√E, plus the softmax (a few u relative): 64·K·u·(1 + max|y|) covers it with
// room for the chained roundings (inputs of one stage carry the previous stage's error).
double mha_tolerance(std::int64_t K, const std::vector<double>& want) {
  return 64.0 * static_cast<double>(K) * kU * (1.0 + max_abs(want));
}

void set_random_biases(nn::MultiheadAttention& m, std::uint64_t seed) {
  if (m.in_proj.bias.defined()) m.in_proj.bias = randn({3 * m.config.embed_dim}, seed, 0.5);
  if (m.out_proj.bias.defined()) m.out_proj.bias = randn({m.config.embed_dim}, seed + 1, 0.5);
}

// torch's (out, weights) of one call: weights (B, H, L, S) per head, or (B, L, S) averaged,
// or undefined unless need_weights.
struct Output {
  Tensor out;
  Tensor weights;
};
Output run(const nn::MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
           const nn::AttentionMasks& masks = {}, bool need_weights = false, bool average = true) {
  Output o;
  o.out = m.forward(q, k, v, masks, {}, nullptr, need_weights ? &o.weights : nullptr);
  if (need_weights && average) o.weights = nn::average_heads(o.weights);
  return o;
}

TEST(MultiHeadAttention, SelfCausalCrossAgainstNaive) {
  const std::int64_t B = 2, E = 16, H = 4;
  for (bool bias : {true, false}) {
    nn::MultiheadAttention m({E, H, bias}, 3);
    set_random_biases(m, 5);
    Tensor x = randn({B, 7, E}, 1);  // (B, L, E)
    auto all = [](auto...) { return true; };
    auto none = [](auto...) { return 0.0; };
    {  // self
      auto got = run(m, x, x, x, {}, true, false);
      auto want = naive_mha(m, x, x, x, all, none);
      expect_close(got.out, want.out, mha_tolerance(E, want.out), "self out");
      expect_close(got.weights, want.weights, 16 * E * kU, "self weights per head");
    }
    {  // causal, averaged weights
      nn::AttentionMasks masks;
      masks.is_causal = true;
      auto got = run(m, x, x, x, masks, true, true);
      auto want = naive_mha(m, x, x, x, [](auto, auto, auto i, auto j) { return j <= i; }, none);
      expect_close(got.out, want.out, mha_tolerance(E, want.out), "causal out");
      std::vector<double> avg(static_cast<std::size_t>(B * 7 * 7), 0);
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t i = 0; i < 49; ++i) avg[b * 49 + i] += want.weights[(b * H + h) * 49 + i] / H;
      ASSERT_EQ(got.weights.shape(), (Shape{B, 7, 7}));
      expect_close(got.weights, avg, 16 * E * kU, "causal weights averaged");
    }
    {  // cross: L = 3 queries over S = 11 keys
      Tensor q = randn({B, 3, E}, 2), kv = randn({B, 11, E}, 3);
      auto got = run(m, q, kv, kv);
      auto want = naive_mha(m, q, kv, kv, all, none);
      expect_close(got.out, want.out, mha_tolerance(E, want.out), "cross out");
      EXPECT_FALSE(got.weights.defined());
    }
  }
}

TEST(MultiHeadAttention, EdgeSizes) {
  // D = 1 (as many heads as features), L = S = 1, and an empty query.
  nn::MultiheadAttention m({4, 4}, 2);
  set_random_biases(m, 1);
  auto all = [](auto...) { return true; };
  auto none = [](auto...) { return 0.0; };
  for (auto [L, S] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {1, 5}, {3, 1}}) {
    Tensor q = randn({1, L, 4}, 3), kv = randn({1, S, 4}, 4);
    auto got = run(m, q, kv, kv, {}, true, false);
    auto want = naive_mha(m, q, kv, kv, all, none);
    expect_close(got.out, want.out, mha_tolerance(4, want.out), "edge out");
    expect_close(got.weights, want.weights, 16 * 4 * kU, "edge weights");
  }
  auto empty = run(m, Tensor::zeros({2, 0, 4}), randn({2, 3, 4}, 1), randn({2, 3, 4}, 2));
  EXPECT_EQ(empty.out.shape(), (Shape{2, 0, 4}));
}

TEST(MultiHeadAttention, KdimVdimSeparateProjections) {
  const std::int64_t B = 2, E = 12, H = 3, kdim = 5, vdim = 9;
  nn::MultiheadAttention m({E, H, true, kdim, vdim}, 4);
  set_random_biases(m, 6);
  EXPECT_FALSE(m.joint_in_proj());
  EXPECT_EQ(m.k_proj_weight.shape(), (Shape{E, kdim}));
  Tensor q = randn({B, 4, E}, 1), k = randn({B, 6, kdim}, 2), v = randn({B, 6, vdim}, 3);
  auto got = run(m, q, k, v);
  auto want = naive_mha(m, q, k, v, [](auto...) { return true; }, [](auto...) { return 0.0; });
  expect_close(got.out, want.out, mha_tolerance(vdim, want.out), "kdim/vdim out");
  EXPECT_THROW(run(m, q, v, v), qkv::Error);  // key with vdim features
}

TEST(MultiHeadAttention, MasksInTorchPolarity) {
  const std::int64_t B = 2, E = 8, H = 2, L = 4, S = 6;
  nn::MultiheadAttention m({E, H}, 9);
  set_random_biases(m, 2);
  Tensor q = randn({B, L, E}, 1), kv = randn({B, S, E}, 2);
  // key_padding_mask (B, S), true = IGNORE; not a suffix in batch 1 (so no key_lengths).
  const bool pad[2][6] = {{false, false, false, false, true, true},
                          {true, false, false, true, false, false}};
  Tensor kpm = Tensor::empty({B, S}, qkv::DType::boolean);
  Tensor kpm_suffix = Tensor::empty({B, S}, qkv::DType::boolean);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < S; ++j) {
      kpm.set({b, j}, pad[b][j]);
      kpm_suffix.set({b, j}, j >= 4 - b);
    }
  // attn_mask (L, S) bool, true = NOT allowed: block j == i + 1.
  Tensor am = Tensor::empty({L, S}, qkv::DType::boolean);
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = 0; j < S; ++j) am.set({i, j}, j == i + 1);
  // attn_mask (B·H, L, S) float, added.
  Tensor amf = randn({B * H, L, S}, 7);
  auto none = [](auto...) { return 0.0; };
  struct Case {
    std::string name;
    nn::AttentionMasks masks;
    std::function<bool(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> allowed;
    std::function<double(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> added;
  };
  std::vector<Case> cases;
  cases.push_back({"kpm", {Tensor(), kpm, false},
                   [&](auto b, auto, auto, auto j) { return !pad[b][j]; }, none});
  cases.push_back({"kpm suffix (key_lengths)", {Tensor(), kpm_suffix, false},
                   [&](auto b, auto, auto, auto j) { return j < 4 - b; }, none});
  cases.push_back({"bool attn_mask", {am, Tensor(), false},
                   [&](auto, auto, auto i, auto j) { return j != i + 1; }, none});
  cases.push_back({"float attn_mask per head", {amf, Tensor(), false},
                   [](auto...) { return true; },
                   [&](auto b, auto h, auto i, auto j) { return double(amf.get({b * H + h, i, j})); }});
  cases.push_back({"bool attn_mask + kpm + causal", {am, kpm, true},
                   [&](auto b, auto, auto i, auto j) { return !pad[b][j] && j != i + 1 && j <= i; },
                   none});
  cases.push_back({"float attn_mask + bool kpm", {amf, kpm, false},
                   [&](auto b, auto, auto, auto j) { return !pad[b][j]; },
                   [&](auto b, auto h, auto i, auto j) { return double(amf.get({b * H + h, i, j})); }});
  for (const auto& c : cases) {
    auto got = run(m, q, kv, kv, c.masks, true, false);
    auto want = naive_mha(m, q, kv, kv, c.allowed, c.added);
    expect_close(got.out, want.out, mha_tolerance(E, want.out), c.name + " out");
    expect_close(got.weights, want.weights, 16 * E * kU, c.name + " weights");
  }
  // Bad shapes name the argument.
  for (auto [masks, name] : std::vector<std::pair<nn::AttentionMasks, std::string>>{
           {{Tensor::zeros({L, S + 1}), Tensor(), false}, "attn_mask"},
           {{Tensor(), Tensor::zeros({B, S - 1}), false}, "key_padding_mask"}}) {
    try {
      run(m, q, kv, kv, masks);
      FAIL() << name;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(MultiHeadAttention, FullyMaskedRowGivesBiasNotNaN) {
  // torch gives NaN for a row with every key masked; qkv gives attention output 0, so the
  // layer's output row is out_proj.bias.
  nn::MultiheadAttention m({8, 2}, 1);
  set_random_biases(m, 3);
  Tensor x = randn({1, 3, 8}, 4);
  Tensor kpm = Tensor::full({1, 3}, 1.f, qkv::DType::boolean);
  auto got = run(m, x, x, x, {Tensor(), kpm, false});
  for (std::int64_t i = 0; i < 3; ++i)
    for (std::int64_t e = 0; e < 8; ++e) EXPECT_EQ(got.out.get({0, i, e}), m.out_proj.bias.get({e}));
}

TEST(MultiHeadAttention, KVCacheDecodingEqualsCausalForward) {
  const std::int64_t B = 2, E = 16, H = 4, L = 9;
  nn::MultiheadAttention m({E, H}, 5);
  set_random_biases(m, 8);
  Tensor x = randn({B, L, E}, 3);  // (B, L, E)
  nn::AttentionMasks causal;
  causal.is_causal = true;
  Tensor full = run(m, x, x, x, causal).out;  // (B, L, E)
  std::vector<double> want;
  for (float f : full.to_vector()) want.push_back(f);
  for (std::int64_t chunk : {1, 2, 4}) {  // token by token, and prefill-style chunks
    nn::KVCache cache = m.make_cache(B, L);
    EXPECT_EQ(cache.k.shape(), (Shape{B, H, L, E / H}));
    const void* storage = cache.k.data();
    std::vector<double> got_v(static_cast<std::size_t>(B * L * E));
    for (std::int64_t t = 0; t < L; t += chunk) {
      const std::int64_t T = std::min(chunk, L - t);
      const Tensor xt = x.slice(1, t, t + T);
      Tensor step = m.forward(xt, xt, xt, causal, {}, &cache);  // (B, T, E)
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t i = 0; i < T; ++i)
          for (std::int64_t e = 0; e < E; ++e) got_v[(b * L + t + i) * E + e] = step.get({b, i, e});
    }
    EXPECT_EQ(cache.length, L);
    EXPECT_EQ(cache.k.data(), storage);  // allocated once
    std::vector<float> got(got_v.begin(), got_v.end());
    // The same products; only the attention kernel's split differs (decode path merges
    // partial softmaxes): a few u relative to the output's magnitude per term of E.
    expect_close(got, want, std::vector<double>(want.size(), 8 * E * kU * (1 + max_abs(want))),
                 "kv cache chunk=" + std::to_string(chunk));
    const Tensor x0 = x.slice(1, 0, 1);
    EXPECT_THROW(m.forward(x0, x0, x0, causal, {}, &cache), qkv::Error);  // full
  }
  // A bf16 cache: k, v and (to match them) q are rounded to bf16 (2^-9 relative each), and
  // the kernel rounds P to bf16 for P·V: three roundings per score, one per weight, each
  // ~2^-9 of the output's magnitude per term of the E-wide out_proj.
  nn::KVCache half = m.make_cache(B, L, qkv::DType::bf16);
  EXPECT_EQ(half.k.dtype(), qkv::DType::bf16);
  std::vector<float> got(static_cast<std::size_t>(B * L * E));
  for (std::int64_t t = 0; t < L; ++t) {
    const Tensor xt = x.slice(1, t, t + 1);
    const std::vector<float> step = m.forward(xt, xt, xt, causal, {}, &half).to_vector();
    for (std::int64_t b = 0; b < B; ++b)  // step (B, 1, E) -> rows (b, t) of (B, L, E)
      std::copy_n(step.begin() + b * E, E, got.begin() + (b * L + t) * E);
  }
  double err = 0;
  for (std::size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  EXPECT_LE(err, 4 * E * std::ldexp(1.0, -9) * (1 + max_abs(want)));
  EXPECT_GT(err, 0.0) << "a bf16 cache gave the f32 result exactly: not rounded?";
  EXPECT_THROW(m.make_cache(B, L, qkv::DType::boolean), qkv::Error);
  // A recording (training) forward takes no cache.
  nn::MultiheadAttention::Record record;
  nn::KVCache spare = m.make_cache(B, L);
  EXPECT_THROW(m.forward(x, x, x, causal, {}, &spare, nullptr, &record), qkv::Error);
}

TEST(MultiHeadAttention, ConfigAndStateDictErrors) {
  try {
    nn::MultiheadAttention bad({10, 3});
    FAIL();
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_heads"), std::string::npos) << e.what();
  }
  nn::MultiheadAttention m({8, 2});
  nn::StateDict sd = nn::state_dict(m);
  std::vector<std::string> names;
  for (auto& [n, t] : sd) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_bias", "in_proj_weight", "out_proj.bias",
                                             "out_proj.weight"}));
  auto expect_error = [&](nn::StateDict s, const std::string& name) {
    try {
      nn::load_state_dict(m, s);
      FAIL() << name;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  nn::StateDict missing = sd;
  missing.erase("out_proj.weight");
  expect_error(missing, "out_proj.weight");
  nn::StateDict misshaped = sd;
  misshaped["in_proj_weight"] = Tensor::zeros({8, 8});
  expect_error(misshaped, "in_proj_weight");
  nn::StateDict extra = sd;
  extra["bias_k"] = Tensor::zeros({1, 1, 8});
  expect_error(extra, "bias_k");
  // Loading copies: changing the source afterwards changes nothing.
  nn::StateDict fresh;
  for (auto& [n, t] : sd) fresh[n] = randn(t.shape(), 3);
  nn::load_state_dict(m, fresh);
  const float before = m.in_proj.weight.get({0, 0});
  fresh["in_proj_weight"].set({0, 0}, before + 1);
  EXPECT_EQ(m.in_proj.weight.get({0, 0}), before);
}

// The backward against finite differences of the (same) forward, for every way the
// inputs can share tensors and every projection layout.
enum class Inputs { self, memory, separate };  // q = k = v; k = v (cross); three tensors
struct MhaCase {
  Inputs inputs;
  bool joint;  // one (3E, E) in_proj, else separate q/k/v weights
  bool causal;
  bool padded;
  std::int64_t kdim = 8, vdim = 8;
};

class MhaBackward : public ::testing::TestWithParam<MhaCase> {};

TEST_P(MhaBackward, MatchesFiniteDifferences) {
  const MhaCase c = GetParam();
  nn::MultiheadAttentionConfig config{8, 2, true, c.kdim, c.vdim};
  nn::MultiheadAttention mha(config, 11), grads(config, 11);
  if (!c.joint && mha.joint_in_proj()) {  // the separate-weight layout, forced at kdim = vdim = E
    for (nn::MultiheadAttention* m : {&mha, &grads}) {
      m->q_proj_weight = m->in_proj.weight.slice(0, 0, 8).clone();
      m->k_proj_weight = m->in_proj.weight.slice(0, 8, 16).clone();
      m->v_proj_weight = m->in_proj.weight.slice(0, 16, 24).clone();
      m->in_proj.weight = Tensor();
    }
  }
  set_random_biases(mha, 15);
  train::zero_grad(grads.parameters());
  const std::int64_t S = c.inputs == Inputs::self ? 5 : 6;
  Tensor q = randn({2, 5, 8}, 12);
  Tensor key = c.inputs == Inputs::self ? q : randn({2, S, c.kdim}, 13);
  Tensor value = c.inputs == Inputs::separate ? randn({2, S, c.vdim}, 16) : key;
  Tensor w = randn({2, 5, 8}, 14);
  nn::AttentionMasks masks;
  masks.is_causal = c.causal;
  if (c.padded) {
    masks.key_padding_mask = Tensor::zeros({2, S}, qkv::DType::boolean);
    masks.key_padding_mask.set({1, S - 1}, 1.f);
    masks.key_padding_mask.set({1, S - 2}, 1.f);
  }
  nn::MultiheadAttention::Record record;
  const Tensor y = mha.forward(q, key, value, masks, {}, nullptr, nullptr, &record);
  EXPECT_EQ(y.to_vector(), mha.forward(q, key, value, masks).to_vector())
      << "the recording forward is the inference forward";
  const nn::MultiheadAttention::Gradients d = mha.backward(w, record, grads);
  // Inputs that are one tensor get one gradient, in the first of them.
  EXPECT_EQ(d.key.defined(), c.inputs != Inputs::self);
  EXPECT_EQ(d.value.defined(), c.inputs == Inputs::separate);
  auto loss = [&] {
    const Tensor& k = c.inputs == Inputs::self ? q : key;
    const Tensor& v = c.inputs == Inputs::separate ? value : k;
    return dot(mha.forward(q, k, v, masks), w);
  };
  check_gradient(q, d.query, loss, "dquery");
  if (c.inputs != Inputs::self) check_gradient(key, d.key, loss, "dkey");
  if (c.inputs == Inputs::separate) check_gradient(value, d.value, loss, "dvalue");
  auto params = mha.parameters();
  auto gparams = grads.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    check_gradient(*params[i].second, *gparams[i].second, loss, params[i].first);
}

INSTANTIATE_TEST_SUITE_P(Cases, MhaBackward,
                         ::testing::Values(MhaCase{Inputs::self, true, false, false},
                                           MhaCase{Inputs::self, true, true, true},
                                           MhaCase{Inputs::self, false, true, false},
                                           MhaCase{Inputs::memory, true, false, true},
                                           MhaCase{Inputs::memory, false, false, false},
                                           MhaCase{Inputs::separate, true, true, false},
                                           MhaCase{Inputs::separate, false, false, true, 5, 7}));

// Cross-attention decoding: a cache filled by the first call (the memory's projected keys
// and values) serves every later call; the result is the uncached forward's.
TEST(MultiHeadAttention, CrossAttentionCacheReusesTheMemory) {
  nn::MultiheadAttention m({8, 2}, 4);
  set_random_biases(m, 5);
  Tensor memory = randn({2, 6, 8}, 1);
  nn::KVCache cache = m.make_cache(2, 6);
  for (std::int64_t step = 0; step < 3; ++step) {
    Tensor q = randn({2, 1, 8}, 10 + static_cast<std::uint64_t>(step));
    const Tensor want = m.forward(q, memory, memory);
    const Tensor got = m.forward(q, memory, memory, {}, {}, &cache);
    EXPECT_EQ(cache.length, 6);
    // The same products; the decode kernel splits the keys differently: a few u of |y|.
    std::vector<double> w;
    for (float f : want.to_vector()) w.push_back(f);
    expect_close(got, w, 16 * 8 * kU * (1 + max_abs(w)), "cross cache step " + std::to_string(step));
  }
  EXPECT_THROW(m.forward(randn({2, 1, 8}, 3), randn({2, 5, 8}, 2), randn({2, 5, 8}, 2), {}, {},
                         &cache),
               qkv::Error);  // a memory of another length
}

}  // namespace
