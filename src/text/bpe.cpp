// GPT-2 byte-level BPE (openai/gpt-2 src/encoder.py; Hugging Face's ByteLevel + BPE).
#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>

#include "io/json_bounded.h"
#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "text/byte_level.h"
#include "text/unicode.h"

namespace qkv {

namespace {

std::uint64_t pair_key(std::int64_t a, std::int64_t b) {
  return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint64_t>(b);
}

}  // namespace

BpeTokenizer BpeTokenizer::from_vocab_and_merges(
    const std::map<std::string, std::int64_t>& vocab,
    const std::vector<std::pair<std::string, std::string>>& merges) {
  BpeTokenizer t;
  // The ids of N tokens are 0..N-1, each once (GPT-2's vocab.json, every tokenizer.json
  // BPE model): checked against N before the id -> token table is sized from them, so an
  // id of 10^9 is an error, not gigabytes allocated.
  const auto n = static_cast<std::int64_t>(vocab.size());
  QKV_CHECK(n <= std::numeric_limits<std::int32_t>::max(),
            "BpeTokenizer: " << n << " vocabulary entries, more than 2^31 - 1");
  for (const auto& [token, id] : vocab)
    QKV_CHECK(id >= 0 && id < n, "BpeTokenizer: the id of " << text::quoted(token) << " is " << id
                                     << "; the vocabulary's " << n << " tokens must have the ids 0.."
                                     << n - 1 << ", each once");
  t.tokens_.assign(static_cast<std::size_t>(n), std::string());
  std::vector<bool> used(t.tokens_.size(), false);
  for (const auto& [token, id] : vocab) {
    QKV_CHECK(!used[id], "BpeTokenizer: tokens " << text::quoted(t.tokens_[id]) << " and "
                                                 << text::quoted(token) << " share the id " << id);
    used[id] = true;
    t.tokens_[id] = token;
    t.ids_.emplace(token, id);
  }
  const text::ByteTable& table = text::byte_table();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    text::append_utf8(symbol, table.to_char[b]);
    const auto it = t.ids_.find(symbol);
    t.byte_ids_[b] = it == t.ids_.end() ? -1 : it->second;
  }
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& a = merges[rank].first;   // not a structured binding: clang 14
    const std::string& b = merges[rank].second;  // cannot capture those in the lambda
    const auto find = [&](const std::string& token) {
      const auto it = t.ids_.find(token);
      QKV_CHECK(it != t.ids_.end(), "BpeTokenizer: merge " << rank << " (" << text::quoted(a)
                                                           << " " << text::quoted(b) << ") names "
                                                           << text::quoted(token)
                                                           << ", which is not in the vocabulary");
      return it->second;
    };
    QKV_CHECK(!a.empty() && !b.empty(), "BpeTokenizer: merge " << rank << " has an empty part");
    const std::int64_t ia = find(a), ib = find(b), merged = find(a + b);
    // A repeated merge takes its later rank, as dict(zip(merges, range(...))) in encoder.py.
    t.merges_[pair_key(ia, ib)] = {static_cast<std::int64_t>(rank), merged};
  }
  if (const auto eos = t.eos_id()) t.specials_.push_back(t.tokens_[*eos]);
  return t;
}

namespace {

std::map<std::string, std::int64_t> vocab_from_json(const nlohmann::json& v, const char* who,
                                                    const std::string& where) {
  QKV_CHECK(v.is_object(), who << ": the vocabulary must be a JSON object of token -> id" << where);
  std::map<std::string, std::int64_t> vocab;
  for (auto it = v.begin(); it != v.end(); ++it) {
    QKV_CHECK(it.value().is_number_integer(),
              who << ": vocabulary entry " << text::quoted(it.key())
                  << " must have an integer id, got " << it.value().type_name() << where);
    QKV_CHECK(it.value().is_number_unsigned() ||
                  it.value().get<std::int64_t>() >= 0,
              who << ": vocabulary entry " << text::quoted(it.key()) << " has the negative id "
                  << it.value().get<std::int64_t>() << where);
    QKV_CHECK(!it.value().is_number_unsigned() ||
                  it.value().get<std::uint64_t>() <=
                      static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
              who << ": vocabulary entry " << text::quoted(it.key()) << " has the id "
                  << it.value().get<std::uint64_t>() << ", beyond any vocabulary" << where);
    vocab.emplace(it.key(), it.value().get<std::int64_t>());
  }
  return vocab;
}

template <class F>
auto with_context(const char* who, const std::string& where, F&& build) {
  try {
    return build();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string(who) + ": malformed JSON" + where + ": " + e.what());
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.find(where) != std::string::npos) throw;
    throw Error(message + where);
  }
}

}  // namespace

BpeTokenizer BpeTokenizer::from_files(const std::filesystem::path& vocab_json,
                                      const std::filesystem::path& merges_txt) {
  const char* who = "BpeTokenizer::from_files";
  const std::string vocab_text = text::read_text_file(vocab_json, who);  // vocab.json's errors first
  const std::string merges_text = text::read_text_file(merges_txt, who);
  return from_texts(vocab_text, merges_text, vocab_json, merges_txt);
}

BpeTokenizer BpeTokenizer::from_texts(const std::string& vocab_text, const std::string& merges_text,
                                      const std::filesystem::path& vocab_json,
                                      const std::filesystem::path& merges_txt) {
  const char* who = "BpeTokenizer::from_files";
  std::map<std::string, std::int64_t> vocab =
      with_context(who, " in '" + vocab_json.string() + "'", [&] {
        return vocab_from_json(io::parse_json(vocab_text, std::string(who) + ": '" + vocab_json.string() + "'"), who,
                               " in '" + vocab_json.string() + "'");
      });
  std::vector<std::pair<std::string, std::string>> merges;
  const std::string where = " in '" + merges_txt.string() + "'";
  std::size_t start = 0, line_number = 0;
  while (start < merges_text.size()) {
    std::size_t end = merges_text.find('\n', start);
    if (end == std::string::npos) end = merges_text.size();
    std::string line = merges_text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    QKV_CHECK(line.size() <= 2 * text::kMaxTokenBytes + 1,
              who << ": line " << line_number << " is " << line.size()
                  << " bytes long, longer than any merge (is this a merges.txt?)" << where);
    try {
      text::decode_utf8(line, who);
    } catch (const Error&) {
      throw Error(std::string(who) + ": line " + std::to_string(line_number) + " " +
                  text::quoted(line) + " is not valid UTF-8" + where);
    }
    if (line.empty() || (line_number == 1 && line.starts_with("#version"))) continue;
    const std::size_t space = line.find(' ');
    QKV_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                  line.find(' ', space + 1) == std::string::npos,
              who << ": line " << line_number << " must be two tokens \"a b\", got "
                  << text::quoted(line) << where);
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  return with_context(who, " (files '" + vocab_json.string() + "', '" + merges_txt.string() + "')",
                      [&] { return from_vocab_and_merges(vocab, merges); });
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::filesystem::path& path) {
  const char* who = "BpeTokenizer::from_tokenizer_json";
  const std::string content = text::read_text_file(path, who);
  const std::string where = " in '" + path.string() + "'";
  return with_context(who, where, [&] {
    const nlohmann::json j = io::parse_json(content, std::string(who) + ": '" + path.string() + "'");
    QKV_CHECK(j.contains("model") && j["model"].is_object(),
              who << ": no \"model\" object" << where);
    const auto& model = j["model"];
    const std::string type = model.value("type", std::string("BPE"));
    QKV_CHECK(type == "BPE",
              who << ": model.type must be \"BPE\", got \"" << type << "\"" << where);
    // Only GPT-2's byte-level pre-tokenization is implemented; anything else would encode wrongly.
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
      const auto& p = j["pre_tokenizer"];
      QKV_CHECK(
          p.value("type", std::string()) == "ByteLevel",
          who << ": only the \"ByteLevel\" pre_tokenizer is supported, got " << p.dump() << where);
      QKV_CHECK(!p.value("add_prefix_space", false),
                who << ": pre_tokenizer.add_prefix_space = true is not supported" << where);
    }
    QKV_CHECK(model.contains("vocab"), who << ": no model.vocab" << where);
    const auto vocab = vocab_from_json(model["vocab"], who, where);
    std::vector<std::pair<std::string, std::string>> merges;
    if (model.contains("merges")) {
      QKV_CHECK(model["merges"].is_array(), who << ": model.merges must be an array" << where);
      for (const auto& m : model["merges"]) {
        if (m.is_string()) {
          const std::string s = m.get<std::string>();
          const std::size_t space = s.find(' ');
          QKV_CHECK(space != std::string::npos && space > 0 && space + 1 < s.size() &&
                        s.find(' ', space + 1) == std::string::npos,
                    who << ": model.merges entry must be \"a b\", got " << text::quoted(s)
                        << where);
          merges.emplace_back(s.substr(0, space), s.substr(space + 1));
        } else {
          QKV_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                    who << ": model.merges entry must be \"a b\" or [a, b], got "
                        << text::quoted(io::json_brief(m, 200))
                        << where);
          merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
        }
      }
    }
    BpeTokenizer t = from_vocab_and_merges(vocab, merges);
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const auto& added : j["added_tokens"])
        if (added.value("special", false) && added.contains("content") &&
            added["content"].is_string()) {
          const std::string content_token = added["content"].get<std::string>();
          QKV_CHECK(t.ids_.count(content_token) != 0, who << ": added token "
                                                          << text::quoted(content_token)
                                                          << " is not in model.vocab" << where);
          if (std::find(t.specials_.begin(), t.specials_.end(), content_token) == t.specials_.end())
            t.specials_.push_back(content_token);
        }
    return t;
  });
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::size_t> offsets;
  const std::vector<char32_t> cps = text::decode_utf8(text, "BpeTokenizer::encode", &offsets);
  std::vector<std::string> pieces;
  for (const auto& [b, e] : text::gpt2_split(cps))
    pieces.emplace_back(text.substr(offsets[b], offsets[e] - offsets[b]));
  return pieces;
}

void BpeTokenizer::bpe(std::string_view piece, std::vector<std::int64_t>& ids) const {
  std::vector<std::int64_t> word;
  word.reserve(piece.size());
  for (unsigned char b : piece) {
    QKV_CHECK(byte_ids_[b] >= 0, "BpeTokenizer::encode: the symbol of byte 0x"
                                     << std::hex << static_cast<unsigned>(b)
                                     << " is not in the vocabulary");
    word.push_back(byte_ids_[b]);
  }
  if (word.empty()) return;
  // encoder.py's bpe() merges the adjacent pair of lowest rank until none has a merge. As
  // Hugging Face's BPE, a heap of candidate pairs ordered by (rank, position) does the
  // same in O(n log n) instead of O(n²) for a long piece (a base64 blob is one piece).
  // With merges learned in order (a merge's result never takes part in an earlier-ranked
  // merge) this is exactly GPT-2's order: leftmost occurrence of the lowest rank first.
  struct Symbol {
    std::int64_t id;          // -1 once merged into its left neighbour
    std::int64_t prev, next;  // neighbours, -1 at the ends
  };
  struct Candidate {
    std::int64_t rank, left, left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  const auto n = static_cast<std::int64_t>(word.size());
  std::vector<Symbol> symbols(word.size());
  for (std::int64_t i = 0; i < n; ++i) symbols[i] = {word[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](std::int64_t left) {
    const std::int64_t right = symbols[left].next;
    if (right < 0) return;
    const auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end())
      heap.push({it->second.first, left, symbols[left].id, symbols[right].id, it->second.second});
  };
  for (std::int64_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = symbols[c.left];
    // Stale: the left symbol merged away or changed, or its right neighbour did. Results
    // are longer than their parts, so an id seen again is the same symbol.
    if (l.id != c.left_id || l.next < 0 || symbols[l.next].id != c.right_id) continue;
    Symbol& r = symbols[l.next];
    l.id = c.merged;
    r.id = -1;
    l.next = r.next;
    if (l.next >= 0) symbols[l.next].prev = c.left;
    if (l.prev >= 0) push(l.prev);
    push(c.left);
  }
  word.clear();
  for (std::int64_t i = 0; i >= 0; i = symbols[i].next) word.push_back(symbols[i].id);
  ids.insert(ids.end(), word.begin(), word.end());
}

std::vector<std::int64_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  // Validate the whole text first so the offset in the message is relative to it.
  text::decode_utf8(text, "BpeTokenizer::encode");
  for (const text::Segment& segment : text::split_specials(text, specials_)) {
    if (segment.special) {
      ids.push_back(ids_.at(std::string(segment.text)));
      continue;
    }
    for (const std::string& piece : pre_tokenize(segment.text)) bpe(piece, ids);
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  const text::ByteTable& table = text::byte_table();
  std::string out;
  for (std::int64_t id : ids) {
    const std::string& token = id_to_token(id);
    for (char32_t cp : text::decode_utf8(token, "BpeTokenizer::decode")) {
      if (cp < table.to_byte.size() && table.to_byte[cp] >= 0)
        out += static_cast<char>(table.to_byte[cp]);
      else
        text::append_utf8(out, cp);  // not a byte symbol (an added token's text): kept as is
    }
  }
  return out;
}

std::optional<std::int64_t> BpeTokenizer::token_to_id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeTokenizer::id_to_token(std::int64_t id) const {
  QKV_CHECK(id >= 0 && id < static_cast<std::int64_t>(tokens_.size()),
            "BpeTokenizer: id " << id << " is not in the vocabulary [0, " << tokens_.size()
                                << ")");
  return tokens_[id];
}

}  // namespace qkv
