// train_bpe against its naive twin (every pair recounted over every pre-token at each
// step), a worked example, and the tokenizer it makes: round trips, files, errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "qkv/error.h"
#include "qkv/tokenizer.h"

namespace {

using qkv::BpeTrainingOptions;
using qkv::BpeVocabulary;
using Merges = std::vector<std::pair<std::string, std::string>>;

// The naive twin: the same definition (include/qkv/tokenizer.h) with no bookkeeping.
// Pre-tokens come from BpeTokenizer::pre_tokenize, symbols are token strings, and each
// step recounts all pairs and takes the most frequent, ties to the smallest ids.
Merges naive_merges(const std::string& text, std::int64_t merges_wanted, std::int64_t min_frequency,
                    std::int64_t max_token_bytes = 256) {
  const BpeVocabulary bytes = qkv::train_bpe("ab ab", {.vocab_size = 258, .min_frequency = 1000});
  const qkv::BpeTokenizer splitter = bytes.tokenizer();
  std::map<std::string, std::int64_t> id;  // token -> id, the 256 byte symbols first
  for (int i = 0; i < 256; ++i) id[bytes.tokens[i]] = i;
  std::map<std::string, std::int64_t> counts;
  for (const std::string& piece : splitter.pre_tokenize(text)) ++counts[piece];
  std::vector<std::pair<std::vector<std::string>, std::int64_t>> words;
  for (const auto& [piece, n] : counts) {
    std::vector<std::string> symbols;
    for (std::int64_t t : splitter.encode(piece))  // no merges: one id per byte
      symbols.push_back(splitter.id_to_token(t));
    words.emplace_back(symbols, n);
  }
  Merges merges;
  while (static_cast<std::int64_t>(merges.size()) < merges_wanted) {
    std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> pairs;
    for (const auto& [s, n] : words)
      for (std::size_t i = 0; i + 1 < s.size(); ++i) pairs[{id[s[i]], id[s[i + 1]]}] += n;
    std::pair<std::int64_t, std::int64_t> best{-1, -1};
    std::int64_t best_count = 0;
    // The bytes a token stands for: one per character of the byte alphabet.
    const auto bytes_of = [&](std::int64_t i) {
      for (const auto& [token, j] : id)
        if (j == i)
          return std::count_if(token.begin(), token.end(), [](char c) { return (c & 0xC0) != 0x80; });
      return std::ptrdiff_t{0};
    };
    for (const auto& [p, n] : pairs)  // ascending ids: the first of the largest count wins
      if (n > best_count && bytes_of(p.first) + bytes_of(p.second) <= max_token_bytes)
        best_count = n, best = p;
    if (best_count < min_frequency || best_count == 0) break;
    std::string a, b;
    for (const auto& [token, i] : id) {
      if (i == best.first) a = token;
      if (i == best.second) b = token;
    }
    merges.emplace_back(a, b);
    id[a + b] = 256 + static_cast<std::int64_t>(merges.size()) - 1;
    for (auto& [s, n] : words) {
      std::vector<std::string> out;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(a + b);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s = out;
    }
  }
  return merges;
}

// Text with repeats at many frequencies, digits, punctuation, contractions, newlines and
// multi-byte characters (accents, CJK, an emoji).
std::string corpus(std::size_t words, unsigned seed) {
  const std::vector<std::string> vocabulary = {
      "the", "people", "of", "the", "United", "States", "we've", "it's", "Congress", "1861",
      "war", "peace", "naïve", "café", "東京", "😀", "—", "(applause)", "nation's", "tax",
      "taxes", "taxation", "a", "an", "and", "2021", "12", ",", ".", "\n"};
  std::mt19937 rng(seed);
  std::string text;
  for (std::size_t i = 0; i < words; ++i) {
    // Zipf-like: low indices far more often.
    const std::size_t k = std::min<std::size_t>(
        vocabulary.size() - 1, static_cast<std::size_t>(std::exp(std::uniform_real_distribution<double>(
                                   0.0, std::log(static_cast<double>(vocabulary.size())))(rng))) - 1);
    std::string word = vocabulary[k];
    if (rng() % 3 == 0) {  // a made-up word over 8 letters: many distinct pre-tokens
      word.clear();
      for (std::size_t n = 2 + rng() % 7; n > 0; --n) word += static_cast<char>('a' + rng() % 8);
    }
    text += (i == 0 || rng() % 7 == 0 ? "" : " ") + word;
  }
  return text;
}

TEST(BpeTrainer, AWorkedExample) {
  // Pre-tokens "ab" once and " ab" twice: (a, b) occurs 3 times, then (Ġ, ab) twice.
  const BpeVocabulary v = qkv::train_bpe("ab ab ab", {.vocab_size = 259});
  EXPECT_EQ(v.merges, (Merges{{"a", "b"}, {"Ġ", "ab"}}));
  ASSERT_EQ(v.tokens.size(), 259u);
  EXPECT_EQ(v.tokens[0], "!");
  EXPECT_EQ(v.tokens[255], "Ń");  // the last of the 68 remapped bytes
  EXPECT_EQ(v.tokens[256], "ab");
  EXPECT_EQ(v.tokens[257], "Ġab");
  EXPECT_EQ(v.tokens[258], "<|endoftext|>");
  EXPECT_EQ(v.tokenizer().encode("ab ab"), (std::vector<std::int64_t>{256, 257}));
}

TEST(BpeTrainer, EqualsTheNaiveTwin) {
  for (unsigned seed : {1u, 2u, 3u}) {
    const std::string text = corpus(3000, seed);
    for (std::int64_t min_frequency : {1, 2, 40}) {
      const BpeVocabulary v = qkv::train_bpe(
          text, {.vocab_size = 256 + 150 + 1, .min_frequency = min_frequency});
      const Merges want = naive_merges(text, 150, min_frequency);
      EXPECT_EQ(v.merges, want) << "seed " << seed << ", min_frequency " << min_frequency;
      EXPECT_EQ(v.tokens.size(), 256 + want.size() + 1);
    }
  }
}

TEST(BpeTrainer, EqualsTheNaiveTwinWithATokenLengthLimit) {
  const std::string text = corpus(2000, 6);
  for (std::int64_t max_token_bytes : {2, 3, 5}) {
    const BpeVocabulary v = qkv::train_bpe(
        text, {.vocab_size = 256 + 80 + 1, .max_token_bytes = max_token_bytes});
    EXPECT_EQ(v.merges, naive_merges(text, 80, 2, max_token_bytes)) << max_token_bytes;
  }
}

// 3 MB of one digit is one pre-token: without the limit its token doubled 18 times, into
// a merges.txt line BpeTokenizer::from_files refuses (`qkv train lm` then failed to read
// back the tokenizer it had just written).
TEST(BpeTrainer, ALongRunKeepsItsTokensShortAndLoadsBack) {
  const std::string text = std::string(3 << 20, '2') + "\n";
  const BpeVocabulary v = qkv::train_bpe(text, {.vocab_size = 300});
  for (const std::string& t : v.tokens) EXPECT_LE(t.size(), 256u * 2) << t.substr(0, 20);
  EXPECT_EQ(v.tokens[v.tokens.size() - 2], std::string(256, '2'));  // the longest allowed
  const auto dir = std::filesystem::temp_directory_path() /
                   ("qkv_bpe_trainer_long_" + std::to_string(::getpid()));
  v.save(dir);
  const auto loaded = qkv::BpeTokenizer::from_files(dir / "vocab.json", dir / "merges.txt");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(loaded.decode(loaded.encode(text)), text);
}

TEST(BpeTrainer, IsDeterministicAndRoundTripsAnyText) {
  const std::string text = corpus(5000, 4);
  const BpeVocabulary a = qkv::train_bpe(text, {.vocab_size = 600});
  const BpeVocabulary b = qkv::train_bpe(text, {.vocab_size = 600});
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  const qkv::BpeTokenizer tok = a.tokenizer();
  const std::vector<std::int64_t> ids = tok.encode(text);
  EXPECT_LT(ids.size() * 3, text.size()) << "the merges should compress their own text";
  EXPECT_EQ(tok.decode(ids), text);
  for (const std::string& other : {std::string("Zebra! ünïcödé 🎉🎉 \t\r\n  x"), std::string("\x7f\x01 ok")})
    EXPECT_EQ(tok.decode(tok.encode(other)), other);
  EXPECT_EQ(tok.encode("x<|endoftext|>y").size(), 3u);  // the special token stays whole
  EXPECT_EQ(a.tokens.size(), 600u);
  EXPECT_EQ(tok.eos_id(), 599);
}

TEST(BpeTrainer, SavedFilesLoadAsGpt2Files) {
  const std::string text = corpus(2000, 5);
  const BpeVocabulary v = qkv::train_bpe(text, {.vocab_size = 400, .special_tokens = {"<|endoftext|>", "<pad>"}});
  const auto dir = std::filesystem::temp_directory_path() /
                   ("qkv_bpe_trainer_" + std::to_string(::getpid()));
  v.save(dir);
  const auto loaded = qkv::BpeTokenizer::from_files(dir / "vocab.json", dir / "merges.txt");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(loaded.vocab_size(), 400u);
  EXPECT_EQ(loaded.encode(text), v.tokenizer().encode(text));
  EXPECT_EQ(loaded.token_to_id("<pad>"), 399);
}

TEST(BpeTrainer, StopsWhenNoPairIsFrequentEnough) {
  const BpeVocabulary v = qkv::train_bpe("abc", {.vocab_size = 1000, .min_frequency = 2});
  EXPECT_TRUE(v.merges.empty());
  EXPECT_EQ(v.tokens.size(), 257u);
}

TEST(BpeTrainer, BadInputIsAnErrorNamingIt) {
  const auto fails = [](std::string_view text, const BpeTrainingOptions& o, const std::string& what) {
    try {
      qkv::train_bpe(text, o);
      ADD_FAILURE() << "no error for " << what;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  fails("", {.vocab_size = 300}, "the text is empty");
  fails(std::string_view("ab\0cd", 5), {.vocab_size = 300}, "NUL byte at offset 2");
  fails("ab\xff", {.vocab_size = 300}, "not valid UTF-8");
  fails("ab", {.vocab_size = 257}, "vocab_size must be at least 257 + 1");
  fails("ab", {.vocab_size = 300, .min_frequency = 0}, "min_frequency must be >= 1");
  fails("ab", {.vocab_size = 300, .max_token_bytes = 0}, "max_token_bytes must be >= 1");
  fails("ab", {.vocab_size = 300, .special_tokens = {"<s>", "<s>"}}, "is given twice");
  fails("ab", {.vocab_size = 300, .special_tokens = {""}}, "special token 0 is empty");
}

}  // namespace
