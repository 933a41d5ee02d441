// The backward passes of qkv/nn_backward.h against central finite differences of the
// forward passes, and AdamW, the schedule, clipping and cross-entropy against their
// formulas written here in double. (The same gradients are held against torch autograd in
// tests/python/test_train.py.)
//
// Finite differences: the loss is L = Σ y∘w for a fixed random w, computed in f32; the
// central difference (L(θ+h) − L(θ−h)) / 2h has truncation error O(h²·L''') and rounding
// error about u·Σ|y∘w| / h. With h = 1e-2 and sums of ~100 terms of order 1 both stay
// below 1e-3, so analytic and numeric gradients must agree within
// 2e-3·(1 + max|g|) — far above the error of a correct backward, far below a missing
// term (which changes a gradient by O(max|g|)).

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/nn.h"
#include "qkv/nn_backward.h"
#include "qkv/rng.h"
#include "nn/random.h"
#include "qkv/seq2seq.h"
#include "qkv/train.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
namespace nn = qkv::nn;
namespace train = qkv::train;

using qkv::testing::randn;

double dot(const Tensor& a, const Tensor& b) {
  const auto x = a.contiguous().to_vector(), y = b.contiguous().to_vector();
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += double{x[i]} * y[i];
  return s;
}

// Checks `analytic` (same shape as `theta`) against central differences of loss() with
// respect to a spread of entries of theta (every entry when small).
void check_gradient(Tensor& theta, const Tensor& analytic, const std::function<double()>& loss,
                    const std::string& what, float h = 1e-2f) {
  ASSERT_EQ(theta.shape(), analytic.shape()) << what;
  const auto g = analytic.to_vector();
  double max_g = 0;
  for (float v : g) max_g = std::max(max_g, double{std::abs(v)});
  const std::int64_t n = theta.numel();
  const std::int64_t stride = std::max<std::int64_t>(1, n / 24);
  float* p = theta.data_as<float>();
  for (std::int64_t i = 0; i < n; i += stride) {
    const float keep = p[i];
    p[i] = keep + h;
    const double up = loss();
    p[i] = keep - h;
    const double down = loss();
    p[i] = keep;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(g[static_cast<std::size_t>(i)], numeric, 2e-3 * (1 + max_g))
        << what << " entry " << i;
  }
}

TEST(Backward, LinearMatchesFiniteDifferences) {
  nn::Linear layer(7, 5, true, 3);
  Tensor x = randn({2, 3, 7}, 1), w = randn({2, 3, 5}, 2);
  nn::Linear grads(7, 5, true, 3);
  train::zero_grad(grads.parameters());
  nn::LinearSaved saved;
  nn::linear_forward_train(x, layer, saved);
  Tensor dx = nn::linear_backward(w, layer, saved, grads);
  auto loss = [&] { return dot(layer.forward(x), w); };
  check_gradient(x, dx, loss, "dx");
  check_gradient(layer.weight, grads.weight, loss, "dweight");
  check_gradient(layer.bias, grads.bias, loss, "dbias");
}

TEST(Backward, LinearAccumulatesIntoGradients) {
  nn::Linear layer(4, 3, true, 1), grads(4, 3, true, 1);
  train::zero_grad(grads.parameters());
  Tensor x = randn({5, 4}, 1), w = randn({5, 3}, 2);
  nn::LinearSaved saved;
  nn::linear_forward_train(x, layer, saved);
  nn::linear_backward(w, layer, saved, grads);
  const auto once = grads.weight.to_vector();
  nn::linear_backward(w, layer, saved, grads);
  const auto twice = grads.weight.to_vector();
  for (std::size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
}

TEST(Backward, LayerNormMatchesFiniteDifferences) {
  nn::LayerNorm norm({6}, 1e-5), grads({6}, 1e-5);
  norm.weight = randn({6}, 4);
  norm.bias = randn({6}, 5);
  train::zero_grad(grads.parameters());
  Tensor x = randn({3, 4, 6}, 6), w = randn({3, 4, 6}, 7);
  nn::LayerNormSaved saved;
  Tensor y = nn::layer_norm_forward_train(x, norm, saved);
  // The training forward equals the inference one.
  const auto a = y.to_vector(), b = norm.forward(x).to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
  Tensor dx = nn::layer_norm_backward(w, norm, saved, grads);
  auto loss = [&] { return dot(norm.forward(x), w); };
  check_gradient(x, dx, loss, "dx");
  check_gradient(norm.weight, grads.weight, loss, "dweight");
  check_gradient(norm.bias, grads.bias, loss, "dbias");
}

TEST(Backward, ActivationsMatchFiniteDifferences) {
  Tensor x = randn({50}, 8, 2.0), w = randn({50}, 9);
  // Keep relu's inputs away from the kink, where the difference quotient is meaningless.
  float* px = x.data_as<float>();
  for (std::int64_t i = 0; i < 50; ++i)
    if (std::abs(px[i]) < 0.05f) px[i] = 0.5f;
  check_gradient(x, nn::relu_backward(w, x), [&] { return dot(nn::relu(x), w); }, "relu");
  Tensor in_place = w.clone();
  nn::relu_backward_(in_place, x);
  EXPECT_EQ(in_place.to_vector(), nn::relu_backward(w, x).to_vector());
  check_gradient(x, nn::gelu_backward(w, x), [&] { return dot(nn::gelu(x), w); }, "gelu erf");
  const auto tanh_form = nn::GeluApproximation::tanh;
  check_gradient(x, nn::gelu_backward(w, x, tanh_form),
                 [&] { return dot(nn::gelu(x, tanh_form), w); }, "gelu tanh");
}

TEST(Backward, RopeMatchesFiniteDifferences) {
  Tensor x = randn({1, 2, 5, 6}, 15), w = randn({1, 2, 5, 6}, 16);
  check_gradient(x, nn::apply_rope_backward(w, 3), [&] { return dot(nn::apply_rope(x, 3), w); },
                 "rope");
}

TEST(Backward, EmbeddingAddsEveryOccurrence) {
  Tensor dw = Tensor::zeros({4, 2});
  const std::vector<std::int64_t> ids{1, 3, 1};
  Tensor dy = Tensor::from_vector({3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  nn::embedding_backward(dy, ids, dw, 0.5f);
  EXPECT_EQ(dw.to_vector(), (std::vector<float>{0, 0, 3, 4, 0, 0, 1.5f, 2}));
  const std::vector<std::int64_t> bad{4};
  EXPECT_THROW(nn::embedding_backward(Tensor::zeros({1, 2}), bad, dw), qkv::Error);
}

struct MhaCase {
  bool cross;
  bool packed;
  bool causal;
  bool padded;
};

class MhaBackward : public ::testing::TestWithParam<MhaCase> {};

TEST_P(MhaBackward, MatchesFiniteDifferences) {
  const MhaCase c = GetParam();
  nn::MultiheadAttentionConfig config;
  config.embed_dim = 8;
  config.num_heads = 2;
  if (!c.packed) config.kdim = config.vdim = 8;  // separate weights are forced below
  nn::MultiheadAttention mha(config, 11), grads(config, 11);
  if (!c.packed) {  // the separate-weight layout torch uses when kdim/vdim differ
    for (nn::MultiheadAttention* m : {&mha, &grads}) {
      m->q_proj_weight = m->in_proj_weight.slice(0, 0, 8).clone();
      m->k_proj_weight = m->in_proj_weight.slice(0, 8, 16).clone();
      m->v_proj_weight = m->in_proj_weight.slice(0, 16, 24).clone();
      m->in_proj_weight = Tensor();
    }
  }
  train::zero_grad(grads.parameters());
  Tensor q = randn({2, 5, 8}, 12), mem = c.cross ? randn({2, 6, 8}, 13) : Tensor();
  Tensor w = randn({2, 5, 8}, 14);
  nn::AttentionMasks masks;
  masks.is_causal = c.causal;
  if (c.padded) {
    const std::int64_t S = c.cross ? 6 : 5;
    masks.key_padding_mask = Tensor::zeros({2, S}, qkv::DType::boolean);
    masks.key_padding_mask.set({1, S - 1}, 1.f);
    masks.key_padding_mask.set({1, S - 2}, 1.f);
  }
  nn::MultiheadAttentionSaved saved;
  nn::multihead_attention_forward_train(q, mem, mha, masks, saved);
  Tensor dmem;
  Tensor dq = nn::multihead_attention_backward(w, mha, saved, grads, c.cross ? &dmem : nullptr);
  auto loss = [&] {
    const Tensor& kv = c.cross ? mem : q;
    return dot(mha.forward(q, kv, kv, masks).out, w);
  };
  check_gradient(q, dq, loss, "dquery");
  if (c.cross) check_gradient(mem, dmem, loss, "dmemory");
  auto params = mha.parameters();
  auto gparams = grads.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    check_gradient(*params[i].second, *gparams[i].second, loss, params[i].first);
}

INSTANTIATE_TEST_SUITE_P(Cases, MhaBackward,
                         ::testing::Values(MhaCase{false, true, false, false},
                                           MhaCase{false, true, true, true},
                                           MhaCase{true, true, false, true},
                                           MhaCase{true, false, false, false}));

class LayerBackward : public ::testing::TestWithParam<bool> {};  // norm_first

TEST_P(LayerBackward, EncoderAndDecoderMatchFiniteDifferences) {
  nn::TransformerLayerConfig c;
  c.d_model = 8;
  c.nhead = 2;
  c.dim_feedforward = 12;
  c.norm_first = GetParam();
  c.activation = nn::Activation::gelu;
  nn::TransformerEncoderLayer enc(c, 21), genc(c, 21);
  nn::TransformerDecoderLayer dec(c, 22), gdec(c, 22);
  train::zero_grad(genc.parameters());
  train::zero_grad(gdec.parameters());
  Tensor src = randn({2, 4, 8}, 23), tgt = randn({2, 3, 8}, 24);
  Tensor w = randn({2, 3, 8}, 25);
  nn::AttentionMasks causal;
  causal.is_causal = true;
  // loss = Σ dec(tgt, enc(src))∘w: the decoder's dmemory flows into the encoder.
  nn::TransformerEncoderLayerSaved se;
  nn::TransformerDecoderLayerSaved sd;
  Tensor memory = nn::encoder_layer_forward_train(src, enc, {}, se);
  nn::decoder_layer_forward_train(tgt, memory, dec, causal, {}, sd);
  Tensor dmemory;
  Tensor dtgt = nn::decoder_layer_backward(w, dec, sd, gdec, &dmemory);
  Tensor dsrc = nn::encoder_layer_backward(dmemory, enc, se, genc);
  auto loss = [&] { return dot(dec.forward(tgt, enc.forward(src), causal, {}), w); };
  check_gradient(src, dsrc, loss, "dsrc");
  check_gradient(tgt, dtgt, loss, "dtgt");
  auto pe = enc.parameters(), ge = genc.parameters();
  for (std::size_t i = 0; i < pe.size(); ++i)
    check_gradient(*pe[i].second, *ge[i].second, loss, "encoder " + pe[i].first);
  auto pd = dec.parameters(), gd = gdec.parameters();
  for (std::size_t i = 0; i < pd.size(); ++i)
    check_gradient(*pd[i].second, *gd[i].second, loss, "decoder " + pd[i].first);
}

INSTANTIATE_TEST_SUITE_P(NormFirst, LayerBackward, ::testing::Bool());

class VectorAttentionBackward : public ::testing::TestWithParam<std::int64_t> {};  // neighbours

TEST_P(VectorAttentionBackward, MatchesFiniteDifferences) {
  nn::VectorAttentionConfig c;
  c.dim = 4;
  c.pos_dim = 3;
  c.pos_mlp_hidden_dim = 5;
  c.attn_mlp_hidden_mult = 2;
  c.num_neighbors = GetParam();
  nn::VectorAttention va(c, 31), grads(c, 31);
  // Every point is its own neighbour, so rel = p_i − p_i = 0 makes pos_mlp.0's
  // pre-activation exactly its bias on B·N rows at once: keep the bias away from the ReLU
  // kink, where a difference quotient means nothing.
  for (std::int64_t k = 0; k < c.pos_mlp_hidden_dim; ++k)
    va.pos_mlp0.bias.set({k}, k % 2 ? 0.4f : -0.4f);
  train::zero_grad(grads.parameters());
  Tensor x = randn({2, 6, 4}, 32), pos = randn({2, 6, 3}, 33), w = randn({2, 6, 4}, 34);
  Tensor dx = nn::vector_attention_backward(w, va, x, pos, grads);
  auto loss = [&] { return dot(va.forward(x, pos), w); };
  // A first-layer weight moves the pre-activation of up to B·N·K = 72 (point, neighbour)
  // rows at once, so steps of 1e-2 and 2e-3 made some ReLU cross its kink (the quotient
  // then moved towards the analytic value as h shrank). At 5e-4 the f32 rounding of the
  // loss (~1e-6 on sums of ~50 terms of order 1) costs ~1e-3 in the quotient, under the
  // 2e-3·(1 + max|g|) bound.
  constexpr float h = 5e-4f;
  check_gradient(x, dx, loss, "dx", h);
  auto p = va.parameters(), g = grads.parameters();
  for (std::size_t i = 0; i < p.size(); ++i)
    check_gradient(*p[i].second, *g[i].second, loss, p[i].first, h);
}

INSTANTIATE_TEST_SUITE_P(Neighbours, VectorAttentionBackward, ::testing::Values(0, 3));

TEST(Backward, Seq2SeqLossMatchesFiniteDifferences) {
  qkv::models::Seq2SeqConfig c;
  c.vocab_size = 9;
  c.d_model = 8;
  c.nhead = 2;
  c.dim_feedforward = 8;
  c.num_encoder_layers = 1;
  c.num_decoder_layers = 1;
  c.max_len = 8;
  c.activation = nn::Activation::gelu;  // smooth: a ReLU kink would break the difference quotient
  qkv::models::Seq2Seq model(c, 3), grads(c, 3);
  train::zero_grad(grads.parameters());
  qkv::models::Seq2SeqBatch b;
  b.batch = 2;
  b.src_len = 4;
  b.tgt_len = 3;
  b.src = {4, 5, 6, 7, 8, 4, 0, 0};
  b.src_lengths = {4, 2};
  b.tgt_in = {1, 5, 6, 1, 7, 8};
  b.tgt_out = {5, 6, 2, 7, 8, -100};
  model.forward_backward(b, grads, 0.1);
  auto loss = [&] {
    Tensor logits = model.forward(b).view({b.batch * b.tgt_len, c.vocab_size});
    return train::cross_entropy(logits, b.tgt_out, nullptr, 0.1).loss;
  };
  auto p = model.parameters(), g = grads.parameters();
  for (std::size_t i = 0; i < p.size(); ++i) check_gradient(*p[i].second, *g[i].second, loss, p[i].first);
}

// ---------------------------------------------------------------------------------------

TEST(Train, CrossEntropyMatchesItsFormula) {
  Tensor logits = randn({3, 5}, 31);
  const std::vector<std::int64_t> targets{2, -100, 4};
  Tensor d;
  const double eps = 0.2;
  train::CrossEntropyResult r = train::cross_entropy(logits, targets, &d, eps);
  EXPECT_EQ(r.counted, 2);
  double want = 0;
  std::vector<double> dwant(15, 0.0);
  for (int row : {0, 2}) {
    double z = 0;
    for (int v = 0; v < 5; ++v) z += std::exp(double{logits.get({row, v})});
    for (int v = 0; v < 5; ++v) {
      const double p = std::exp(double{logits.get({row, v})}) / z;
      const double t = (v == targets[static_cast<std::size_t>(row)] ? 1 - eps : 0) + eps / 5;
      want -= t * std::log(p) / 2;
      dwant[static_cast<std::size_t>(row * 5 + v)] = (p - t) / 2;
    }
  }
  EXPECT_NEAR(r.loss, want, 1e-6);
  const auto got = d.to_vector();
  for (std::size_t i = 0; i < 15; ++i) EXPECT_NEAR(got[i], dwant[i], 1e-6) << i;
  const std::vector<std::int64_t> bad{2, 5, 1};
  EXPECT_THROW(train::cross_entropy(logits, bad, &d), qkv::Error);
}

TEST(Train, AdamWMatchesTheUpdateRuleInDouble) {
  Tensor p = randn({3, 4}, 41), bias = randn({4}, 42);
  nn::ParameterList params{{"w", &p}, {"b", &bias}};
  Tensor gp = randn({3, 4}, 43), gb = randn({4}, 44);
  nn::ParameterList grads{{"w", &gp}, {"b", &gb}};
  train::AdamWOptions o;
  o.weight_decay = 0.1;
  const auto p0 = p.to_vector(), b0 = bias.to_vector();
  std::vector<double> theta(p0.begin(), p0.end()), theta_b(b0.begin(), b0.end());
  std::vector<double> m(12, 0), v(12, 0), mb(4, 0), vb(4, 0);
  train::AdamW opt(params, o);
  const double lrs[] = {1e-2, 5e-3, 2e-3};
  for (int t = 1; t <= 3; ++t) {
    opt.step(grads, lrs[t - 1]);
    const double lr = lrs[t - 1];
    auto update = [&](std::vector<double>& th, std::vector<double>& mm, std::vector<double>& vv,
                      const Tensor& g, bool decay) {
      const auto gv = g.to_vector();
      for (std::size_t i = 0; i < th.size(); ++i) {
        if (decay) th[i] -= lr * o.weight_decay * th[i];
        mm[i] = 0.9 * mm[i] + 0.1 * gv[i];
        vv[i] = 0.999 * vv[i] + 0.001 * gv[i] * gv[i];
        const double mh = mm[i] / (1 - std::pow(0.9, t)), vh = vv[i] / (1 - std::pow(0.999, t));
        th[i] -= lr * mh / (std::sqrt(vh) + o.eps);
      }
    };
    update(theta, m, v, gp, true);
    update(theta_b, mb, vb, gb, false);  // vectors are not decayed by default
  }
  const auto got = p.to_vector(), got_b = bias.to_vector();
  for (std::size_t i = 0; i < 12; ++i) EXPECT_NEAR(got[i], theta[i], 1e-6) << i;
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(got_b[i], theta_b[i], 1e-6) << i;
  EXPECT_EQ(opt.steps(), 3);
  // The state round-trips.
  train::AdamW other(params, o);
  other.load_state(opt.state(), opt.steps());
  EXPECT_EQ(other.state()[0].second.to_vector(), opt.state()[0].second.to_vector());
}

TEST(Train, ScheduleWarmsUpThenFollowsTheCosine) {
  const train::Schedule s{1e-3, 10, 110, 0.1};
  EXPECT_NEAR(train::cosine_schedule(0, s), 1e-4, 1e-12);
  EXPECT_NEAR(train::cosine_schedule(9, s), 1e-3, 1e-12);
  EXPECT_NEAR(train::cosine_schedule(10, s), 1e-3, 1e-12);
  EXPECT_NEAR(train::cosine_schedule(60, s), 1e-4 + 0.9e-3 * 0.5, 1e-12);
  EXPECT_NEAR(train::cosine_schedule(110, s), 1e-4, 1e-12);
}

TEST(Train, ClipScalesToTheMaximumNorm) {
  Tensor a = Tensor::from_vector({2}, std::vector<float>{3, 0});
  Tensor b = Tensor::from_vector({1}, std::vector<float>{4});
  nn::ParameterList g{{"a", &a}, {"b", &b}};
  EXPECT_NEAR(train::clip_grad_norm(g, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(a.get({0}), 0.6, 1e-6);
  EXPECT_NEAR(b.get({0}), 0.8, 1e-6);
  EXPECT_NEAR(train::clip_grad_norm(g, 10.0), 1.0, 1e-6);  // under the limit: unchanged
  EXPECT_NEAR(a.get({0}), 0.6, 1e-6);
}

}  // namespace
