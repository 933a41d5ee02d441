// GPT-2 trained by qkv (qkv/gpt2.h, language_model/language_model.h): the LM loss's gradient against
// finite differences (and against torch autograd in tests/python/test_gpt2_training.py),
// the saved Hugging Face directory read back by the inference path, score_text against
// its naive twin, deterministic batches, a resumed run equal to an uninterrupted one, and
// bad input named.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "attention/expect_error.h"
#include "nn/check.h"
#include "temp_dir.h"
#include "language_model/language_model.h"

namespace {

using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, check_gradient, expect_error, TempDir
namespace models = qkv::models;

models::Gpt2Config tiny() {
  models::Gpt2Config c;
  c.vocab_size = 13;
  c.n_positions = 7;
  c.n_embd = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_inner = 12;
  return c;
}

// Every weight away from GPT-2's init (biases and gains are 0 and 1 there), so that a
// gradient dropped for any of them shows.
models::Gpt2Weights perturbed(const models::Gpt2Config& c, std::uint64_t seed) {
  models::Gpt2Weights w = models::Gpt2Weights::initialized(c, seed);
  perturb(w.parameters(), seed + 7);
  return w;
}

std::string some_text() {
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "The state of the Union is strong, and the Congress " + std::to_string(i * 7) +
            " times said so. ";
  return text;
}

}  // namespace

TEST(Gpt2Training, LossGradientMatchesFiniteDifferences) {
  const models::Gpt2Config c = tiny();
  models::Gpt2Weights w = perturbed(c, 1);
  models::Gpt2Weights grads = models::Gpt2Weights::zeros_like(c);
  // Two windows of T + 1 = 6 tokens; token 3 repeats (the tied head and wte sum rows).
  const std::vector<std::int64_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
  const double analytic_loss = models::gpt2_lm_loss(c, w, tokens, 2, 5, &grads).loss;
  auto loss = [&] { return models::gpt2_lm_loss(c, w, tokens, 2, 5).loss; };
  EXPECT_NEAR(analytic_loss, loss(), 1e-6);
  auto p = w.parameters(), g = grads.parameters();
  ASSERT_EQ(p.size(), g.size());
  for (std::size_t i = 0; i < p.size(); ++i) check_gradient(*p[i].second, *g[i].second, loss, p[i].first);
}

// The loss is the mean cross-entropy of the inference path's logits: the training forward
// (records kept) and Gpt2Model (packed weights, no records) are one forward.
TEST(Gpt2Training, SavedDirectoryLoadsAndAgreesWithTheTrainingForward) {
  TempDir dir("save");
  models::Gpt2Config c = tiny();
  c.eos_token_id = 12;
  models::Gpt2Weights w = perturbed(c, 2);
  models::save_gpt2(dir.path.string(), c, w, {{"steps", "3"}});
  const models::Gpt2Model model = models::Gpt2Model::load(dir.path.string());
  EXPECT_TRUE(model.weights.unused_tensors.empty());
  EXPECT_EQ(model.config.to_json(), c.to_json());
  const std::vector<std::int64_t> ids = {12, 4, 7, 1, 0, 11, 3};
  const Tensor logits = model.forward_full(ids);  // (7, V)
  double want = 0;
  for (int t = 0; t + 1 < 7; ++t) {
    const float* row = logits.data_as<float>() + t * c.vocab_size;
    double z = 0;
    for (int v = 0; v < c.vocab_size; ++v) z += std::exp(static_cast<double>(row[v]));
    want += std::log(z) - row[ids[static_cast<std::size_t>(t + 1)]];
  }
  want /= 6;
  EXPECT_NEAR(models::gpt2_lm_loss(c, w, ids, 1, 6).loss, want, 1e-5);
  // Hugging Face's names and layout: Conv1D weights (in, out), the tied head left out.
  const qkv::SafeTensors st = qkv::SafeTensors::open((dir.path / "model.safetensors").string());
  EXPECT_TRUE(st.contains("transformer.h.1.attn.c_attn.weight"));
  EXPECT_EQ(st.info("transformer.h.1.mlp.c_fc.weight").shape, qkv::Shape({8, 12}));
  EXPECT_FALSE(st.contains("lm_head.weight"));
  // bf16 halves the file and loads widened.
  TempDir half("save_bf16");
  models::save_gpt2(half.path.string(), c, w, {}, qkv::DType::bf16);
  const models::Gpt2Model model16 = models::Gpt2Model::load(half.path.string());
  const Tensor logits16 = model16.forward_full(ids);
  double worst = 0;
  for (std::int64_t i = 0; i < logits.numel(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(logits.data_as<float>()[i] -
                                                         logits16.data_as<float>()[i])));
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 0.1);
}

TEST(Gpt2Training, InitializationIsGpt2s) {
  models::Gpt2Config c = tiny();
  c.n_embd = 64;
  c.n_inner = 256;
  c.n_layer = 8;
  c.vocab_size = 500;
  models::Gpt2Weights w = models::Gpt2Weights::initialized(c, 5);
  auto stddev = [](const Tensor& t) {
    double s = 0;
    for (std::int64_t i = 0; i < t.numel(); ++i) s += std::pow(t.data_as<float>()[i], 2);
    return std::sqrt(s / static_cast<double>(t.numel()));
  };
  EXPECT_NEAR(stddev(w.wte.weight), 0.02, 0.001);
  EXPECT_NEAR(stddev(w.h[3].self_attn.in_proj.weight), 0.02, 0.001);
  EXPECT_NEAR(stddev(w.h[3].ff.linear2.weight), 0.02 / 4.0, 0.0005);  // 0.02 / √(2·8)
  EXPECT_EQ(stddev(w.h[3].ff.linear2.bias), 0.0);
  EXPECT_EQ(w.ln_f.weight.data_as<float>()[5], 1.0f);
  std::int64_t n = 0;
  for (auto& [name, t] : w.parameters()) n += t->numel();
  EXPECT_EQ(n, c.num_parameters());
  // Deterministic in the seed.
  models::Gpt2Weights again = models::Gpt2Weights::initialized(c, 5);
  EXPECT_EQ(again.h[7].self_attn.out_proj.weight.data_as<float>()[10],
            w.h[7].self_attn.out_proj.weight.data_as<float>()[10]);
}

TEST(Gpt2Training, BatchOffsetsAreAPureFunctionInRange) {
  const auto a = models::lm_batch_offsets(3, 10, 64, 5, 20);
  EXPECT_EQ(a, models::lm_batch_offsets(3, 10, 64, 5, 20));
  EXPECT_NE(a, models::lm_batch_offsets(3, 11, 64, 5, 20));
  std::vector<int> seen(15, 0);
  for (const auto o : a) {
    ASSERT_GE(o, 0);
    ASSERT_LE(o, 20 - 5 - 1);  // a window of T + 1 = 6 tokens fits
    ++seen[static_cast<std::size_t>(o)];
  }
  for (int s : seen) EXPECT_GT(s, 0);  // 64 draws reach each of the 15 starts
  expect_error([] { models::lm_batch_offsets(0, 0, 1, 5, 5); }, "lm_batch_offsets");
}

// score_text against its naive twin: every target scored by its own forward over the
// window the documented rule gives it.
TEST(Gpt2Training, ScoreMatchesTheSlidingWindowRule) {
  TempDir dir("score");
  const std::string text = "We the people of the United States, in order to form a more perfect union.";
  const qkv::BpeVocabulary vocab = qkv::train_bpe(text + text, {.vocab_size = 270});
  const qkv::BpeTokenizer tok = vocab.tokenizer();
  models::Gpt2Config c = tiny();
  c.vocab_size = static_cast<std::int64_t>(tok.vocab_size());
  models::Gpt2Weights w = perturbed(c, 4);
  models::save_gpt2(dir.path.string(), c, w);
  const models::Gpt2Model model = models::Gpt2Model::load(dir.path.string());
  const std::vector<std::int64_t> ids = models::lm_tokens(tok, text);
  ASSERT_EQ(ids.front(), *tok.eos_id());
  const auto N = static_cast<std::int64_t>(ids.size());
  ASSERT_GT(N, 3 * c.n_positions);
  for (const std::int64_t stride : {1, 2, 3, 6}) {
    const models::TextScore s = models::score_text(model, tok, text, stride);
    // The window that scores target t: the first when t < P, else the one starting at
    // begin = the least multiple of stride with begin + P > t.
    double nll = 0;
    for (std::int64_t t = 1; t < N; ++t) {
      std::int64_t begin = 0;
      while (begin + c.n_positions <= t) begin += stride;
      const std::vector<std::int64_t> window(ids.begin() + begin, ids.begin() + t);
      const Tensor logits = model.forward_full(window);
      const float* row = logits.data_as<float>() + (t - 1 - begin) * c.vocab_size;
      double z = 0;
      for (int v = 0; v < c.vocab_size; ++v) z += std::exp(static_cast<double>(row[v]));
      nll += std::log(z) - row[ids[static_cast<std::size_t>(t)]];
    }
    EXPECT_EQ(s.tokens, N - 1);
    EXPECT_EQ(s.bytes, static_cast<std::int64_t>(text.size()));
    EXPECT_NEAR(s.loss, nll / static_cast<double>(N - 1), 1e-5) << "stride " << stride;
    EXPECT_NEAR(s.bits_per_byte, nll / std::log(2.0) / static_cast<double>(text.size()), 1e-5);
    EXPECT_NEAR(s.perplexity, std::exp(s.loss), 1e-9 * s.perplexity);
  }
  expect_error([&] { models::score_text(model, tok, "", 0); }, "the text is empty");
  expect_error([&] { models::score_text(model, tok, text, c.n_positions); }, "stride must be in");
}

// A run stopped at step 4 and resumed to step 8 ends with the weights of a run of 8 steps.
TEST(Gpt2Training, ResumedRunEqualsUninterruptedRun) {
  TempDir dir("resume");
  const std::string text = dir.write("train.txt", some_text());
  const std::string heldout = dir.write("heldout.txt", some_text().substr(500, 900));
  auto options = [&](const std::string& out) {
    models::LmTrainingOptions o;
    o.text = text;
    o.heldout = heldout;
    o.vocab_size = 300;
    o.model = tiny();
    o.model.n_positions = 16;
    o.steps = 8;
    o.batch = 3;
    o.warmup_steps = 2;
    o.eval_every = 4;
    o.eval_tokens = 64;
    o.out_dir = (dir.path / out).string();
    return o;
  };
  models::LmTrainingOptions straight = options("straight");
  std::vector<double> losses;
  const models::LmTrainingResult r =
      models::train_lm(straight, [&](const train::Progress& p) { losses.push_back(p.loss); });
  EXPECT_EQ(r.steps, 8);
  EXPECT_FALSE(r.interrupted);
  EXPECT_GT(r.val_loss, 0);
  ASSERT_EQ(losses.size(), 8u);
  EXPECT_LT(losses.back(), losses.front());

  models::LmTrainingOptions first = options("resumed");
  first.stop_at = 4;
  EXPECT_TRUE(models::train_lm(first, {}).interrupted);
  models::LmTrainingOptions second = options("resumed");
  second.resume = true;
  EXPECT_EQ(models::train_lm(second, {}).steps, 8);
  const qkv::SafeTensors a = qkv::SafeTensors::open(straight.out_dir + "/model.safetensors");
  const qkv::SafeTensors b = qkv::SafeTensors::open(second.out_dir + "/model.safetensors");
  for (const auto& name : a.names()) {
    const Tensor x = a.get(name), y = b.get(name);
    ASSERT_EQ(x.numel(), y.numel()) << name;
    for (std::int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(x.data_as<float>()[i], y.data_as<float>()[i]) << name << "[" << i << "]";
  }
  // Another model shape cannot resume that checkpoint.
  models::LmTrainingOptions other = options("resumed");
  other.resume = true;
  other.model.n_embd = 16;
  expect_error([&] { models::train_lm(other, {}); }, "was written by a run with other options (config");
}

TEST(Gpt2Training, BadInputIsNamed) {
  TempDir dir("bad");
  models::LmTrainingOptions o;
  o.model = tiny();
  o.out_dir = (dir.path / "out").string();
  o.vocab_size = 300;
  o.text = dir.write("empty.txt", "");
  expect_error([&] { models::train_lm(o, {}); }, "empty");
  o.text = dir.write("binary.txt", std::string("ab\0cd", 5));
  expect_error([&] { models::train_lm(o, {}); }, "binary data");
  o.text = dir.write("short.txt", "Hi.");  // <|endoftext|> H i . \n: 5 tokens, T = 7
  expect_error([&] { models::train_lm(o, {}); }, "one training window");
  o.text = dir.write("ok.txt", some_text());
  o.vocab_size = 200;
  expect_error([&] { models::train_lm(o, {}); }, "vocab_size must be >= 257");
  o.vocab_size = 300;
  o.tokenizer = (dir.path / "nowhere").string();
  expect_error([&] { models::train_lm(o, {}); }, "does not exist");
}
