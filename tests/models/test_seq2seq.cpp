// The encoder–decoder model (qkv/seq2seq.h): its loss gradient against finite
// differences, and greedy decoding with KV caches against argmax over the full forward.

#include "qkv/date_translator.h"
#include "qkv/dates.h"
#include "qkv/seq2seq.h"
#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...
namespace models = qkv::models;

TEST(Seq2Seq, LossMatchesFiniteDifferences) {
  models::Seq2SeqConfig c;
  c.vocab_size = 9;
  c.d_model = 8;
  c.nhead = 2;
  c.dim_feedforward = 8;
  c.num_encoder_layers = 1;
  c.num_decoder_layers = 1;
  c.max_len = 8;
  c.activation = nn::Activation::gelu;  // smooth: a ReLU kink would break the difference quotient
  models::Seq2Seq model(c, 3), grads(c, 3);
  train::zero_grad(grads.parameters());
  models::Seq2SeqBatch b;
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

// Greedy decoding feeds one token per step through cached keys and values; the same
// tokens come out of argmax over the uncached forward of each whole prefix (the trained
// date model, whose top logits are far apart).
TEST(Seq2Seq, CachedGreedyDecodeEqualsArgmaxOfFullForward) {
  if (!models::has_embedded_date_model()) GTEST_SKIP() << "this build embeds no date model";
  const models::Seq2Seq model = models::embedded_date_model();
  const qkv::dates::Vocabulary& vocab = qkv::dates::Vocabulary::dates();
  const std::vector<std::string> inputs{"Saturday, 21 November 2026", "3.4.1999", "2026年11月21日",
                                        "the 1st of May, 1900"};
  std::vector<std::vector<std::int64_t>> sources;
  for (const auto& s : inputs) sources.push_back(vocab.encode(s));
  const auto decoded = model.greedy_decode(sources, vocab.bos, vocab.eos, 11);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    models::Seq2SeqBatch b;
    b.batch = 1;
    b.src = sources[i];
    b.src_len = static_cast<std::int64_t>(b.src.size());
    b.src_lengths = {b.src_len};
    std::vector<std::int64_t> prefix{vocab.bos}, want;
    for (int step = 0; step < 11; ++step) {
      b.tgt_in = prefix;
      b.tgt_len = static_cast<std::int64_t>(prefix.size());
      const Tensor logits = model.forward(b);  // (1, T, V)
      const std::vector<float> last = logits.select(1, b.tgt_len - 1).contiguous().to_vector();
      const std::int64_t id = std::max_element(last.begin(), last.end()) - last.begin();
      if (id == vocab.eos) break;
      want.push_back(id);
      prefix.push_back(id);
    }
    EXPECT_EQ(decoded[i], want) << inputs[i];
  }
  EXPECT_EQ(vocab.decode(decoded[0]), "2026-11-21");
}

}  // namespace
