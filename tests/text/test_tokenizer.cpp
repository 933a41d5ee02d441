// Tokenizers on small hand-made vocabularies (no files to fetch). The real BERT-uncased
// and GPT-2 vocabularies are exercised by test_real_vocabularies.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "utf8_for_tests.h"

namespace {

using qkv::BpeTokenizer;
using qkv::WordPieceTokenizer;
using Ids = std::vector<std::int64_t>;
using Strings = std::vector<std::string>;

// A fresh directory under the system temp dir, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("qkv_text_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return path / name;
  }
};

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

}  // namespace
