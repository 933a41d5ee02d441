// Byte-level BPE training (include/qkv/tokenizer.h: train_bpe).
//
// Each merge changes only the pre-tokens that hold its pair, so the pair counts are kept
// up to date incrementally instead of recounted: `where` lists, for each pair, the words
// (distinct pre-tokens) it may occur in; a merge subtracts the pairs of each such word,
// merges the word and adds its pairs back. The most frequent pair comes from a heap whose
// stale entries (count changed since the push) are skipped when popped.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_set>

#include "qkv/error.h"
#include "qkv/files.h"
#include "qkv/tokenizer.h"
#include "text/byte_level.h"
#include "text/unicode.h"

namespace qkv {

namespace {

using Symbol = std::int32_t;

std::uint64_t pair_key(Symbol a, Symbol b) {
  return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint32_t>(b);
}
Symbol left_of(std::uint64_t key) { return static_cast<Symbol>(key >> 32); }
Symbol right_of(std::uint64_t key) { return static_cast<Symbol>(key & 0xffffffffu); }

// Heap order: the larger count first, then the smaller (left, right).
struct Candidate {
  std::int64_t count;
  std::uint64_t key;
  bool operator<(const Candidate& o) const {
    return count != o.count ? count < o.count : key > o.key;
  }
};

void check_options(const BpeTrainingOptions& o) {
  const auto specials = static_cast<std::int64_t>(o.special_tokens.size());
  QKV_CHECK(o.vocab_size >= 257 + specials,
            "train_bpe: vocab_size must be at least 257 + " << specials
                << " special token(s) (the 256 bytes, one merge, the special tokens), got "
                << o.vocab_size);
  QKV_CHECK(o.vocab_size <= std::numeric_limits<Symbol>::max(),
            "train_bpe: vocab_size " << o.vocab_size << " is more than 2^31 - 1");
  QKV_CHECK(o.min_frequency >= 1, "train_bpe: min_frequency must be >= 1, got " << o.min_frequency);
  QKV_CHECK(o.max_token_bytes >= 1,
            "train_bpe: max_token_bytes must be >= 1, got " << o.max_token_bytes);
  for (std::size_t i = 0; i < o.special_tokens.size(); ++i) {
    const std::string& t = o.special_tokens[i];
    QKV_CHECK(!t.empty(), "train_bpe: special token " << i << " is empty");
    text::decode_utf8(t, "train_bpe: a special token");
    for (std::size_t j = 0; j < i; ++j)
      QKV_CHECK(o.special_tokens[j] != t, "train_bpe: special token " << text::quoted(t)
                                                                      << " is given twice");
  }
}

}  // namespace

BpeVocabulary train_bpe(std::string_view text, const BpeTrainingOptions& options) {
  check_options(options);
  QKV_CHECK(!text.empty(), "train_bpe: the text is empty");
  const std::size_t nul = text.find('\0');
  QKV_CHECK(nul == std::string_view::npos,
            "train_bpe: the text holds a NUL byte at offset " << nul << " (a binary file?)");

  // 1. The distinct pre-tokens and their counts, sorted (the order is part of determinism).
  std::vector<std::size_t> offsets;
  const std::vector<char32_t> cps = text::decode_utf8(text, "train_bpe", &offsets);
  std::unordered_map<std::string_view, std::int64_t> counted;
  for (const auto& [b, e] : text::gpt2_split(cps))
    ++counted[text.substr(offsets[b], offsets[e] - offsets[b])];
  std::vector<std::pair<std::string_view, std::int64_t>> distinct(counted.begin(), counted.end());
  std::sort(distinct.begin(), distinct.end());

  // 2. The byte symbols, ids in code point order of their characters.
  const text::ByteTable& table = text::byte_table();
  std::array<int, 256> bytes_by_char{};
  for (int b = 0; b < 256; ++b) bytes_by_char[b] = b;
  std::sort(bytes_by_char.begin(), bytes_by_char.end(),
            [&](int x, int y) { return table.to_char[x] < table.to_char[y]; });
  BpeVocabulary vocab;
  std::array<Symbol, 256> byte_symbol{};
  for (int id = 0; id < 256; ++id) {
    byte_symbol[bytes_by_char[id]] = id;
    vocab.tokens.emplace_back();
    text::append_utf8(vocab.tokens.back(), table.to_char[bytes_by_char[id]]);
  }

  std::vector<std::int64_t> token_bytes(256, 1);  // symbol -> the bytes of text it stands for
  std::vector<std::vector<Symbol>> words(distinct.size());  // word -> its symbols
  std::vector<std::int64_t> weight(distinct.size());       // word -> its count
  std::unordered_map<std::uint64_t, std::int64_t> pair_count;
  std::unordered_map<std::uint64_t, std::vector<std::int32_t>> where;  // may hold stale words
  for (std::size_t w = 0; w < distinct.size(); ++w) {
    for (unsigned char c : distinct[w].first) words[w].push_back(byte_symbol[c]);
    weight[w] = distinct[w].second;
    const std::vector<Symbol>& s = words[w];
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      const std::uint64_t key = pair_key(s[i], s[i + 1]);
      pair_count[key] += weight[w];
      std::vector<std::int32_t>& list = where[key];
      if (list.empty() || list.back() != static_cast<std::int32_t>(w))
        list.push_back(static_cast<std::int32_t>(w));
    }
  }
  std::priority_queue<Candidate> heap;
  for (const auto& [key, count] : pair_count) heap.push({count, key});

  // 3. Merges, most frequent pair first.
  const auto specials = static_cast<std::int64_t>(options.special_tokens.size());
  const std::int64_t target = options.vocab_size - specials;
  std::vector<Symbol> merged_at(words.size(), -1);  // the last merge that rewrote each word
  std::unordered_set<std::uint64_t> changed;
  while (static_cast<std::int64_t>(vocab.tokens.size()) < target && !heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const auto found = pair_count.find(top.key);
    if (found == pair_count.end() || found->second != top.count) continue;  // stale
    if (top.count < options.min_frequency) break;
    const Symbol a = left_of(top.key), b = right_of(top.key);
    // Too long a token: passed over. Its count stays; a change to it pushes it again, to
    // be passed over again.
    if (token_bytes[a] + token_bytes[b] > options.max_token_bytes) continue;
    const auto merged = static_cast<Symbol>(vocab.tokens.size());
    vocab.merges.emplace_back(vocab.tokens[a], vocab.tokens[b]);
    vocab.tokens.push_back(vocab.tokens[a] + vocab.tokens[b]);
    token_bytes.push_back(token_bytes[a] + token_bytes[b]);

    const std::vector<std::int32_t> words_with_pair = std::move(where[top.key]);
    where.erase(top.key);
    changed.clear();
    for (const std::int32_t w : words_with_pair) {
      if (merged_at[w] == merged) continue;  // listed twice
      merged_at[w] = merged;
      std::vector<Symbol>& s = words[w];
      const std::int64_t n = weight[w];
      for (std::size_t i = 0; i + 1 < s.size(); ++i) {
        const std::uint64_t key = pair_key(s[i], s[i + 1]);
        pair_count[key] -= n;
        changed.insert(key);
      }
      std::size_t out = 0;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          s[out++] = merged;
          ++i;
        } else {
          s[out++] = s[i];
        }
      }
      s.resize(out);
      for (std::size_t i = 0; i + 1 < s.size(); ++i) {
        const std::uint64_t key = pair_key(s[i], s[i + 1]);
        pair_count[key] += n;
        changed.insert(key);
        // Pairs without the new symbol already list this word.
        if (s[i] == merged || s[i + 1] == merged) {
          std::vector<std::int32_t>& list = where[key];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
    }
    for (const std::uint64_t key : changed) {
      const auto it = pair_count.find(key);
      if (it->second == 0) {
        pair_count.erase(it);
      } else {
        heap.push({it->second, key});
      }
    }
  }
  for (const std::string& t : options.special_tokens) vocab.tokens.push_back(t);
  return vocab;
}

BpeTokenizer BpeVocabulary::tokenizer() const {
  std::map<std::string, std::int64_t> ids;
  for (std::size_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], static_cast<std::int64_t>(i));
  return BpeTokenizer::from_vocab_and_merges(ids, merges);
}

std::string BpeVocabulary::vocab_json() const {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  return vocab.dump() + "\n";
}

std::string BpeVocabulary::merges_txt() const {
  std::string text = "#version: 0.2\n";
  for (const auto& [left, right] : merges) text += left + " " + right + "\n";
  return text;
}

void BpeVocabulary::save(const std::filesystem::path& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  QKV_CHECK(!ec, "BpeVocabulary::save: cannot create '" << dir.string() << "': " << ec.message());
  write_file((dir / "vocab.json").string(), vocab_json(), "BpeVocabulary::save");
  write_file((dir / "merges.txt").string(), merges_txt(), "BpeVocabulary::save");
}

}  // namespace qkv
