// Tokenizers on small hand-made vocabularies (no files to fetch). The real BERT-uncased
// and GPT-2 vocabularies are exercised by test_real_vocabularies.cpp, the Universal
// Sentence Encoder's SentencePiece vocabulary by test_sentencepiece_pipeline.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "temp_dir.h"
#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "utf8_for_tests.h"

namespace {

using qkv::BpeTokenizer;
using qkv::SentencePieceTokenizer;
using qkv::WordPieceTokenizer;
using Ids = std::vector<std::int64_t>;
using Strings = std::vector<std::string>;

using qkv::testing::TempDir;

// Expects `f` to throw qkv::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, const Strings& parts) {
  try {
    f();
    ADD_FAILURE() << "no qkv::Error thrown; expected one mentioning '" << parts.front() << "'";
  } catch (const qkv::Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << part;
  }
}

const Strings kWordPieceVocab = {
    "[PAD]", "[UNK]", "[CLS]",  "[SEP]", "[MASK]",                         // 0-4
    "un",    "##aff", "##able", "##a",   "##ff",   "hello", "world",       // 5-11
    ",",     "!",     "我",     "爱",    "cafe",   "naive", "a",     "b",  // 12-19
    "c",     "##b",   "Café",   "?",     "¿",      "—",     "$",     "^",  // 20-27
    "`",     "x",     "##y",    "##z",   "abc",    "##d",   "ab",    "'",  // 28-35
    "t",     "don",                                                        // 36-37
};

WordPieceTokenizer small_wordpiece(bool lowercase = true) {
  return WordPieceTokenizer::from_vocab(kWordPieceVocab, lowercase);
}

TEST(WordPiece, GreedyLongestMatchFirst) {
  const auto t = small_wordpiece();
  EXPECT_EQ(t.tokenize("unaffable"), (Strings{"un", "##aff", "##able"}));
  // "abcd": the longest prefix "abc" wins over "ab", then "##d".
  EXPECT_EQ(t.tokenize("abcd"), (Strings{"abc", "##d"}));
  // No piece for the rest of the word: the whole word is [UNK], not a prefix of pieces.
  EXPECT_EQ(t.tokenize("unaffq hello"), (Strings{"[UNK]", "hello"}));
  EXPECT_EQ(t.tokenize(""), Strings{});
  EXPECT_EQ(t.tokenize(" \t\n "), Strings{});
}

TEST(WordPiece, WordsOverOneHundredCodePointsAreUnknown) {
  const auto t = small_wordpiece();
  // 100 code points is allowed: "a" + 99 × "##a"; 101 is [UNK] (BERT's max_input_chars_per_word).
  const std::string a100(100, 'a');
  EXPECT_EQ(t.tokenize(a100).size(), 100u);
  EXPECT_EQ(t.tokenize(a100 + "a"), Strings{"[UNK]"});
  // Counted in code points, not bytes: 60 × "我" is 180 bytes but splits per character.
  std::string han;
  for (int i = 0; i < 60; ++i) han += "我";
  EXPECT_EQ(t.tokenize(han).size(), 60u);
}

TEST(WordPiece, LowercaseStripsAccentsAndSplitsPunctuation) {
  const auto t = small_wordpiece();
  EXPECT_EQ(t.tokenize("Hello, WORLD!"), (Strings{"hello", ",", "world", "!"}));
  EXPECT_EQ(t.tokenize("Café NAÏVE"), (Strings{"cafe", "naive"}));
  // Decomposed input (e + U+0301) strips the same way.
  EXPECT_EQ(t.tokenize("cafe\xCC\x81"), Strings{"cafe"});
  // Unicode P* (¿ Po, — Pd) and BERT's ASCII symbols that are not P* ($ Sc, ^ Sk, ` Sk).
  EXPECT_EQ(t.tokenize("¿a—b$c^a`b?"),
            (Strings{"¿", "a", "—", "b", "$", "c", "^", "a", "`", "b", "?"}));
  EXPECT_EQ(t.tokenize("don't"), (Strings{"don", "'", "t"}));
}

TEST(WordPiece, CasedKeepsCaseAndAccents) {
  const auto t = small_wordpiece(/*lowercase=*/false);
  EXPECT_FALSE(t.lowercase());
  EXPECT_FALSE(t.strip_accents());
  EXPECT_EQ(t.tokenize("Café cafe Hello"), (Strings{"Café", "cafe", "[UNK]"}));
}

TEST(WordPiece, ChineseIdeographsAreSeparateWords) {
  const auto t = small_wordpiece();
  EXPECT_EQ(t.tokenize("我爱我"), (Strings{"我", "爱", "我"}));
  // Without the CJK split "a我b" would be one word with no match.
  EXPECT_EQ(t.tokenize("a我b"), (Strings{"a", "我", "b"}));
  // Hiragana is not in BERT's CJK blocks: stays in the word (and is unknown here).
  EXPECT_EQ(t.tokenize("aひb"), Strings{"[UNK]"});
}

TEST(WordPiece, CleansControlCharactersAndWhitespace) {
  const auto t = small_wordpiece();
  // NUL, U+FFFD, BEL (Cc) and ZERO WIDTH SPACE (Cf) vanish; \t \n \r and NBSP (Zs) separate.
  EXPECT_EQ(t.tokenize(std::string("x\0y", 3) + "\xEF\xBF\xBDz\x07"
                                                "b"),
            (Strings{"x", "##y", "##z", "##b"}));
  EXPECT_EQ(t.tokenize("x\xE2\x80\x8By"), (Strings{"x", "##y"}));
  EXPECT_EQ(t.tokenize("a\tb\nc\rа"), (Strings{"a", "b", "c", "[UNK]"}));  // last is Cyrillic а
  EXPECT_EQ(t.tokenize("a\xC2\xA0"
                       "b\xE3\x80\x80"
                       "c"),
            (Strings{"a", "b", "c"}));
  // U+2028 LINE SEPARATOR is not BERT whitespace but Python's str.split() splits on it.
  EXPECT_EQ(t.tokenize("a\xE2\x80\xA8"
                       "b"),
            (Strings{"a", "b"}));
}

TEST(WordPiece, EncodeAndEncodePair) {
  const auto t = small_wordpiece();
  const qkv::Encoding e = t.encode("Hello world!");
  EXPECT_EQ(e.ids, (Ids{2, 10, 11, 13, 3}));
  EXPECT_EQ(e.token_type_ids, (Ids{0, 0, 0, 0, 0}));
  EXPECT_EQ(e.tokens, (Strings{"[CLS]", "hello", "world", "!", "[SEP]"}));
  const qkv::Encoding p = t.encode_pair("hello", "world !");
  EXPECT_EQ(p.ids, (Ids{2, 10, 3, 11, 13, 3}));
  EXPECT_EQ(p.token_type_ids, (Ids{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(p.tokens.size(), p.ids.size());
  const qkv::Encoding empty = t.encode("");
  EXPECT_EQ(empty.ids, (Ids{2, 3}));
}

TEST(WordPiece, SpecialTokensInTextStayWhole) {
  const auto t = small_wordpiece();
  EXPECT_EQ(t.encode("hello [MASK] world").ids, (Ids{2, 10, 4, 11, 3}));
  EXPECT_EQ(t.encode("hello[SEP]world").ids, (Ids{2, 10, 3, 11, 3}));
  // Only the exact spelling: lowercase "[mask]" is punctuation and an unknown word.
  EXPECT_EQ(t.tokenize("[mask]"), (Strings{"[UNK]", "[UNK]", "[UNK]"}));
}

TEST(WordPiece, DecodeMergesContinuations) {
  const auto t = small_wordpiece();
  const Ids ids = t.encode("unaffable hello, world").ids;
  EXPECT_EQ(t.decode(ids), "unaffable hello , world");
  EXPECT_EQ(t.decode(ids, /*skip_special=*/false), "[CLS] unaffable hello , world [SEP]");
  EXPECT_EQ(t.decode({}), "");
  expect_error([&] { t.decode({99}); }, {"id 99", "out of range"});
}

TEST(WordPiece, LookupsAndIds) {
  const auto t = small_wordpiece();
  EXPECT_EQ(t.vocab_size(), kWordPieceVocab.size());
  EXPECT_EQ(t.unk_id(), 1);
  EXPECT_EQ(t.cls_id(), 2);
  EXPECT_EQ(t.sep_id(), 3);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.mask_id(), 4);
  EXPECT_EQ(t.token_to_id("##able"), 7);
  EXPECT_EQ(t.token_to_id("nope"), std::nullopt);
  EXPECT_EQ(t.id_to_token(10), "hello");
  EXPECT_TRUE(t.is_special(2));
  EXPECT_FALSE(t.is_special(10));
}

TEST(WordPiece, Errors) {
  expect_error([] { WordPieceTokenizer::from_vocab({"[CLS]", "[SEP]", "a"}, true); }, {"[UNK]"});
  expect_error([] { WordPieceTokenizer::from_vocab({"[UNK]", "[SEP]", "a"}, true); }, {"[CLS]"});
  expect_error([] { WordPieceTokenizer::from_vocab_txt("/nonexistent/vocab.txt"); },
               {"/nonexistent/vocab.txt"});
  const auto t = small_wordpiece();
  expect_error([&] { t.encode("abc\xFF"); }, {"not valid UTF-8", "byte offset 3"});
  expect_error([&] { t.encode_pair("ok", "\xC0\x80"); }, {"not valid UTF-8", "byte offset 0"});
}

TEST(WordPiece, FromFiles) {
  TempDir dir;
  std::string text;
  for (const std::string& token : kWordPieceVocab) text += token + "\r\n";  // CRLF tolerated
  const auto t = WordPieceTokenizer::from_vocab_txt(dir.write("vocab.txt", text));
  EXPECT_EQ(t.vocab_size(), kWordPieceVocab.size());
  EXPECT_EQ(t.tokenize("UNAFFABLE"), (Strings{"un", "##aff", "##able"}));
  expect_error([&] { WordPieceTokenizer::from_vocab_txt(dir.write("bad.txt", "a\nb\n")); },
               {"[UNK]", "bad.txt"});

  const auto json = dir.write("tokenizer.json", R"({
    "normalizer": {"type": "BertNormalizer", "lowercase": false, "strip_accents": null},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 5,
              "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "Ab": 3, "##c": 4, "ab": 5}}})");
  const auto j = WordPieceTokenizer::from_tokenizer_json(json);
  EXPECT_FALSE(j.lowercase());
  EXPECT_EQ(j.encode("Abc ab abcccc").ids, (Ids{1, 3, 4, 5, 0, 2}));  // "abcccc": 6 chars > 5
  expect_error(
      [&] { WordPieceTokenizer::from_tokenizer_json(dir.write("broken.json", "{\"model\": ")); },
      {"malformed JSON", "broken.json"});
  expect_error(
      [&] {
        WordPieceTokenizer::from_tokenizer_json(
            dir.write("bpe.json", R"({"model": {"type": "BPE", "vocab": {}}})"));
      },
      {"WordPiece", "bpe.json"});
}

// ---------------------------------------------------------------------------------------
// Byte-level BPE on a vocabulary of the 256 byte symbols plus a few merges.

std::string byte_symbol(unsigned b) {  // GPT-2's bytes_to_unicode, written out again
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    unsigned n = 0;
    for (unsigned c = 0; c < 256; ++c) {
      const bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174);
      const unsigned cp = printable ? c : 256 + n++;
      std::string s;
      if (cp < 0x80)
        s += static_cast<char>(cp);
      else
        s += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      t[c] = s;
    }
    return t;
  }();
  return table[b];
}

struct SmallBpe {
  std::map<std::string, std::int64_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"},   {"l", "l"}, {"he", "ll"},   {"hell", "o"}, {"Ġ", "w"}, {"o", "r"},
      {"Ġw", "or"}, {"l", "d"}, {"Ġwor", "ld"}, {"Ġ", "Ġ"},    {"ä", "¸"}};
  SmallBpe() {
    for (unsigned b = 0; b < 256; ++b) vocab[byte_symbol(b)] = b;
    std::int64_t id = 256;
    for (const auto& [a, b] : merges) vocab.emplace(a + b, id++);
    vocab["<|endoftext|>"] = id;
  }
  BpeTokenizer make() const { return BpeTokenizer::from_vocab_and_merges(vocab, merges); }
};

TEST(Bpe, BytesToUnicodeTable) {
  const BpeTokenizer t = SmallBpe().make();
  // Space is byte 32, the 33rd non-printable byte → U+0120 "Ġ"; newline → U+010A "Ċ".
  EXPECT_EQ(byte_symbol(' '), "Ġ");
  EXPECT_EQ(byte_symbol('\n'), "Ċ");
  EXPECT_EQ(byte_symbol(0), "Ā");
  EXPECT_EQ(byte_symbol(0xAD), "Ń");  // soft hyphen, the last of the 68 remapped bytes
  EXPECT_EQ(t.encode(" "), Ids{32});
  EXPECT_EQ(t.encode("\n"), Ids{10});
  for (unsigned b = 0; b < 128; ++b) {  // every ASCII byte alone is its own symbol
    EXPECT_EQ(t.encode(std::string(1, static_cast<char>(b))), Ids{b}) << b;
  }
}

TEST(Bpe, MergesByRank) {
  SmallBpe s;
  const BpeTokenizer t = s.make();
  EXPECT_EQ(t.encode("hello world"), (Ids{s.vocab.at("hello"), s.vocab.at("Ġworld")}));
  EXPECT_EQ(t.encode("hell"), Ids{s.vocab.at("hell")});
  // "he" merges before "ll" (rank 0 < 1); "hel" + "lo" never forms.
  EXPECT_EQ(t.encode("helo"), (Ids{s.vocab.at("he"), 'l', 'o'}));
  // Merges act on byte symbols: 丸 (U+4E38) is E4 B8 B8, whose symbols are "ä" "¸" "¸".
  EXPECT_EQ(t.encode("丸"), (Ids{s.vocab.at("ä¸"), 0xB8}));
  EXPECT_EQ(t.decode(t.encode("丸")), "丸");
  // Overlapping occurrences of one pair merge leftmost first: "   " -> "ĠĠ" "Ġ".
  EXPECT_EQ(t.encode("   "), (Ids{s.vocab.at("ĠĠ"), ' '}));
  EXPECT_EQ(t.encode("    "), (Ids{s.vocab.at("ĠĠ"), s.vocab.at("ĠĠ")}));
}

TEST(Bpe, LongPieceIsNotQuadratic) {
  SmallBpe s;
  const BpeTokenizer t = s.make();
  std::string text;
  for (int i = 0; i < 40000; ++i) text += "hello";  // one 200 kB pre-token
  const Ids ids = t.encode(text);
  ASSERT_EQ(ids.size(), 40000u);
  for (std::int64_t id : ids) ASSERT_EQ(id, s.vocab.at("hello"));
}

TEST(Bpe, PreTokenizationFollowsGpt2Pattern) {
  const BpeTokenizer t = SmallBpe().make();
  EXPECT_EQ(t.pre_tokenize("I'll've don't"), (Strings{"I", "'ll", "'ve", " don", "'t"}));
  EXPECT_EQ(t.pre_tokenize("HELLO'S it's"),
            (Strings{"HELLO", "'", "S", " it", "'s"}));  // case-sensitive
  EXPECT_EQ(t.pre_tokenize("1234567 3.14"), (Strings{"1234567", " 3", ".", "14"}));
  EXPECT_EQ(t.pre_tokenize("Hello, world!"), (Strings{"Hello", ",", " world", "!"}));
  // \s+(?!\S): a run before a word gives its last space to the word; at the end it does not.
  EXPECT_EQ(t.pre_tokenize("a   b\n\n c"), (Strings{"a", "  ", " b", "\n\n", " c"}));
  EXPECT_EQ(t.pre_tokenize("  lead trail  "), (Strings{" ", " lead", " trail", "  "}));
  EXPECT_EQ(t.pre_tokenize("a\n b"), (Strings{"a", "\n", " b"}));
  EXPECT_EQ(t.pre_tokenize("a \nb"), (Strings{"a", " ", "\n", "b"}));  // only U+0020 leads a word
  // Only U+0020 may lead a word: NBSP is \s but stands alone before "y".
  EXPECT_EQ(t.pre_tokenize("x\xC2\xA0y"), (Strings{"x", "\xC2\xA0", "y"}));
  EXPECT_EQ(t.pre_tokenize(" ?!x"), (Strings{" ?!", "x"}));
  EXPECT_EQ(t.pre_tokenize("Café naïve 我爱"), (Strings{"Café", " naïve", " 我爱"}));
  EXPECT_EQ(t.pre_tokenize("👍🏽!"), (Strings{"👍🏽!"}));  // So + Sk: one "other" run
  EXPECT_EQ(t.pre_tokenize("'"), (Strings{"'"}));
  EXPECT_EQ(t.pre_tokenize(""), Strings{});
}

TEST(Bpe, EndOfTextToken) {
  SmallBpe s;
  const BpeTokenizer t = s.make();
  ASSERT_TRUE(t.eos_id().has_value());
  EXPECT_EQ(*t.eos_id(), s.vocab.at("<|endoftext|>"));
  EXPECT_EQ(t.encode("hello<|endoftext|>"), (Ids{s.vocab.at("hello"), *t.eos_id()}));
  EXPECT_EQ(t.decode({*t.eos_id()}), "<|endoftext|>");
  std::map<std::string, std::int64_t> no_eos;
  for (unsigned b = 0; b < 256; ++b) no_eos[byte_symbol(b)] = b;
  EXPECT_FALSE(BpeTokenizer::from_vocab_and_merges(no_eos, {}).eos_id().has_value());
}

TEST(Bpe, DecodeGivesExactBytes) {
  const BpeTokenizer t = SmallBpe().make();
  // A partial UTF-8 sequence decodes to its raw bytes.
  EXPECT_EQ(t.decode({0xE4, 0xB8}), std::string("\xE4\xB8"));
  EXPECT_EQ(t.decode({0xFF}), std::string("\xFF"));
  EXPECT_EQ(t.decode({0}), std::string(1, '\0'));
  expect_error([&] { t.decode({100000}); }, {"id 100000"});
  expect_error([&] { t.decode({-1}); }, {"id -1"});
}

// Random valid UTF-8 over all planes (seeded): decode(encode(s)) == s byte for byte.
TEST(Bpe, RoundTripRandomUtf8) {
  const BpeTokenizer t = SmallBpe().make();
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> kind(0, 5), len(0, 40);
  for (int trial = 0; trial < 500; ++trial) {
    std::string s;
    const int n = len(rng);
    for (int i = 0; i < n; ++i) {
      char32_t cp = 0;
      switch (kind(rng)) {
        case 0:
          cp = std::uniform_int_distribution<char32_t>(0, 0x7F)(rng);
          break;
        case 1:
          cp = U" \t\n\r'"[std::uniform_int_distribution<int>(0, 4)(rng)];
          break;
        case 2:
          cp = std::uniform_int_distribution<char32_t>(0x80, 0x7FF)(rng);
          break;
        case 3:
          cp = std::uniform_int_distribution<char32_t>(0x800, 0xD7FF)(rng);
          break;
        case 4:
          cp = std::uniform_int_distribution<char32_t>(0xE000, 0xFFFF)(rng);
          break;
        default:
          cp = std::uniform_int_distribution<char32_t>(0x10000, 0x10FFFF)(rng);
          break;
      }
      append_utf8_for_test(s, cp);
    }
    std::string joined;
    for (const std::string& piece : t.pre_tokenize(s)) joined += piece;
    ASSERT_EQ(joined, s) << "pre-tokens must cover the text, trial " << trial;
    ASSERT_EQ(t.decode(t.encode(s)), s) << "trial " << trial;
  }
}

TEST(Bpe, InvalidUtf8IsAnError) {
  const BpeTokenizer t = SmallBpe().make();
  expect_error([&] { t.encode("abc\xFF"); },
               {"BpeTokenizer::encode", "not valid UTF-8", "byte offset 3"});
  expect_error([&] { t.encode("\xC0\x80"); }, {"byte offset 0"});          // overlong NUL
  expect_error([&] { t.encode("ok \xED\xA0\x80"); }, {"byte offset 3"});   // surrogate
  expect_error([&] { t.encode("\xE2\x82"); }, {"byte offset 0"});          // truncated
  expect_error([&] { t.encode("\xF4\x90\x80\x80"); }, {"byte offset 0"});  // > U+10FFFF
  expect_error([&] { t.encode("a\x80"); }, {"byte offset 1"});             // lone continuation
}

TEST(Bpe, LoadErrors) {
  SmallBpe s;
  auto merges = s.merges;
  merges.emplace_back("w", "x");  // "wx" is not in the vocabulary
  expect_error([&] { BpeTokenizer::from_vocab_and_merges(s.vocab, merges); },
               {"\"wx\"", "not in the vocabulary"});
  merges.back() = {"nope", "x"};
  expect_error([&] { BpeTokenizer::from_vocab_and_merges(s.vocab, merges); }, {"\"nope\""});
  std::map<std::string, std::int64_t> missing_byte = {{"a", 0}};
  const BpeTokenizer t = BpeTokenizer::from_vocab_and_merges(missing_byte, {});
  EXPECT_EQ(t.encode("aa"), (Ids{0, 0}));
  expect_error([&] { t.encode("b"); }, {"byte 0x62", "not in the vocabulary"});
  expect_error(
      [] { BpeTokenizer::from_files("/nonexistent/vocab.json", "/nonexistent/merges.txt"); },
      {"/nonexistent/vocab.json"});
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

TEST(Bpe, FromFilesAndTokenizerJson) {
  SmallBpe s;
  TempDir dir;
  std::string vocab_json = "{", merges_txt = "#version: 0.2\n", merges_json = "[", pairs_json = "[";
  for (const auto& [token, id] : s.vocab)
    vocab_json += "\"" + json_escape(token) + "\": " + std::to_string(id) + ",";
  vocab_json.back() = '}';
  for (const auto& [a, b] : s.merges) {
    merges_txt += a + " " + b + "\n";
    merges_json += "\"" + json_escape(a) + " " + json_escape(b) + "\",";
    pairs_json += "[\"" + json_escape(a) + "\", \"" + json_escape(b) + "\"],";
  }
  merges_json.back() = ']';
  pairs_json.back() = ']';
  const Ids expected = s.make().encode("hello world hello");
  const auto files = BpeTokenizer::from_files(dir.write("vocab.json", vocab_json),
                                              dir.write("merges.txt", merges_txt));
  EXPECT_EQ(files.encode("hello world hello"), expected);
  for (const std::string& m : {merges_json, pairs_json}) {
    const auto j = BpeTokenizer::from_tokenizer_json(dir.write(
        "tokenizer.json", R"({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
                              "model": {"type": "BPE", "vocab": )" +
                              vocab_json + ", \"merges\": " + m + "}}"));
    EXPECT_EQ(j.encode("hello world hello"), expected);
  }
  expect_error(
      [&] { BpeTokenizer::from_files(dir.write("v.json", "[1, 2"), dir.path / "merges.txt"); },
      {"malformed JSON", "v.json"});
  expect_error(
      [&] {
        BpeTokenizer::from_files(dir.path / "vocab.json", dir.write("m.txt", "#version\nh e x\n"));
      },
      {"line 2", "m.txt"});
  expect_error(
      [&] {
        BpeTokenizer::from_tokenizer_json(
            dir.write("wp.json", R"({"model": {"type": "WordPiece", "vocab": {}}})"));
      },
      {"BPE", "wp.json"});
}

// Ids are checked against the number of tokens before anything is sized from them: an id
// of 10^9 once took gigabytes (or std::bad_alloc).
TEST(Bpe, VocabularyIdsMustBeDense) {
  SmallBpe s;
  const auto n = static_cast<std::int64_t>(s.vocab.size());
  for (const std::int64_t id : {std::int64_t{1'000'000'000}, n, std::int64_t{-1}}) {
    auto vocab = s.vocab;
    vocab["<|endoftext|>"] = id;
    expect_error([&] { BpeTokenizer::from_vocab_and_merges(vocab, s.merges); },
                 {"the id of \"<|endoftext|>\" is " + std::to_string(id),
                  "must have the ids 0.." + std::to_string(n - 1) + ", each once"});
  }
  auto shared = s.vocab;
  shared["<|endoftext|>"] = 0;
  expect_error([&] { BpeTokenizer::from_vocab_and_merges(shared, s.merges); }, {"share the id 0"});

  TempDir dir;
  const auto merges = dir.write("merges.txt", "#version: 0.2\n");
  expect_error(
      [&] {
        BpeTokenizer::from_files(dir.write("vocab.json", R"({"a": 0, "b": 100000000})"), merges);
      },
      {"the id of \"b\" is 100000000", "ids 0..1", "vocab.json"});
  expect_error(
      [&] {
        BpeTokenizer::from_files(dir.write("vocab.json", R"({"a": 0, "b": 18446744073709551615})"),
                                 merges);
      },
      {"\"b\" has the id 18446744073709551615", "vocab.json"});
  expect_error(
      [&] { BpeTokenizer::from_files(dir.write("vocab.json", R"({"a": 0, "b": 1.5})"), merges); },
      {"\"b\" must have an integer id", "vocab.json"});
}

// merges.txt: lines are counted as lines, must be UTF-8, and are quoted briefly in errors.
TEST(Bpe, MergesFileErrors) {
  SmallBpe s;
  TempDir dir;
  std::string vocab_json = "{";
  for (const auto& [token, id] : s.vocab)
    vocab_json += "\"" + json_escape(token) + "\": " + std::to_string(id) + ",";
  vocab_json.back() = '}';
  const auto vocab = dir.write("vocab.json", vocab_json);
  expect_error([&] { BpeTokenizer::from_files(vocab, dir.write("m.txt", "h e\né l\n\xff\xfe\n")); },
               {"line 3 \"\\xff\\xfe\" is not valid UTF-8", "m.txt"});
  expect_error(
      [&] { BpeTokenizer::from_files(vocab, dir.write("m.txt", "h e\n" + std::string(500, 'q'))); },
      {"line 2 must be two tokens", "\"qqqq", "... (500 bytes)", "m.txt"});
  expect_error([&] { BpeTokenizer::from_files(vocab, dir.write("m.txt", std::string(200000, 'q'))); },
               {"line 1 is 200000 bytes long", "m.txt"});
}

// vocab.txt: every line UTF-8, no line longer than any token, each token once.
TEST(WordPiece, VocabularyFileErrors) {
  TempDir dir;
  std::string text;
  for (const std::string& token : kWordPieceVocab) text += token + "\n";
  expect_error([&] { WordPieceTokenizer::from_vocab_txt(dir.write("v.txt", text + "hello\n")); },
               {"the token \"hello\" appears twice, with the ids 10 and 38 (lines 11 and 39",
                "v.txt"});
  expect_error([&] { WordPieceTokenizer::from_vocab_txt(dir.write("v.txt", text + "ok\n\xc3(\n")); },
               {"line 40 \"\\xc3(\" is not valid UTF-8", "v.txt"});
  expect_error(
      [&] { WordPieceTokenizer::from_vocab_txt(dir.write("v.txt", text + std::string(70000, 'a'))); },
      {"line 39 is 70000 bytes long", "v.txt"});
  expect_error([&] { WordPieceTokenizer::from_vocab({"[UNK]", "[CLS]", "[SEP]", "[UNK]"}); },
               {"\"[UNK]\" appears twice"});
  // A directory or a device in place of the file: refused, not read.
  std::filesystem::create_directories(dir.path / "vocab_dir");
  expect_error([&] { WordPieceTokenizer::from_vocab_txt(dir.path / "vocab_dir"); },
               {"vocab_dir", "not a regular file (a directory)"});
  expect_error([] { WordPieceTokenizer::from_vocab_txt("/dev/zero"); },
               {"/dev/zero", "not a regular file (a character device)"});
}

// A long word is matched against pieces no longer than the longest token, whatever
// max_input_chars_per_word says: the same pieces, found without trying every end.
TEST(WordPiece, LongWordsAreMatchedPieceByPiece) {
  TempDir dir;
  const auto json = dir.write("tokenizer.json", R"({
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 1000000000,
              "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "ab": 3, "##ab": 4, "##a": 5}}})");
  const auto t = WordPieceTokenizer::from_tokenizer_json(json);
  std::string word;
  for (int i = 0; i < 20000; ++i) word += "ab";
  const std::vector<std::int64_t> ids = t.encode(word + "a").ids;
  ASSERT_EQ(ids.size(), 20003u);  // [CLS] ab ##ab × 19999 ##a [SEP]
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 4);
  EXPECT_EQ(ids[20000], 4);
  EXPECT_EQ(ids[20001], 5);
  EXPECT_EQ(t.encode(word + "c").ids, (Ids{1, 0, 2}));  // no piece for "c": the word is [UNK]
}

TEST(Tokenizer, LoadPicksTheFormat) {
  TempDir wp, bpe, json, empty;
  std::string text;
  for (const std::string& token : kWordPieceVocab) text += token + "\n";
  wp.write("vocab.txt", text);
  const qkv::Tokenizer w = qkv::Tokenizer::load(wp.path);
  ASSERT_NE(w.wordpiece(), nullptr);
  EXPECT_EQ(w.bpe(), nullptr);
  EXPECT_EQ(w.encode("Hello"), (Ids{2, 10, 3}));
  EXPECT_EQ(w.decode({2, 10, 3}), "hello");
  EXPECT_EQ(w.vocab_size(), kWordPieceVocab.size());

  SmallBpe s;
  std::string vocab_json = "{";
  for (const auto& [token, id] : s.vocab)
    vocab_json += "\"" + json_escape(token) + "\": " + std::to_string(id) + ",";
  vocab_json.back() = '}';
  std::string merges_txt;
  for (const auto& [a, b] : s.merges) merges_txt += a + " " + b + "\n";
  bpe.write("vocab.json", vocab_json);
  bpe.write("merges.txt", merges_txt);
  const qkv::Tokenizer b = qkv::Tokenizer::load(bpe.path);
  ASSERT_NE(b.bpe(), nullptr);
  EXPECT_EQ(b.encode("hello"), Ids{s.vocab.at("hello")});
  EXPECT_EQ(b.decode(b.encode("hello world")), "hello world");

  json.write(
      "tokenizer.json",
      R"({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "x": 3}}})");
  json.write("vocab.txt", "ignored\n");  // tokenizer.json wins
  EXPECT_EQ(qkv::Tokenizer::load(json.path).encode("x"), (Ids{1, 3, 2}));

  expect_error([&] { qkv::Tokenizer::load(empty.path); }, {"tokenizer.json", "vocab.txt"});
  expect_error([] { qkv::Tokenizer::load("/nonexistent/dir"); },
               {"/nonexistent/dir", "not a directory"});
  // A vocabulary file that is a device is named, not skipped as if absent.
  std::filesystem::create_symlink("/dev/zero", empty.path / "vocab.txt");
  expect_error([&] { qkv::Tokenizer::load(empty.path); },
               {"vocab.txt", "not a regular file (a character device)"});
}

// ---------------------------------------------------------------------------------------
// SentencePiece unigram with the rules of the Universal Sentence Encoder lite's pipeline
// (qkv/tokenizer.h). Each expected id list is what the pipeline's JavaScript
// (@energetic-ai/embeddings 0.2.0, Tokenizer.encode) returns for this vocabulary; the
// comments work them out. Scores are multiples of 1/4, so every sum is exact and the ties
// are real ties.

struct Piece {
  std::u32string piece;
  double score;
};
// Ids 0-5 are reserved as in the USE vocabulary (0 the unknown piece U+FFFD); "zz" and "q"
// are reserved pieces that look like text. "y" appears twice.
const std::vector<Piece> kUnigramVocab = {
    {U"\uFFFD", 0}, {U"<s>", 0},     {U"</s>", 0},      {U"<pad>", 0}, {U"zz", 0},     // 0-4
    {U"q", 0},      {U"▁", -2},      {U"a", -1},        {U"b", -1},    {U"▁a", -3},    // 5-9
    {U"ab", -2},    {U"▁:", 0},      {U":", 0},         {U")", -1},    {U"cd", -1},    // 10-14
    {U"de", -1},    {U"e", -1},      {U"\u00E9", -1.5}, {U"fi", -0.5}, {U"1", -1},     // 15-19
    {U"kg", -2},    {U"y", -8},      {U"y", -0.5},      {U"😀", -1},    {U"▁▁", -2.5},  // 20-24
    {U"f", -1},     {U"u", -1},      {U"l", -1.25},     {U"s", -1},    {U"<", -1},     // 25-29
    {U">", -1},     {U"zzz", -0.25}, {U"z", -1},        {U"k", -3},    {U"g", -3},     // 30-34
    {U"ay", -2},    {U"i", -1},                                                        // 35-36
};
const Ids kUnigramReserved = {1, 2, 3, 4, 5};  // and the unknown piece, 0

std::string utf8_for_test(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) append_utf8_for_test(out, c);
  return out;
}

SentencePieceTokenizer small_sentencepiece() {
  Strings pieces;
  std::vector<double> scores;
  for (const Piece& p : kUnigramVocab) {
    pieces.push_back(utf8_for_test(p.piece));
    scores.push_back(p.score);
  }
  return SentencePieceTokenizer::from_pieces(pieces, scores, 0, kUnigramReserved);
}

TEST(SentencePiece, LaterCandidateWinsATie) {
  const auto t = small_sentencepiece();
  // "ab" is ▁ a b. best[2]: "▁a" -3, then ▁ + a = -2 - 1 = -3, equal: the later start wins.
  // best[3]: ▁ + "ab" = -4, then ▁ a + b = -4: the later again.
  EXPECT_EQ(t.encode("ab"), (Ids{6, 7, 8}));
  // "  a" is ▁ ▁ ▁ a. best[2] = "▁▁" -2.5 (▁ + ▁ is -4); best[3]: "▁▁" after ▁ is -4.5,
  // ▁ after "▁▁" is -4.5: the later, so "▁▁" comes first.
  EXPECT_EQ(t.encode("  a"), (Ids{24, 6, 7}));
}

TEST(SentencePiece, BestOfZeroCountsAsUnset) {
  const auto t = small_sentencepiece();
  // ":" is ▁ :. "▁:" (score 0) leaves best[2] = 0, so the next candidate, ▁ + ":" = -2,
  // replaces it although it is worse. The USE vocabulary's ":" pieces score 0 as well.
  EXPECT_EQ(t.encode(":"), (Ids{6, 12}));
  EXPECT_EQ(t.encode(":)"), (Ids{6, 12, 13}));
}

TEST(SentencePiece, UnknownOnlyWhereNoPieceMatches) {
  const auto t = small_sentencepiece();
  // "cd" is ▁ c d. At c only "cd" matches (there is no "c"), so no candidate ends after c:
  // best[2] stays 0 and words[2] the unknown id. d matches nothing: its unknown candidate
  // scores 0 + best[2] = 0 and beats ▁ + "cd" (-3). Back: unknown, the unreached position
  // (unknown), ▁; the two unknowns merge.
  EXPECT_EQ(t.encode("cd"), (Ids{6, 0}));
  // "cde": "de" scores -1 + best[2] = -1 and beats ▁ cd e (-4); back from "de" the
  // unreached position gives an unknown although ▁ cd e covers the text.
  EXPECT_EQ(t.encode("cde"), (Ids{6, 0, 15}));
}

TEST(SentencePiece, UnknownRunsMerge) {
  const auto t = small_sentencepiece();
  EXPECT_EQ(t.encode("ç"), (Ids{6, 0}));
  EXPECT_EQ(t.encode("ççç"), (Ids{6, 0}));        // one unknown for the run
  EXPECT_EQ(t.encode("çaç"), (Ids{6, 0, 7, 0}));  // runs apart stay apart
  EXPECT_EQ(t.encode(std::string("ab\0b", 4)), (Ids{6, 7, 8, 0, 8}));
  EXPECT_EQ(t.tokenize("çaç"), (Strings{"▁", "\xEF\xBF\xBD", "a", "\xEF\xBF\xBD"}));
  // The unknown piece's own text is unknown too: id 0 is reserved.
  EXPECT_EQ(t.encode("\xEF\xBF\xBD"), (Ids{6, 0}));
}

TEST(SentencePiece, BacktrackStepsByUtf16Length) {
  const auto t = small_sentencepiece();
  // 😀 (U+1F600) is one symbol but two UTF-16 code units: stepping back from it skips the
  // symbol before it as well, as the pipeline's JavaScript does. ▁ a 😀 loses the a;
  // ▁ 😀 loses the ▁.
  EXPECT_EQ(t.encode("a😀"), (Ids{6, 23}));
  EXPECT_EQ(t.encode("😀"), (Ids{23}));
}

TEST(SentencePiece, TextIsNfkcNormalized) {
  const auto t = small_sentencepiece();
  EXPECT_EQ(t.encode("full"), (Ids{6, 25, 26, 27, 27}));
  EXPECT_EQ(t.encode("ｆｕｌｌ"), (Ids{6, 25, 26, 27, 27}));  // full-width U+FF46 ...
  EXPECT_EQ(t.encode("\xEF\xAC\x81"), (Ids{6, 18}));          // U+FB01 ligature -> "fi"
  EXPECT_EQ(t.encode("①"), (Ids{6, 19}));                     // U+2460 -> "1"
  EXPECT_EQ(t.encode("㎏"), (Ids{6, 20}));                    // U+338F -> "kg"
  EXPECT_EQ(t.encode("\xC3\xA9"), (Ids{6, 17}));              // é, U+00E9
  EXPECT_EQ(t.encode("e\xCC\x81"), (Ids{6, 17}));             // e + U+0301 composes to it
}

TEST(SentencePiece, OnlyTheAsciiSpaceBecomesTheMetaSymbol) {
  const auto t = small_sentencepiece();
  EXPECT_EQ(t.encode("a b"), (Ids{6, 7, 6, 8}));
  // NFKC maps NO-BREAK SPACE and IDEOGRAPHIC SPACE to U+0020 first.
  EXPECT_EQ(t.encode("a\xC2\xA0"
                     "b"),
            (Ids{6, 7, 6, 8}));
  EXPECT_EQ(t.encode("a\xE3\x80\x80"
                     "b"),
            (Ids{6, 7, 6, 8}));
  // Tab and newline stay symbols of their own (unknown here).
  EXPECT_EQ(t.encode("a\tb"), (Ids{6, 7, 0, 8}));
  EXPECT_EQ(t.encode("a\nb"), (Ids{6, 7, 0, 8}));
  // Nothing is collapsed or stripped.
  EXPECT_EQ(t.encode("a  "), (Ids{6, 7, 24}));
  EXPECT_EQ(t.encode("a  b"), (Ids{6, 7, 24, 8}));
  EXPECT_EQ(t.encode(" "), (Ids{24}));
  EXPECT_EQ(t.encode("▁a"), (Ids{24, 7}));  // a "▁" in the text is the same symbol
  EXPECT_EQ(t.encode(""), Ids{});           // no "▁" for empty text
}

TEST(SentencePiece, ReservedPiecesAreNeverMatched) {
  const auto t = small_sentencepiece();
  EXPECT_EQ(t.encode("<s>"), (Ids{6, 29, 28, 30}));
  EXPECT_EQ(t.encode("q"), (Ids{6, 0}));
  EXPECT_EQ(t.encode("zz"), (Ids{6, 32, 32}));  // "zz" is no piece of the trie,
  EXPECT_EQ(t.encode("zzz"), (Ids{6, 31}));     // though "zzz" runs through it
  for (std::int64_t id : {0, 1, 4, 5}) EXPECT_TRUE(t.is_reserved(id)) << id;
  for (std::int64_t id : {6, 31, -1, 99}) EXPECT_FALSE(t.is_reserved(id)) << id;
  EXPECT_EQ(t.token_to_id("<s>"), 1);
}

TEST(SentencePiece, DuplicatePieceTheLaterIdWins) {
  const auto t = small_sentencepiece();
  // "y" has the ids 21 (-8) and 22 (-0.5). The later is matched, with its own score: "ay"
  // is a + y (-3 - 0.5) rather than "ay" (-4), which the score -8 would have chosen.
  EXPECT_EQ(t.encode("y"), (Ids{6, 22}));
  EXPECT_EQ(t.encode("ay"), (Ids{6, 7, 22}));
  EXPECT_EQ(t.token_to_id("y"), 22);
  EXPECT_EQ(t.id_to_token(21), "y");
}

TEST(SentencePiece, DecodeAndLookups) {
  const auto t = small_sentencepiece();
  EXPECT_EQ(t.decode(t.encode("ab  a b")), "ab  a b");
  EXPECT_EQ(t.decode(t.encode("  a ")), "  a ");
  EXPECT_EQ(t.decode(t.encode("ｆｕｌｌ")), "full");  // the normalized text
  EXPECT_EQ(t.decode({6, 0, 7}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(t.decode({7, 6}), "a ");  // only a leading space is removed
  EXPECT_EQ(t.decode({}), "");
  expect_error([&] { t.decode({37}); }, {"id 37", "out of range [0, 37)"});
  expect_error([&] { t.decode({-1}); }, {"id -1"});
  EXPECT_EQ(t.vocab_size(), kUnigramVocab.size());
  EXPECT_EQ(t.unk_id(), 0);
  EXPECT_EQ(t.score(27), -1.25);
  EXPECT_EQ(t.token_to_id("▁a"), 9);
  EXPECT_EQ(t.token_to_id("nope"), std::nullopt);
  EXPECT_EQ(t.id_to_token(23), "😀");
  expect_error([&] { t.score(40); }, {"id 40"});
}

// The pipeline's Tokenizer.encode written out step by step for kUnigramVocab and text that
// NFKC leaves alone: the lattice nodes[end][start] from comparing every substring with every
// piece, then the loops of the JavaScript over it. encode() must agree with it.
Ids pipeline_encode_for_test(const std::u32string& text) {
  if (text.empty()) return {};
  std::u32string symbols = U"▁";
  for (char32_t c : text) symbols += c == U' ' ? U'▁' : c;
  const std::size_t n = symbols.size();
  struct Candidate {
    std::int64_t id;
    double score;
    std::size_t length;
  };
  std::vector<std::map<std::size_t, std::vector<Candidate>>> nodes(n + 1);
  for (std::size_t i = 0; i < n; ++i) {
    bool matched = false;
    for (std::size_t length = 1; i + length <= n; ++length) {
      std::int64_t found = -1;  // the last id of the piece, as the trie keeps it
      for (std::size_t id = 6; id < kUnigramVocab.size(); ++id)
        if (kUnigramVocab[id].piece == symbols.substr(i, length))
          found = static_cast<std::int64_t>(id);
      if (found < 0) continue;
      nodes[i + length][i].push_back({found, kUnigramVocab[found].score, length});
      matched = true;
    }
    if (!matched) nodes[i + 1][i].push_back({0, 0.0, 1});
  }
  std::vector<double> best(n + 1, 0.0);
  Ids words(n + 1, 0);
  for (std::size_t end = 0; end <= n; ++end)
    for (const auto& [start, candidates] : nodes[end])
      for (const Candidate& c : candidates) {
        const double score = c.score + best[end - c.length];
        if (best[end] == 0 || score >= best[end]) {
          best[end] = score;
          words[end] = c.id;
        }
      }
  Ids reversed;
  for (auto iter = static_cast<std::int64_t>(n); iter > 0;) {
    reversed.push_back(words[iter]);
    for (char32_t c : kUnigramVocab[words[iter]].piece) iter -= c > 0xFFFF ? 2 : 1;
  }
  Ids ids;
  bool previous_unknown = false;
  for (std::int64_t id : reversed) {
    if (!(previous_unknown && id == 0)) ids.push_back(id);
    previous_unknown = id == 0;
  }
  return Ids(ids.rbegin(), ids.rend());
}

TEST(SentencePiece, AgreesWithAStepByStepPipeline) {
  const auto t = small_sentencepiece();
  // The pieces' characters, the meta symbol itself, ones in no piece, an astral one.
  const std::u32string alphabet = U"abcdeyzqfiklgus:)<> \t\u00E9\u00E7▁😀";
  std::mt19937 rng(2024);
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1), length(0, 24);
  for (int trial = 0; trial < 3000; ++trial) {
    std::u32string text;
    for (std::size_t k = length(rng); k > 0; --k) text += alphabet[pick(rng)];
    const std::string utf8 = utf8_for_test(text);
    ASSERT_EQ(t.encode(utf8), pipeline_encode_for_test(text)) << "text \"" << utf8 << "\"";
  }
}

// One trie walk per position, at most as deep as the longest piece: 300k symbols encode
// in milliseconds (a lattice of every substring, or a string per position, would not).
TEST(SentencePiece, LongTextIsLinear) {
  const auto t = small_sentencepiece();
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "ab ";
  const Ids ids = t.encode(text);
  ASSERT_EQ(ids.size(), 300001u);  // ▁ a b for each "ab ", then ▁ for the last space
  EXPECT_EQ(t.decode(ids), text);
}

TEST(SentencePiece, InvalidUtf8IsAnError) {
  const auto t = small_sentencepiece();
  expect_error([&] { t.encode("abc\xFF"); },
               {"SentencePieceTokenizer::encode", "not valid UTF-8", "byte offset 3"});
  expect_error([&] { t.encode("\xC0\x80"); }, {"byte offset 0"});          // overlong NUL
  expect_error([&] { t.encode("ok \xED\xA0\x80"); }, {"byte offset 3"});   // surrogate
  expect_error([&] { t.encode("\xE2\x82"); }, {"byte offset 0"});          // truncated
  expect_error([&] { t.encode("\xF4\x90\x80\x80"); }, {"byte offset 0"});  // > U+10FFFF
  expect_error([&] { t.tokenize("a\x80"); }, {"byte offset 1"});           // lone continuation
}

TEST(SentencePiece, FromPiecesErrors) {
  const std::vector<double> two = {0.0, -1.0};
  expect_error(
      [&] {
        SentencePieceTokenizer::from_pieces({"a", "b"}, {0.0}, 0, {});
      },
      {"2 pieces but 1 scores"});
  expect_error([&] { SentencePieceTokenizer::from_pieces({}, {}, 0, {}); }, {"no pieces"});
  expect_error(
      [&] {
        SentencePieceTokenizer::from_pieces({"a", "b"}, two, 2, {});
      },
      {"unk_id 2 is out of range [0, 2)"});
  expect_error(
      [&] {
        SentencePieceTokenizer::from_pieces({"a", "b"}, two, 0, {-1});
      },
      {"reserved id -1 is out of range [0, 2)"});
  expect_error(
      [&] {
        SentencePieceTokenizer::from_pieces({"a", ""}, two, 0, {});
      },
      {"piece 1 is empty"});
  expect_error(
      [&] {
        SentencePieceTokenizer::from_pieces({"a", "b\xFF"}, two, 0, {});
      },
      {"piece 1 \"b\\xff\" is not valid UTF-8"});
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()})
    expect_error(
        [&] {
          SentencePieceTokenizer::from_pieces({"a", "b"}, {0.0, bad}, 0, {});
        },
        {"piece 1 \"b\" has the score", "must be finite"});
}

// tokenizer.json in the converter's form, for kUnigramVocab.
nlohmann::json unigram_json() {
  nlohmann::json vocab = nlohmann::json::array(), added = nlohmann::json::array();
  for (const Piece& p : kUnigramVocab) vocab.push_back({utf8_for_test(p.piece), p.score});
  for (std::int64_t id : {0, 1, 2, 3, 4, 5})
    added.push_back(
        {{"id", id}, {"content", utf8_for_test(kUnigramVocab[id].piece)}, {"special", true}});
  return {
      {"version", "1.0"},
      {"normalizer", {{"type", "NFKC"}}},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", true}}},
      {"added_tokens", added},
      {"model", {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}}}};
}

TEST(SentencePiece, FromTokenizerJson) {
  TempDir dir;
  const auto t = SentencePieceTokenizer::from_tokenizer_json(
      dir.write("tokenizer.json", unigram_json().dump()));
  const auto expected = small_sentencepiece();
  EXPECT_EQ(t.vocab_size(), expected.vocab_size());
  for (const char* text : {"ab", ":)", "cde", "a😀", "ｆｕｌｌ  <s> zzz ay ç"})
    EXPECT_EQ(t.encode(text), expected.encode(text)) << text;
  // Reserved: the special added tokens, and unk_id.
  auto j = unigram_json();
  j["added_tokens"].erase(4);  // "zz" is a piece again
  j["model"]["unk_id"] = 5;    // "q" is the unknown piece
  const auto q = SentencePieceTokenizer::from_tokenizer_json(dir.write("q.json", j.dump()));
  EXPECT_EQ(q.unk_id(), 5);
  EXPECT_EQ(q.encode("zz"), (Ids{6, 4}));
  EXPECT_EQ(q.encode("ççaq"), (Ids{6, 5, 7, 5}));
  EXPECT_EQ(q.encode("\xEF\xBF\xBD"), (Ids{6, 5}));  // id 0 is still reserved
  // The backtrack steps over an unknown by the length of the unknown piece, 1 for U+FFFD
  // and "q"; an unknown piece "<pad>" (5 code units) would swallow the 4 symbols before
  // it, the pipeline's rule applied to a vocabulary it was not written for.
  j["model"]["unk_id"] = 3;
  const auto pad = SentencePieceTokenizer::from_tokenizer_json(dir.write("pad.json", j.dump()));
  EXPECT_EQ(pad.encode("abcdç"), (Ids{6, 3}));  // a b c d are gone
}

TEST(SentencePiece, TokenizerJsonErrors) {
  TempDir dir;
  // Each edit of the converter's file, and (a part of) the message it must give.
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases = {
      {[](nlohmann::json& j) { j["model"]["type"] = "BPE"; },
       "model.type must be \"Unigram\", got \"BPE\""},
      {[](nlohmann::json& j) { j.erase("normalizer"); }, "normalizer must be {\"type\": \"NFKC\"}"},
      {[](nlohmann::json& j) { j["normalizer"]["type"] = "NFC"; }, "normalizer must be"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["add_prefix_space"] = false; },
       "pre_tokenizer must be"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["split"] = true; }, "pre_tokenizer must be"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["replacement"] = "_"; }, "pre_tokenizer must be"},
      {[](nlohmann::json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"}};
       },
       "post_processor must be null"},
      {[](nlohmann::json& j) { j["model"]["byte_fallback"] = true; }, "model.byte_fallback"},
      {[](nlohmann::json& j) { j["model"]["vocab"][12][1] = nullptr; },
       "model.vocab[12] \":\": the score must be a number, got \"null\""},
      {[](nlohmann::json& j) { j["model"]["vocab"][7][0] = ""; },
       "model.vocab[7]: the piece is empty"},
      {[](nlohmann::json& j) { j["model"]["vocab"][3] = "<pad>"; },
       "model.vocab[3] must be [piece, score]"},
      {[](nlohmann::json& j) { j["model"]["vocab"] = nlohmann::json::object(); },
       "model.vocab must be an array"},
      {[](nlohmann::json& j) { j["model"]["unk_id"] = 37; },
       "model.unk_id must be an id in [0, 37), got \"37\""},
      {[](nlohmann::json& j) { j["model"]["unk_id"] = -1; }, "model.unk_id must be an id"},
      {[](nlohmann::json& j) { j["model"].erase("unk_id"); }, "model.unk_id must be an id"},
      {[](nlohmann::json& j) { j["added_tokens"][1]["special"] = false; },
       "added_tokens[1] must have \"special\": true"},
      {[](nlohmann::json& j) { j["added_tokens"][2]["content"] = "<S>"; },
       "added_tokens[2].content \"<S>\" is not model.vocab[2] \"</s>\""},
      {[](nlohmann::json& j) { j["added_tokens"][0]["id"] = 100; },
       "added_tokens[0].id \"100\" is out of range [0, 37)"},
  };
  for (const auto& [edit, message] : cases) {
    auto j = unigram_json();
    edit(j);
    const auto path = dir.write("bad.json", j.dump());
    expect_error([&] { SentencePieceTokenizer::from_tokenizer_json(path); },
                 {"SentencePieceTokenizer::from_tokenizer_json", message, "bad.json"});
  }
  expect_error(
      [&] { SentencePieceTokenizer::from_tokenizer_json(dir.write("b.json", "{\"model\": ")); },
      {"malformed JSON", "b.json"});
  expect_error([] { SentencePieceTokenizer::from_tokenizer_json("/nonexistent/tokenizer.json"); },
               {"/nonexistent/tokenizer.json"});
  std::filesystem::create_directories(dir.path / "json_dir");
  expect_error([&] { SentencePieceTokenizer::from_tokenizer_json(dir.path / "json_dir"); },
               {"json_dir", "not a regular file (a directory)"});
}

TEST(Tokenizer, LoadsUnigram) {
  TempDir dir;
  dir.write("tokenizer.json", unigram_json().dump());
  const qkv::Tokenizer t = qkv::Tokenizer::load(dir.path);
  ASSERT_NE(t.sentencepiece(), nullptr);
  EXPECT_EQ(t.wordpiece(), nullptr);
  EXPECT_EQ(t.bpe(), nullptr);
  EXPECT_EQ(t.encode("ab :)"), (Ids{6, 7, 8, 11, 13}));  // no [CLS]/BOS: the plain ids
  EXPECT_EQ(t.decode({6, 7, 8, 11, 13}), "ab :)");
  EXPECT_EQ(t.vocab_size(), kUnigramVocab.size());
  EXPECT_EQ(t.token_to_id("▁a"), 9);
  EXPECT_EQ(t.id_to_token(9), "▁a");
  dir.write("tokenizer.json", R"({"model": {"type": "WordLevel", "vocab": {}}})");
  expect_error([&] { qkv::Tokenizer::load(dir.path); },
               {"must be \"WordPiece\", \"BPE\" or \"Unigram\", got \"WordLevel\""});
  // The lookups of the other two through Tokenizer.
  const qkv::Tokenizer w(small_wordpiece());
  EXPECT_EQ(w.token_to_id("##able"), 7);
  EXPECT_EQ(w.id_to_token(10), "hello");
  const qkv::Tokenizer b(SmallBpe().make());
  EXPECT_EQ(b.token_to_id("hello"), SmallBpe().vocab.at("hello"));
  EXPECT_EQ(b.id_to_token(SmallBpe().vocab.at("hello")), "hello");
}

}  // namespace
