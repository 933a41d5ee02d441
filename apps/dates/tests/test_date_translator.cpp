// The date translator (dates/dates.h): the embedded model's greedy decoding — one token per
// step through the KV caches — against argmax over the uncached forward of each prefix.

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "dates/dates.h"
#include "qkv/safetensors.h"
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

namespace {

// The message of the qkv::Error that f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const qkv::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// A checkpoint's metadata is the file's text: a step that is not a count is an error naming
// it (std::stoll threw std::invalid_argument, which is no qkv::Error).
TEST(DateTranslator, ResumeRefusesAStepThatIsNotACount) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("qkv_test_dates_resume_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  models::DateTrainingOptions o;
  o.steps = 2;
  o.batch = 2;
  o.out_dir = dir.string();
  o.stop_at = 1;
  ASSERT_TRUE(models::train_dates(o, nullptr, nullptr).interrupted);  // a real checkpoint at step 1
  o.stop_at = 0;
  o.resume = true;
  const std::string path = (dir / "checkpoint.safetensors").string();
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> meta;
  {
    const qkv::SafeTensors ck = qkv::SafeTensors::open(path);
    for (const std::string& name : ck.names()) tensors.emplace_back(name, ck.get(name).contiguous());
    meta = ck.metadata();
  }
  for (const std::string step : {"abc", "1x", "-1"}) {
    meta["step"] = step;
    qkv::save_safetensors(path, tensors, meta);
    const std::string msg = error_of([&] { models::train_dates(o, nullptr, nullptr); });
    EXPECT_NE(msg.find("metadata \"step\" must be a count >= 0, got \"" + step + "\""), std::string::npos) << msg;
  }
  // A model of another vocabulary is not a date translator.
  models::Seq2SeqConfig other = o.model;
  other.vocab_size += 1;
  const std::string msg = error_of([&] { models::translate_dates(models::Seq2Seq(other), {"1.1.2000"}); });
  EXPECT_NE(msg.find("the model's vocab_size is 80, the date vocabulary's 79"), std::string::npos)
      << msg;
  std::filesystem::remove_all(dir);
}
