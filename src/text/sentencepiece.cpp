// SentencePiece unigram as the Universal Sentence Encoder lite's published pipeline runs it
// (npm @energetic-ai/embeddings 0.2.0, lib/tokenizer.ts and lib/trie.ts). The rules are
// listed in qkv/tokenizer.h; this file keeps each of them, quirks included, because the
// model's embeddings are compared with the pipeline's and must see the same ids.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "io/json_bounded.h"
#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "text/unicode.h"

namespace qkv {

namespace {

constexpr char32_t kSpaceSymbol = 0x2581;  // "▁", SentencePiece's meta symbol for a space
constexpr std::string_view kSpaceSymbolUtf8 = "\xE2\x96\x81";

// processInput of the pipeline: NFKC, then "▁" in front and for every U+0020 (only that
// character: tabs, newlines and NBSP stay), unless NFKC gave nothing.
std::vector<char32_t> normalize(std::string_view text) {
  const char* who = "SentencePieceTokenizer::encode";
  // Validates first, so bad bytes are an Error naming their offset rather than U+FFFD.
  const std::vector<char32_t> cps = text::decode_utf8(text, who);
  if (cps.empty()) return {};
  // NFKC of the stream-safe text (text::nfkc): a run of combining marks is bounded, so the
  // normaliser's reordering stays linear.
  const std::u32string normalized =
      text::nfkc(std::u32string_view(cps.data(), cps.size()), who);
  std::vector<char32_t> symbols;
  symbols.reserve(normalized.size() + 1);
  symbols.push_back(kSpaceSymbol);
  for (char32_t c : normalized) symbols.push_back(c == U' ' ? kSpaceSymbol : c);
  return symbols;
}

// The length of a piece as a JavaScript string: UTF-16 code units.
std::int64_t utf16_length(const std::vector<char32_t>& cps) {
  std::int64_t n = 0;
  for (char32_t cp : cps) n += cp > 0xFFFF ? 2 : 1;
  return n;
}

}  // namespace

SentencePieceTokenizer SentencePieceTokenizer::from_pieces(std::vector<std::string> pieces,
                                                           std::vector<double> scores,
                                                           std::int64_t unk_id,
                                                           std::vector<std::int64_t> reserved) {
  const char* who = "SentencePieceTokenizer";
  QKV_CHECK(pieces.size() == scores.size(),
            who << ": " << pieces.size() << " pieces but " << scores.size() << " scores");
  QKV_CHECK(!pieces.empty(), who << ": the vocabulary has no pieces");
  QKV_CHECK(pieces.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
            who << ": " << pieces.size() << " pieces, more than 2^31 - 1");
  const auto n = static_cast<std::int64_t>(pieces.size());
  QKV_CHECK(unk_id >= 0 && unk_id < n,
            who << ": unk_id " << unk_id << " is out of range [0, " << n << ")");
  SentencePieceTokenizer t;
  t.unk_id_ = unk_id;
  t.reserved_.assign(pieces.size(), false);
  t.reserved_[unk_id] = true;
  for (std::int64_t id : reserved) {
    QKV_CHECK(id >= 0 && id < n,
              who << ": reserved id " << id << " is out of range [0, " << n << ")");
    t.reserved_[id] = true;
  }
  t.utf16_lengths_.resize(pieces.size());
  std::vector<std::vector<char32_t>> symbols(pieces.size());
  for (std::int64_t id = 0; id < n; ++id) {
    const std::string& piece = pieces[id];
    QKV_CHECK(!piece.empty(), who << ": piece " << id << " is empty");
    QKV_CHECK(piece.size() <= text::kMaxTokenBytes, who << ": piece " << id << " is "
                                                        << piece.size() << " bytes long (limit "
                                                        << text::kMaxTokenBytes << ")");
    try {
      symbols[id] = text::decode_utf8(piece, who);
    } catch (const Error&) {
      throw Error(std::string(who) + ": piece " + std::to_string(id) + " " + text::quoted(piece) +
                  " is not valid UTF-8");
    }
    QKV_CHECK(std::isfinite(scores[id]), who << ": piece " << id << " " << text::quoted(piece)
                                             << " has the score " << scores[id]
                                             << "; scores must be finite");
    t.utf16_lengths_[id] = utf16_length(symbols[id]);
  }

  // The trie of the pieces that can be matched, inserted in id order: a piece that appears
  // twice ends at the same node and the later id replaces the earlier, as Trie.insert
  // overwrites the node's word. Built with maps, then flattened into sorted edge lists.
  std::vector<std::map<char32_t, std::int64_t>> children(1);
  t.node_piece_.assign(1, -1);
  for (std::int64_t id = 0; id < n; ++id) {
    if (t.reserved_[id]) continue;
    std::int64_t node = 0;
    for (char32_t cp : symbols[id]) {
      const auto next = static_cast<std::int64_t>(children.size());
      const auto [it, fresh] = children[node].emplace(cp, next);
      node = it->second;  // read before emplace_back moves the maps
      if (fresh) {
        children.emplace_back();
        t.node_piece_.push_back(-1);
      }
    }
    t.node_piece_[node] = id;
  }
  t.edge_begin_.reserve(children.size() + 1);
  for (const auto& c : children) {
    t.edge_begin_.push_back(static_cast<std::int64_t>(t.edges_.size()));
    t.edges_.insert(t.edges_.end(), c.begin(), c.end());
  }
  t.edge_begin_.push_back(static_cast<std::int64_t>(t.edges_.size()));

  // token_to_id gives the id text is matched as: the later of duplicate pieces, and a
  // matchable id before a reserved one that spells the same.
  for (std::int64_t id = 0; id < n; ++id)
    if (!t.reserved_[id]) t.ids_[pieces[id]] = id;
  for (std::int64_t id = 0; id < n; ++id)
    if (t.reserved_[id]) t.ids_.emplace(pieces[id], id);
  t.pieces_ = std::move(pieces);
  t.scores_ = std::move(scores);
  return t;
}

SentencePieceTokenizer SentencePieceTokenizer::from_tokenizer_json(
    const std::filesystem::path& path) {
  const char* who = "SentencePieceTokenizer::from_tokenizer_json";
  const std::string content = text::read_text_file(path, who);
  const std::string where = " in '" + path.string() + "'";
  // A value for a message: a string as itself, anything else as its JSON (a bounded
  // prefix, io::json_brief), quoted.
  const auto dump = [](const nlohmann::json& v) {
    return text::quoted(v.is_string() ? v.get<std::string>() : io::json_brief(v, 200));
  };
  // Whether v is an integer in [0, size); an unsigned beyond int64 is out of range too.
  const auto id_in_range = [](const nlohmann::json& v, std::size_t size) {
    if (v.is_number_unsigned()) return v.get<std::uint64_t>() < size;
    return v.is_number_integer() && v.get<std::int64_t>() >= 0 &&
           static_cast<std::uint64_t>(v.get<std::int64_t>()) < size;
  };
  // Comparisons of a json value with a string or bool are false, not an exception, when
  // the value has another type: a wrong type is reported as the field's wrong value.
  const auto field_is = [](const nlohmann::json& object, const char* key, const auto& expected) {
    return object.is_object() && object.contains(key) && object[key] == expected;
  };
  try {
    const nlohmann::json j = io::parse_json(content, std::string(who) + ": '" + path.string() + "'");
    QKV_CHECK(j.is_object(), who << ": the file must hold a JSON object" << where);
    QKV_CHECK(j.contains("model") && j["model"].is_object(),
              who << ": no \"model\" object" << where);
    const auto& model = j["model"];
    QKV_CHECK(model.contains("type") && model["type"] == "Unigram",
              who << ": model.type must be \"Unigram\", got "
                  << (model.contains("type") ? dump(model["type"]) : "nothing") << where);
    // The pipeline's steps, and only those: anything that would change the ids (another
    // normalizer, splitting at "▁", byte fallback, added BOS/EOS) is refused, not ignored.
    QKV_CHECK(j.contains("normalizer") && field_is(j["normalizer"], "type", "NFKC"),
              who << ": normalizer must be {\"type\": \"NFKC\"}, got "
                  << (j.contains("normalizer") ? dump(j["normalizer"]) : "nothing") << where);
    const nlohmann::json* pre = j.contains("pre_tokenizer") ? &j["pre_tokenizer"] : nullptr;
    // Newer tokenizers write prepend_scheme "always" where older ones wrote add_prefix_space.
    const bool metaspace =
        pre != nullptr && field_is(*pre, "type", "Metaspace") &&
        field_is(*pre, "replacement", std::string(kSpaceSymbolUtf8)) &&
        (pre->contains("add_prefix_space") || pre->contains("prepend_scheme")) &&
        (!pre->contains("add_prefix_space") || field_is(*pre, "add_prefix_space", true)) &&
        (!pre->contains("prepend_scheme") || field_is(*pre, "prepend_scheme", "always")) &&
        (!pre->contains("split") || field_is(*pre, "split", false));
    QKV_CHECK(metaspace,
              who << ": pre_tokenizer must be {\"type\": \"Metaspace\", \"replacement\": "
                     "\"▁\", \"add_prefix_space\": true} (no split), got "
                  << (pre != nullptr ? dump(*pre) : "nothing") << where);
    for (const char* field : {"post_processor", "truncation", "padding"})
      QKV_CHECK(!j.contains(field) || j[field].is_null(),
                who << ": " << field << " must be null or absent (the pipeline has none), got "
                    << dump(j[field]) << where);
    QKV_CHECK(
        !model.contains("byte_fallback") || field_is(model, "byte_fallback", false),
        who << ": model.byte_fallback must be false (unknown text is one unknown piece)" << where);

    QKV_CHECK(model.contains("vocab") && model["vocab"].is_array(),
              who << ": model.vocab must be an array of [piece, score] pairs" << where);
    const auto& vocab = model["vocab"];
    std::vector<std::string> pieces;
    std::vector<double> scores;
    pieces.reserve(vocab.size());
    scores.reserve(vocab.size());
    for (std::size_t i = 0; i < vocab.size(); ++i) {
      const auto& e = vocab[i];
      QKV_CHECK(
          e.is_array() && e.size() == 2 && e[0].is_string(),
          who << ": model.vocab[" << i << "] must be [piece, score], got " << dump(e) << where);
      // null is refused: HF tokenizers reads scores as numbers. (The pipeline's vocab.json
      // has null scores, which JavaScript's + adds as 0: a converter writes 0.0 for them.)
      QKV_CHECK(e[1].is_number(),
                who << ": model.vocab[" << i << "] " << text::quoted(e[0].get<std::string>())
                    << ": the score must be a number, got " << dump(e[1]) << where);
      QKV_CHECK(!e[0].get<std::string>().empty(),
                who << ": model.vocab[" << i << "]: the piece is empty" << where);
      pieces.push_back(e[0].get<std::string>());
      scores.push_back(e[1].get<double>());
    }
    QKV_CHECK(model.contains("unk_id") && id_in_range(model["unk_id"], pieces.size()),
              who << ": model.unk_id must be an id in [0, " << pieces.size() << "), got "
                  << (model.contains("unk_id") ? dump(model["unk_id"]) : "nothing") << where);
    const auto unk_id = model["unk_id"].get<std::int64_t>();

    std::vector<std::int64_t> reserved;
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      QKV_CHECK(j["added_tokens"].is_array(), who << ": added_tokens must be an array" << where);
      const auto& added = j["added_tokens"];
      for (std::size_t i = 0; i < added.size(); ++i) {
        const auto& a = added[i];
        const std::string field = "added_tokens[" + std::to_string(i) + "]";
        QKV_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
                      a.contains("content") && a["content"].is_string(),
                  who << ": " << field << " must be {\"id\", \"content\", \"special\"}, got "
                      << dump(a) << where);
        // Only reserved (special) pieces: a non-special added token would be matched
        // literally in the text, which the pipeline never does.
        QKV_CHECK(field_is(a, "special", true),
                  who << ": " << field << " must have \"special\": true, got " << dump(a) << where);
        QKV_CHECK(id_in_range(a["id"], pieces.size()),
                  who << ": " << field << ".id " << dump(a["id"]) << " is out of range [0, "
                      << pieces.size() << ")" << where);
        const auto id = a["id"].get<std::int64_t>();
        QKV_CHECK(a["content"].get<std::string>() == pieces[id],
                  who << ": " << field << ".content "
                      << text::quoted(a["content"].get<std::string>()) << " is not model.vocab["
                      << id << "] " << text::quoted(pieces[id]) << where);
        reserved.push_back(id);
      }
    }
    return from_pieces(std::move(pieces), std::move(scores), unk_id, std::move(reserved));
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string(who) + ": malformed JSON" + where + ": " + e.what());
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.find(where) != std::string::npos) throw;
    throw Error(message + where);  // from_pieces' "piece N" is model.vocab[N]
  }
}

std::int64_t SentencePieceTokenizer::child(std::int64_t node, char32_t symbol) const {
  const auto first = edges_.begin() + edge_begin_[node];
  const auto last = edges_.begin() + edge_begin_[node + 1];
  const auto it = std::lower_bound(first, last, symbol,
                                   [](const auto& edge, char32_t s) { return edge.first < s; });
  return it != last && it->first == symbol ? it->second : -1;
}

std::vector<std::int64_t> SentencePieceTokenizer::encode(std::string_view text) const {
  const std::vector<char32_t> symbols = normalize(text);
  const auto n = static_cast<std::int64_t>(symbols.size());
  // best[e], words[e]: the score of the best segmentation of symbols[0, e) and its last
  // piece. 0 and the unknown id are the pipeline's initial values, and 0 doubles as
  // "unset" below. Ids fit 32 bits (from_pieces checks): half the memory of a long text.
  std::vector<double> best(static_cast<std::size_t>(n) + 1, 0.0);  // (n + 1)
  std::vector<std::int32_t> words(static_cast<std::size_t>(n) + 1,
                                  static_cast<std::int32_t>(unk_id_));  // (n + 1)
  const auto relax = [&](std::int64_t start, std::int64_t end, std::int64_t id, double score) {
    const double total = score + best[start];
    if (best[end] == 0 || total >= best[end]) {
      best[end] = total;
      words[end] = static_cast<std::int32_t>(id);
    }
  };
  // The pipeline loops over end positions and, for each, over start positions in
  // ascending order. Looping over starts in ascending order and relaxing every end a piece
  // reaches applies the same updates to each best[e] in the same order, and best[start] is
  // final when read (every piece ending at start began before it), so the results are
  // identical, with one trie walk per start instead of a lattice.
  for (std::int64_t i = 0; i < n; ++i) {
    bool matched = false;
    std::int64_t node = 0;
    for (std::int64_t k = i; k < n; ++k) {
      node = child(node, symbols[k]);
      if (node < 0) break;
      const std::int64_t id = node_piece_[node];
      if (id < 0) continue;
      relax(i, k + 1, id, scores_[id]);
      matched = true;
    }
    // commonPrefixSearch offers the unknown symbol only where no piece matches at all: from
    // a position whose pieces are all longer than one symbol, nothing reaches i + 1.
    if (!matched) relax(i, i + 1, unk_id_, 0.0);
  }
  // Back from the end by the JavaScript length of each piece; iter may jump below 0.
  std::vector<std::int64_t> reversed;
  for (std::int64_t iter = n; iter > 0;) {
    const std::int64_t id = words[iter];
    reversed.push_back(id);
    iter -= utf16_lengths_[id];
  }
  std::vector<std::int64_t> ids;
  ids.reserve(reversed.size());
  bool previous_unknown = false;
  for (auto it = reversed.rbegin(); it != reversed.rend(); ++it) {
    const bool unknown = *it == unk_id_;
    if (!(unknown && previous_unknown)) ids.push_back(*it);
    previous_unknown = unknown;
  }
  return ids;
}

std::vector<std::string> SentencePieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> tokens;
  for (std::int64_t id : encode(text)) tokens.push_back(pieces_[id]);
  return tokens;
}

std::string SentencePieceTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string out;
  for (std::int64_t id : ids) {
    const std::string& piece = id_to_token(id);
    for (std::size_t i = 0; i < piece.size();) {
      if (std::string_view(piece).substr(i, kSpaceSymbolUtf8.size()) == kSpaceSymbolUtf8) {
        out += ' ';
        i += kSpaceSymbolUtf8.size();
      } else {
        out += piece[i++];
      }
    }
  }
  if (!out.empty() && out.front() == ' ') out.erase(0, 1);
  return out;
}

std::optional<std::int64_t> SentencePieceTokenizer::token_to_id(std::string_view piece) const {
  const auto it = ids_.find(std::string(piece));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string& SentencePieceTokenizer::id_to_token(std::int64_t id) const {
  QKV_CHECK(
      id >= 0 && id < static_cast<std::int64_t>(pieces_.size()),
      "SentencePieceTokenizer: id " << id << " is out of range [0, " << pieces_.size() << ")");
  return pieces_[id];
}

double SentencePieceTokenizer::score(std::int64_t id) const {
  id_to_token(id);  // the range check
  return scores_[id];
}

bool SentencePieceTokenizer::is_reserved(std::int64_t id) const {
  return id >= 0 && id < static_cast<std::int64_t>(reserved_.size()) && reserved_[id];
}

}  // namespace qkv
