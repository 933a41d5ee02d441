// The SentencePiece tokenizer on the Universal Sentence Encoder lite's real vocabulary
// (8000 pieces), against its published pipeline (npm @energetic-ai/embeddings 0.2.0):
//   $QKV_TEST_USE_DIR/tokenizer.json   the converted vocabulary (scripts/models)
//   $QKV_TEST_USE_REFERENCE            [{"text", "ids", "embedding"}, ...]: what the
//                                      pipeline gives for each string of
//                                      tests/models/use_corpus.json (tests/models/use_pipeline.js)
// The ids must be identical for every entry: the model's embeddings are compared with
// the pipeline's, and one different id changes them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/tokenizer.h"

namespace {

using Ids = std::vector<std::int64_t>;

std::filesystem::path env_path(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    ADD_FAILURE() << name << " is not set: run through ctest (its fixture provides it)";
    return {};
  }
  return value;
}

const qkv::SentencePieceTokenizer& use_tokenizer() {
  static const auto t = qkv::SentencePieceTokenizer::from_tokenizer_json(
      env_path("QKV_TEST_USE_DIR") / "tokenizer.json");
  return t;
}

struct Entry {
  std::string text;
  Ids ids;
};

// The reference file's texts and ids (the embeddings are the model tests' business).
std::vector<Entry> read_reference() {
  const std::filesystem::path path = env_path("QKV_TEST_USE_REFERENCE");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot open the reference file '" << path.string() << "'";
    return {};
  }
  const nlohmann::json j = nlohmann::json::parse(in);
  std::vector<Entry> entries;
  if (!j.is_array()) {
    ADD_FAILURE() << "'" << path.string() << "' must hold a JSON array";
    return {};
  }
  for (std::size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    if (!e.is_object() || !e.contains("text") || !e["text"].is_string() || !e.contains("ids") ||
        !e["ids"].is_array()) {
      ADD_FAILURE() << "'" << path.string() << "' entry " << i
                    << " must be {\"text\": string, \"ids\": [int, ...], ...}";
      return {};
    }
    entries.push_back({e["text"].get<std::string>(), e["ids"].get<Ids>()});
  }
  return entries;
}

// A text for a failure message: control characters escaped, at most 120 bytes.
std::string shown(const std::string& text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < 120; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7F || c == '"' || c == '\\') {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + (text.size() > 120 ? "\"... (" + std::to_string(text.size()) + " bytes)" : "\"");
}

std::string shown_ids(const Ids& ids, std::size_t from, std::size_t count) {
  std::ostringstream s;
  for (std::size_t i = from; i < ids.size() && i < from + count; ++i)
    s << (i > from ? " " : "") << ids[i];
  return s.str();
}

TEST(UsePipelineTokenizer, VocabularyLayout) {
  const auto& t = use_tokenizer();
  EXPECT_EQ(t.vocab_size(), 8000u);
  EXPECT_EQ(t.unk_id(), 0);
  for (std::int64_t id = 0; id < 6; ++id) EXPECT_TRUE(t.is_reserved(id)) << id;
  EXPECT_FALSE(t.is_reserved(6));
  EXPECT_EQ(t.id_to_token(1), "<s>");
  EXPECT_EQ(t.token_to_id("\xE2\x96\x81the"), 9);  // "▁the"
  // The pieces whose vocab.json score is null, which the pipeline adds as 0.
  for (std::int64_t id : {57, 255, 604, 658, 4258, 4445, 6600}) EXPECT_EQ(t.score(id), 0.0) << id;
  EXPECT_EQ(t.score(5920), 0.0);  // ":00", a real 0
  // "”5" is in the vocabulary three times; the last, 4464, is the one matched.
  EXPECT_EQ(t.token_to_id("\xE2\x80\x9D"
                          "5"),
            4464);
  EXPECT_EQ(t.encode("\xE2\x80\x9D"
                     "5"),
            (Ids{30, 4464}));
}

// Ids printed by the pipeline itself (Tokenizer.encode in node), independent of the
// reference file.
TEST(UsePipelineTokenizer, KnownEncodings) {
  const auto& t = use_tokenizer();
  EXPECT_EQ(t.encode("Hello world"), (Ids{341, 4125, 311}));
  EXPECT_EQ(t.encode(":)"), (Ids{30, 57, 52}));  // "▁:" (0) is replaced: best 0 is "unset"
  EXPECT_EQ(t.encode("10:00"), (Ids{320, 5920}));
  EXPECT_EQ(t.encode(" "), (Ids{30, 30}));
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.encode("h\xC3\xA9llo \xE2\x98\x83 \xF0\x9D\x94\x98"),  // "héllo ☃ 𝔘"
            (Ids{1786, 1133, 120, 102, 30, 0, 443}));
}

TEST(UsePipelineTokenizer, IdsMatchThePipelineOnTheCorpus) {
  const auto& t = use_tokenizer();
  const std::vector<Entry> entries = read_reference();
  ASSERT_FALSE(entries.empty()) << "the reference file has no entries";
  std::size_t mismatches = 0, tokens = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    Ids got;
    try {
      got = t.encode(e.text);
    } catch (const qkv::Error& error) {
      ADD_FAILURE() << "entry " << i << " " << shown(e.text) << ": " << error.what();
      ++mismatches;
      continue;
    }
    tokens += got.size();
    if (got == e.ids) continue;
    ++mismatches;
    std::size_t k = 0;
    while (k < got.size() && k < e.ids.size() && got[k] == e.ids[k]) ++k;
    const std::size_t from = k >= 3 ? k - 3 : 0;
    ADD_FAILURE() << "entry " << i << " " << shown(e.text) << ": the ids first differ at position "
                  << k << " (pipeline " << e.ids.size() << " ids, qkv " << got.size()
                  << ")\n  pipeline from " << from << ": " << shown_ids(e.ids, from, 8)
                  << "\n  qkv      from " << from << ": " << shown_ids(got, from, 8);
  }
  EXPECT_EQ(mismatches, 0u) << "of " << entries.size() << " entries";
  std::cout << "[ info ] " << entries.size() << " entries, " << tokens << " tokens, " << mismatches
            << " mismatches\n";
}

// Printable ASCII without unknowns decodes back to itself: the pieces cover the text.
TEST(UsePipelineTokenizer, DecodeRestoresAsciiText) {
  const auto& t = use_tokenizer();
  std::size_t checked = 0;
  for (const Entry& e : read_reference()) {
    bool ascii = true;
    for (char c : e.text) ascii = ascii && c >= 0x20 && c < 0x7F;
    if (!ascii || std::find(e.ids.begin(), e.ids.end(), 0) != e.ids.end()) continue;
    EXPECT_EQ(t.decode(t.encode(e.text)), e.text);
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

TEST(UsePipelineTokenizer, LoadedThroughTokenizer) {
  const qkv::Tokenizer t = qkv::Tokenizer::load(env_path("QKV_TEST_USE_DIR"));
  ASSERT_NE(t.sentencepiece(), nullptr);
  EXPECT_EQ(t.encode("Hello world"), (Ids{341, 4125, 311}));
  EXPECT_EQ(t.vocab_size(), 8000u);
}

}  // namespace
