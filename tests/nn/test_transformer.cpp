// The Transformer blocks (encoder and decoder layers, Transformer) against their
// definitions composed from the tested pieces, cached decoding against the full decode,
// and their backward passes against finite differences.

#include <tuple>

#include "attention/expect_error.h"
#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

TEST(NnBlocks, EncoderLayerBothNormOrders) {
  for (bool norm_first : {false, true})
    for (auto act : {nn::Activation::relu, nn::Activation::gelu}) {
      nn::TransformerLayerConfig c{16, 4, 32, act, 1e-5, norm_first, true};
      nn::TransformerEncoderLayer layer(c, 3);
      layer.norm1.weight = randn({16}, 1);
      layer.norm2.bias = randn({16}, 2);
      Tensor x = randn({2, 5, 16}, 4);
      nn::AttentionMasks masks;
      masks.is_causal = true;
      Tensor got = layer.forward(x, masks);
      auto sa = [&](const Tensor& t) { return layer.self_attn.forward(t, t, t, masks); };
      // residual + linear2(act(linear1(t))), the activation and the residual as the
      // products' epilogues (FeedForward's fused form).
      auto ff_plus = [&](const Tensor& t, const Tensor& residual) {
        const nn::LinearActivation a = act == nn::Activation::relu ? nn::LinearActivation::relu
                                                                   : nn::LinearActivation::gelu_erf;
        Tensor h = nn::linear(t, layer.ff.linear1.weight, layer.ff.linear1.bias, {a, Tensor()});
        return nn::linear(h, layer.ff.linear2.weight, layer.ff.linear2.bias,
                          {nn::LinearActivation::none, residual});
      };
      auto add = [](const Tensor& a, const Tensor& b) {
        Tensor o = a.clone();
        for (std::int64_t i = 0; i < o.numel(); ++i) o.data_as<float>()[i] += b.contiguous().data_as<float>()[i];
        return o;
      };
      Tensor want;
      if (norm_first) {
        want = add(x, sa(layer.norm1.forward(x)));
        want = ff_plus(layer.norm2.forward(want), want);
      } else {
        want = layer.norm1.forward(add(x, sa(x)));
        want = layer.norm2.forward(ff_plus(want, want));
      }
      // The same operations in the same order (the attention's residual added inside
      // out_proj's product, as a post-op on the same f32 value): bitwise equal.
      EXPECT_EQ(got.to_vector(), want.to_vector()) << "norm_first=" << norm_first;
    }
}

TEST(NnBlocks, TransformerParameterNamesAndLoad) {
  nn::TransformerConfig c;
  c.layer = {8, 2, 16, nn::Activation::relu, 1e-5, false, true};
  c.num_encoder_layers = 2;
  c.num_decoder_layers = 1;
  nn::Transformer t(c, 1);
  nn::StateDict sd = nn::state_dict(t);
  for (const char* name : {"encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.1.linear1.weight",
                           "encoder.layers.1.norm2.bias", "encoder.norm.weight",
                           "decoder.layers.0.multihead_attn.out_proj.bias",
                           "decoder.layers.0.norm3.weight", "decoder.norm.bias"})
    EXPECT_EQ(sd.count(name), 1u) << name;
  // 2 encoder layers × 12 + 2 + 1 decoder layer × 18 + 2.
  EXPECT_EQ(sd.size(), 2u * 12 + 2 + 18 + 2);
  Tensor src = randn({2, 5, 8}, 1), tgt = randn({2, 3, 8}, 2);
  Tensor out = t.forward(src, tgt);
  ASSERT_EQ(out.shape(), (Shape{2, 3, 8}));
  // Loading a state dict of another instance reproduces its output.
  nn::Transformer other(c, 99);
  nn::load_state_dict(other, sd);
  EXPECT_EQ(other.forward(src, tgt).to_vector(), out.to_vector());
  EXPECT_THROW(t.forward(src, randn({3, 3, 8}, 1)), qkv::Error);
}

// A layer that changes width (d_model 6 -> d_out 10, as the Universal Sentence Encoder
// lite's first layer): the attention's out_proj and a residual projection map to d_out,
// norm2 and the feed-forward work there; norm1 is at the input width pre-norm, at the
// output width post-norm. Forward against its definition composed from the pieces,
// backward (every parameter, the input) against finite differences.
class WidthChange : public ::testing::TestWithParam<bool> {};  // norm_first

TEST_P(WidthChange, ForwardIsItsDefinitionAndBackwardMatchesFiniteDifferences) {
  nn::TransformerLayerConfig c;
  c.d_model = 6;
  c.d_out = 10;
  c.nhead = 2;
  c.dim_feedforward = 12;
  c.norm_first = GetParam();
  c.activation = nn::Activation::gelu;  // smooth: central differences across a ReLU kink fail
  nn::TransformerEncoderLayer layer(c, 31), grads(c, 31);
  ASSERT_EQ(layer.self_attn.out_proj.weight.shape(), (Shape{10, 6}));
  ASSERT_EQ(layer.residual_proj.weight.shape(), (Shape{10, 6}));
  ASSERT_EQ(layer.norm1.weight.shape(), (Shape{c.norm_first ? 6 : 10}));
  ASSERT_EQ(layer.ff.linear1.weight.shape(), (Shape{12, 10}));
  layer.self_attn.out_proj.bias = randn({10}, 32);
  layer.residual_proj.bias = randn({10}, 33);
  Tensor x = randn({2, 4, 6}, 34);
  nn::AttentionMasks masks;
  masks.key_lengths = {4, 2};
  const Tensor y = layer.forward(x, masks);
  ASSERT_EQ(y.shape(), (Shape{2, 4, 10}));
  // The definition: r = residual_proj(x); pre-norm x1 = r + sa(norm1(x)), post-norm
  // x1 = norm1(r + sa(x)); then the feed-forward block at width 10.
  const Tensor r = layer.residual_proj.forward(x);
  const Tensor a = c.norm_first ? layer.norm1.forward(x) : x;
  Tensor x1 = layer.self_attn.forward(a, a, a, masks, r);
  if (!c.norm_first) x1 = layer.norm1.forward(x1);
  const Tensor want = c.norm_first ? layer.ff.forward(layer.norm2.forward(x1), x1)
                                   : layer.norm2.forward(layer.ff.forward(x1, x1));
  EXPECT_EQ(y.to_vector(), want.to_vector());
  // The state dict names the projection.
  EXPECT_EQ(nn::state_dict(layer).count("residual_proj.weight"), 1u);

  train::zero_grad(grads.parameters());
  Tensor w = randn({2, 4, 10}, 35);
  nn::TransformerEncoderLayer::Record record;
  layer.forward(x, masks, nullptr, nullptr, &record);
  Tensor dx = layer.backward(w, record, grads);
  auto loss = [&] { return dot(layer.forward(x, masks), w); };
  check_gradient(x, dx, loss, "dx");
  auto p = layer.parameters(), g = grads.parameters();
  ASSERT_EQ(p.size(), g.size());
  for (std::size_t i = 0; i < p.size(); ++i) check_gradient(*p[i].second, *g[i].second, loss, p[i].first);
}

INSTANTIATE_TEST_SUITE_P(NnBlocks, WidthChange, ::testing::Bool());

// forward_first(x, rows): the first rows of forward(x) (each row's products differ only in
// how many rows oneDNN multiplies at once), and its backward against finite differences,
// in both norm orders, with and without a width change, under a causal mask (top-left: the
// rows keep their causal view) and under key lengths.
class ForwardFirst : public ::testing::TestWithParam<std::tuple<bool, bool>> {};  // norm_first, width change

TEST_P(ForwardFirst, IsTheFirstRowsOfForwardAndBackwardMatchesFiniteDifferences) {
  nn::TransformerLayerConfig c;
  c.d_model = 8;
  c.nhead = 2;
  c.dim_feedforward = 12;
  c.norm_first = std::get<0>(GetParam());
  c.d_out = std::get<1>(GetParam()) ? 10 : 0;
  c.activation = nn::Activation::gelu;  // smooth, for central differences
  nn::TransformerEncoderLayer layer(c, 41), grads(c, 41);
  perturb(layer.parameters(), 42);
  const std::int64_t B = 2, L = 5, rows = 2, E = layer.out_features();
  Tensor x = randn({B, L, 8}, 43);
  nn::AttentionMasks causal, lengths;
  causal.is_causal = true;
  lengths.key_lengths = {5, 3};
  for (const nn::AttentionMasks& masks : {causal, lengths}) {
    const Tensor got = layer.forward_first(x, rows, masks);
    ASSERT_EQ(got.shape(), (Shape{B, rows, E}));
    const Tensor full = layer.forward(x, masks).contiguous();
    std::vector<double> want;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < rows * E; ++i) want.push_back(full.data_as<float>()[b * L * E + i]);
    expect_close(got, want, 64 * kU * (1 + max_abs(want)), "forward_first vs forward");

    train::zero_grad(grads.parameters());
    const Tensor w = randn({B, rows, E}, 44);
    nn::TransformerEncoderLayer::Record record;
    layer.forward_first(x, rows, masks, nullptr, &record);
    const Tensor dx = layer.backward(w, record, grads);
    ASSERT_EQ(dx.shape(), x.shape());
    auto loss = [&] { return dot(layer.forward_first(x, rows, masks), w); };
    check_gradient(x, dx, loss, "dx");
    auto p = layer.parameters(), g = grads.parameters();
    for (std::size_t i = 0; i < p.size(); ++i) check_gradient(*p[i].second, *g[i].second, loss, p[i].first);
  }
  // rows = L is forward(); outside [1, L] an error naming the range
  EXPECT_EQ(layer.forward_first(x, L).to_vector(), layer.forward(x).to_vector());
  expect_error([&] { layer.forward_first(x, 0); }, "rows must be in [1, L = 5]");
  expect_error([&] { layer.forward_first(x, 6); }, "rows must be in [1, L = 5]");
}

INSTANTIATE_TEST_SUITE_P(NnBlocks, ForwardFirst, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(NnBlocks, DecoderLayerRefusesAWidthChange) {
  nn::TransformerLayerConfig c;
  c.d_model = 8;
  c.nhead = 2;
  c.d_out = 16;
  EXPECT_THROW(nn::TransformerDecoderLayer(c, 1), qkv::Error);
}

class LayerBackward : public ::testing::TestWithParam<bool> {  // norm_first
 protected:
  // A small layer of the parameter's norm order. GELU: smooth, where ReLU's kinks would bend
  // central differences.
  static nn::TransformerLayerConfig small_config() {
    nn::TransformerLayerConfig c;
    c.d_model = 8;
    c.nhead = 2;
    c.dim_feedforward = 12;
    c.norm_first = GetParam();
    c.activation = nn::Activation::gelu;
    return c;
  }
};

TEST_P(LayerBackward, EncoderAndDecoderMatchFiniteDifferences) {
  const nn::TransformerLayerConfig c = small_config();
  nn::TransformerEncoderLayer enc(c, 21), genc(c, 21);
  nn::TransformerDecoderLayer dec(c, 22), gdec(c, 22);
  train::zero_grad(genc.parameters());
  train::zero_grad(gdec.parameters());
  Tensor src = randn({2, 4, 8}, 23), tgt = randn({2, 3, 8}, 24);
  Tensor w = randn({2, 3, 8}, 25);
  nn::AttentionMasks causal;
  causal.is_causal = true;
  // loss = Σ dec(tgt, enc(src))∘w: the decoder's dmemory flows into the encoder.
  nn::TransformerEncoderLayer::Record se;
  nn::TransformerDecoderLayer::Record sd;
  Tensor memory = enc.forward(src, {}, nullptr, nullptr, &se);
  const Tensor y = dec.forward(tgt, memory, causal, {}, nullptr, nullptr, nullptr, &sd);
  // The recording forwards are the inference forwards, up to the GELU: inference evaluates
  // it inside linear1's product with oneDNN's polynomial (within 8u of each hidden value),
  // carried through linear2's 12 terms and a LayerNorm.
  std::vector<double> inference;
  for (float f : dec.forward(tgt, enc.forward(src), causal, {}).to_vector()) inference.push_back(f);
  expect_close(y, inference, 64 * 12 * kU * (1 + max_abs(inference)), "recording vs inference");
  const nn::TransformerDecoderLayer::Gradients dd = dec.backward(w, sd, gdec);
  Tensor dtgt = dd.tgt;
  Tensor dsrc = enc.backward(dd.memory, se, genc);
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

// The encoder layer in training with torch's dropout (p at the attention probabilities,
// the feed-forward's activation and both branches), both norm orders: with a fixed seed the
// masks are fixed, so the gradients are those of a fixed function, checked by central
// differences; and every site drops something, or the check would prove little. (Against
// torch autograd with the same masks: tests/python/test_sasrec.py.)
TEST_P(LayerBackward, EncoderLayerWithDropoutMatchesFiniteDifferences) {
  const nn::TransformerLayerConfig c = small_config();
  nn::TransformerEncoderLayer enc(c, 31), genc(c, 31);
  perturb(enc.parameters(), 32);
  train::zero_grad(genc.parameters());
  Tensor src = randn({2, 5, 8}, 33);
  const Tensor w = randn({2, 5, 8}, 34);
  nn::AttentionMasks causal;
  causal.is_causal = true;
  const nn::DropoutDraw dropout{0.3, 35};
  nn::TransformerEncoderLayer::Record record;
  const Tensor y = enc.forward(src, causal, nullptr, nullptr, &record, dropout);
  EXPECT_TRUE(record.dropout1.dropped && record.dropout2.dropped && record.ff.dropout.dropped);
  EXPECT_EQ(record.self_attn.options.dropout_p, 0.3);
  EXPECT_NE(y.to_vector(), enc.forward(src, causal).to_vector()) << "dropout changed nothing";
  // The forward without a record draws the same masks.
  EXPECT_EQ(y.to_vector(), enc.forward(src, causal, nullptr, nullptr, nullptr, dropout).to_vector());
  Tensor dsrc = enc.backward(w, record, genc);
  auto loss = [&] { return dot(enc.forward(src, causal, nullptr, nullptr, nullptr, dropout), w); };
  check_gradient(src, dsrc, loss, "dsrc");
  auto p = enc.parameters(), g = genc.parameters();
  for (std::size_t i = 0; i < p.size(); ++i) check_gradient(*p[i].second, *g[i].second, loss, p[i].first);
}

// The whole Transformer: src and tgt gradients and every parameter's, through both stacks,
// padding on the memory and causal decoder self-attention.
TEST_P(LayerBackward, TransformerMatchesFiniteDifferences) {
  nn::TransformerConfig c;
  c.layer = {8, 2, 12, nn::Activation::gelu_tanh, 1e-5, GetParam(), true};
  c.num_encoder_layers = 2;
  c.num_decoder_layers = 1;
  nn::Transformer t(c, 41), g(c, 41);
  train::zero_grad(g.parameters());
  Tensor src = randn({2, 4, 8}, 42), tgt = randn({2, 3, 8}, 43), w = randn({2, 3, 8}, 44);
  nn::AttentionMasks src_masks, tgt_masks;
  src_masks.key_lengths = {4, 2};
  tgt_masks.is_causal = true;
  nn::Transformer::Record record;
  t.forward(src, tgt, src_masks, tgt_masks, src_masks, nullptr, &record);
  const nn::Transformer::Gradients d = t.backward(w, record, g);
  auto loss = [&] { return dot(t.forward(src, tgt, src_masks, tgt_masks, src_masks), w); };
  check_gradient(src, d.src, loss, "dsrc");
  check_gradient(tgt, d.tgt, loss, "dtgt");
  auto p = t.parameters(), gp = g.parameters();
  for (std::size_t i = 0; i < p.size(); ++i) check_gradient(*p[i].second, *gp[i].second, loss, p[i].first);
}

INSTANTIATE_TEST_SUITE_P(NormFirst, LayerBackward, ::testing::Bool());

// Decoding with the decoder's caches, one position at a time, gives the full causal
// decode's rows: the self-attention cache grows, the cross-attention cache is filled once.
TEST(NnBlocks, TransformerCachedDecodingEqualsFullDecode) {
  for (bool norm_first : {false, true}) {
    nn::TransformerConfig c;
    c.layer = {16, 4, 32, nn::Activation::relu, 1e-5, norm_first, true};
    c.num_encoder_layers = 1;
    c.num_decoder_layers = 2;
    nn::Transformer t(c, 7);
    const std::int64_t B = 2, S = 5, T = 6;
    Tensor src = randn({B, S, 16}, 1), tgt = randn({B, T, 16}, 2);
    nn::AttentionMasks src_masks, causal;
    src_masks.key_lengths = {5, 3};
    causal.is_causal = true;
    const Tensor memory = t.encode(src, src_masks);
    const Tensor full = t.decode(tgt, memory, causal, src_masks);  // (B, T, E)
    nn::Transformer::Cache cache = t.make_cache(B, T, S);
    std::vector<float> got(static_cast<std::size_t>(B * T * 16));
    for (std::int64_t i = 0; i < T; ++i) {
      const std::vector<float> step =
          t.decode(tgt.slice(1, i, i + 1), memory, causal, src_masks, &cache).to_vector();  // (B, 1, E)
      for (std::int64_t b = 0; b < B; ++b)
        std::copy_n(step.begin() + b * 16, 16, got.begin() + (b * T + i) * 16);
    }
    EXPECT_EQ(cache[0].self_attn.length, T);
    EXPECT_EQ(cache[1].cross_attn.length, S);
    std::vector<double> want;
    for (float f : full.to_vector()) want.push_back(f);
    // Products over other row counts and the decode kernel's split of the keys: a few u
    // per term of the E- and F-wide products, through two layers and three LayerNorms.
    expect_close(got, want, std::vector<double>(want.size(), 256 * 32 * kU * (1 + max_abs(want))),
                 "cached decode norm_first=" + std::to_string(norm_first));
  }
}

}  // namespace
