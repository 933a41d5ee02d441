// The date translator (qkv/dates.h): the embedded model's greedy decoding — one token per
// step through the KV caches — against argmax over the uncached forward of each prefix.

#include <algorithm>
#include <string>
#include <vector>

#include "qkv/dates.h"
#include "qkv/seq2seq.h"
#include "nn/check.h"

namespace {

using qkv::Tensor;
namespace models = qkv::models;

// The trained date model's top logits are far apart, so the cached and uncached paths
// must pick the same tokens.
TEST(DateTranslator, CachedGreedyDecodeEqualsArgmaxOfFullForward) {
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
