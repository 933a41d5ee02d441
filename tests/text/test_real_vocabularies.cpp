// The tokenizers on the real BERT-uncased and GPT-2 vocabularies, fetched by
// fetch_vocabularies.sh (ctest fixture text_vocab) into $QKV_TEST_VOCAB_DIR.
//
// Where the expectations come from:
//  - GPT-2: ids printed by the npm package gpt-3-encoder 1.1.4 (an independent JavaScript
//    port of openai/gpt-2's encoder.py, same vocabulary), plus the well-known
//    "Hello world" -> [15496, 995] and " Hello world" -> [18435, 995].
//  - BERT: a line-by-line Python port of google-research/bert tokenization.py (Python's
//    unicodedata, not ICU) run on the same vocab.txt; every id checked in the file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "utf8_for_tests.h"

namespace {

using Ids = std::vector<std::int64_t>;
using Strings = std::vector<std::string>;

std::filesystem::path vocab_dir() {
  const char* dir = std::getenv("QKV_TEST_VOCAB_DIR");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "QKV_TEST_VOCAB_DIR is not set: run through ctest (fixture text_vocab)";
    return {};
  }
  return dir;
}

const qkv::WordPieceTokenizer& bert() {
  static const auto t =
      qkv::WordPieceTokenizer::from_vocab_txt(vocab_dir() / "bert-base-uncased/vocab.txt");
  return t;
}
const qkv::BpeTokenizer& gpt2() {
  static const auto t = qkv::BpeTokenizer::from_files(vocab_dir() / "gpt2/vocab.json",
                                                      vocab_dir() / "gpt2/merges.txt");
  return t;
}

struct Case {
  std::string text;
  Ids ids;
};

// Each case: (text, ids incl. [CLS]=101 and [SEP]=102).
const std::vector<Case> kBertCases = {
    {"Hello, world!", {101, 7592, 1010, 2088, 999, 102}},
    {"unaffable", {101, 14477, 20961, 3468, 102}},  // una ##ffa ##ble
    {"I'll've don't", {101, 1045, 1005, 2222, 1005, 2310, 2123, 1005, 1056, 102}},
    {"1234567 3.14", {101, 13138, 19961, 2575, 2581, 1017, 1012, 2403, 102}},
    {"Café naïve", {101, 7668, 15743, 102}},  // cafe naive
    {"我爱北京天安门",
     {101, 1855, 100, 1781, 1755, 1811, 1820, 100, 102}},  // 爱 and 门 are not in the vocabulary
    {"👍🏽", {101, 100, 102}},
    {"a   b\n\n c", {101, 1037, 1038, 1039, 102}},
    {std::string("tab\there\0\x07x\xEF\xBF\xBDy\xE2\x80\x8Bz", 19),
     {101, 21628, 2182, 18037, 2480, 102}},
    {"ÜBER straße İstanbul", {101, 19169, 2358, 27807, 9960, 102}},
    {"The quick brown fox jumps over the lazy dog.",
     {101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102}},
    {"Привет мир", {101, 1194, 16856, 10325, 25529, 15290, 22919, 1191, 10325, 16856, 102}},
    {"supercalifragilisticexpialidocious",
     {101, 3565, 9289, 10128, 29181, 24411, 4588, 10288, 19312, 21273, 10085, 6313, 102}},
    {std::string(101, 'a') + " b", {101, 100, 1038, 102}},  // a word over 100 characters is [UNK]
};

TEST(RealBert, VocabularyLayout) {
  const auto& t = bert();
  EXPECT_EQ(t.vocab_size(), 30522u);
  EXPECT_EQ(t.unk_id(), 100);
  EXPECT_EQ(t.cls_id(), 101);
  EXPECT_EQ(t.sep_id(), 102);
  EXPECT_EQ(t.mask_id(), 103);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.token_to_id("hello"), 7592);
  EXPECT_EQ(t.token_to_id("##ffa"), 20961);
}

TEST(RealBert, KnownEncodings) {
  for (const Case& c : kBertCases) {
    const qkv::Encoding e = bert().encode(c.text);
    EXPECT_EQ(e.ids, c.ids) << "text: " << c.text;
    EXPECT_EQ(e.token_type_ids, Ids(c.ids.size(), 0)) << "text: " << c.text;
  }
  EXPECT_EQ(bert().tokenize("unaffable"), (Strings{"una", "##ffa", "##ble"}));
  EXPECT_EQ(bert().tokenize("我爱北京"), (Strings{"我", "[UNK]", "北", "京"}));
}

TEST(RealBert, PairAndDecode) {
  const qkv::Encoding e = bert().encode_pair("Hello, world!", "The quick brown fox.");
  EXPECT_EQ(e.ids, (Ids{101, 7592, 1010, 2088, 999, 102, 1996, 4248, 2829, 4419, 1012, 102}));
  EXPECT_EQ(e.token_type_ids, (Ids{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(bert().decode(e.ids), "hello , world ! the quick brown fox .");
  EXPECT_EQ(bert().decode(bert().encode("supercalifragilisticexpialidocious unaffable").ids),
            "supercalifragilisticexpialidocious unaffable");
  EXPECT_EQ(bert().encode("Paris is the capital of [MASK].").ids,
            (Ids{101, 3000, 2003, 1996, 3007, 1997, 103, 1012, 102}));
}

TEST(RealBert, TokenizerJsonAgreesWithVocabTxt) {
  const auto j =
      qkv::WordPieceTokenizer::from_tokenizer_json(vocab_dir() / "bert-json/tokenizer.json");
  EXPECT_TRUE(j.lowercase());
  EXPECT_TRUE(j.strip_accents());
  for (const Case& c : kBertCases) EXPECT_EQ(j.encode(c.text).ids, c.ids) << "text: " << c.text;
  const qkv::Tokenizer loaded = qkv::Tokenizer::load(vocab_dir() / "bert-base-uncased");
  EXPECT_EQ(loaded.encode("Hello, world!"), (Ids{101, 7592, 1010, 2088, 999, 102}));
}

// GPT-2 ids as gpt-3-encoder 1.1.4 prints them.
const std::vector<Case> kGpt2Cases = {
    {"Hello world", {15496, 995}},
    {" Hello world", {18435, 995}},
    {"I'll've don't", {40, 1183, 1053, 836, 470}},
    {"1234567 3.14", {10163, 2231, 3134, 513, 13, 1415}},
    {"Café naïve", {34, 1878, 2634, 41492}},
    {"我爱北京天安门",
     {22755, 239, 163, 230, 109, 44293, 245, 12859, 105, 25465, 22522, 231, 29785, 101}},
    {"👍🏽", {41840, 235, 8582, 237, 121}},
    {"a   b\n\n c", {64, 220, 220, 275, 628, 269}},
    {"tab\there\r\nend", {8658, 197, 1456, 201, 198, 437}},
    {"Hello, world!", {15496, 11, 995, 0}},
    {"  leading and trailing  ", {220, 3756, 290, 25462, 220, 220}},
    {"HELLO'S 'Quoted' it's", {13909, 3069, 46, 6, 50, 705, 4507, 5191, 6, 340, 338}},
    {"x\xC2\xA0y\xE3\x80\x80z", {87, 1849, 88, 5099, 222, 89}},
    {"ünïcödé Ωμέγα Привет мир",
     {9116,  77,    26884, 66,    9101,  67,    2634,  7377,  102,   34703, 138,   255,  42063,
      17394, 12466, 253,   21169, 18849, 38857, 16843, 20375, 12466, 120,   18849, 21169}},
};

TEST(RealGpt2, VocabularyLayout) {
  EXPECT_EQ(gpt2().vocab_size(), 50257u);
  EXPECT_EQ(gpt2().eos_id(), 50256);
  EXPECT_EQ(gpt2().token_to_id("Ġworld"), 995);
}

TEST(RealGpt2, KnownEncodings) {
  for (const Case& c : kGpt2Cases) {
    EXPECT_EQ(gpt2().encode(c.text), c.ids) << "text: " << c.text;
    EXPECT_EQ(gpt2().decode(c.ids), c.text);
  }
  // Hugging Face keeps the added special token whole (gpt-3-encoder would spell it out).
  EXPECT_EQ(gpt2().encode("Hi<|endoftext|>"), (Ids{17250, 50256}));
}

TEST(RealGpt2, RoundTripIsByteExact) {
  const std::vector<std::string> texts = {
      "",
      " ",
      "\n",
      "\t\t\r\n",
      std::string("nul\0inside", 10),
      "\x7F\xC2\x85\xE2\x80\xA8",
      "Ḁ̵̟͉ḁ̷ z̸̢͎a̶͖l̴g̷o̵",
      "naïve café ÜBER",
      "日本語のテキスト、句読点。",
      "عربي עברית हिन्दी",
      "🏳️‍🌈👨‍👩‍👧‍👦 🇺🇸",
      "'s 't 're 've 'm 'll 'd '",
  };
  for (const std::string& s : texts) EXPECT_EQ(gpt2().decode(gpt2().encode(s)), s) << s;
  // A byte that is not UTF-8 on its own decodes exactly ("æ" is the symbol of byte 0xE6).
  EXPECT_EQ(gpt2().decode({gpt2().token_to_id("æ").value()}), "\xE6");

  std::mt19937 rng(20240607);
  std::uniform_int_distribution<char32_t> plane0(0x20, 0xD7FF), any(0x10000, 0x10FFFF);
  std::uniform_int_distribution<int> len(1, 30), pick(0, 9);
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    for (int i = len(rng); i > 0; --i) {
      const int k = pick(rng);
      const char32_t cp = k < 4   ? static_cast<char32_t>(" a1'.\n"[k])
                          : k < 8 ? plane0(rng)
                                  : any(rng);
      append_utf8_for_test(s, cp);
    }
    ASSERT_EQ(gpt2().decode(gpt2().encode(s)), s) << "trial " << trial;
  }
  EXPECT_THROW(gpt2().encode("caf\xE9"), qkv::Error);
}

TEST(RealGpt2, TokenizerJsonAgreesWithFiles) {
  const auto j = qkv::BpeTokenizer::from_tokenizer_json(vocab_dir() / "gpt2-json/tokenizer.json");
  for (const Case& c : kGpt2Cases) EXPECT_EQ(j.encode(c.text), c.ids) << "text: " << c.text;
  const qkv::Tokenizer loaded = qkv::Tokenizer::load(vocab_dir() / "gpt2");
  ASSERT_NE(loaded.bpe(), nullptr);
  EXPECT_EQ(loaded.encode("Hello world"), (Ids{15496, 995}));
}

}  // namespace
