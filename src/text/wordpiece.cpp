// BERT WordPiece: Hugging Face's BertNormalizer + BertPreTokenizer + WordPiece model
// (google-research/bert tokenization.py, BasicTokenizer and WordpieceTokenizer).
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/json_bounded.h"
#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "text/unicode.h"

namespace qkv {

namespace {

constexpr const char* kSpecialNames[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

// BasicTokenizer on one stretch of text without special tokens: the words, each already
// split at punctuation, lowercased and accent-stripped as configured.
std::vector<std::u32string> basic_tokenize(std::string_view text, bool lowercase, bool strip) {
  const std::vector<char32_t> cps = text::decode_utf8(text, "WordPieceTokenizer::encode");
  // _clean_text and _tokenize_chinese_chars: drop NUL, U+FFFD and controls, map whitespace
  // to a space, surround CJK ideographs with spaces.
  std::u32string cleaned;
  cleaned.reserve(cps.size());
  for (char32_t cp : cps) {
    if (cp == 0 || cp == 0xFFFD || text::is_bert_control(cp)) continue;
    if (text::is_bert_whitespace(cp)) {
      cleaned.push_back(U' ');
    } else if (text::is_cjk_ideograph(cp)) {
      cleaned.push_back(U' ');
      cleaned.push_back(cp);
      cleaned.push_back(U' ');
    } else {
      cleaned.push_back(cp);
    }
  }
  // whitespace_tokenize is Python's str.split(): any str.isspace() character separates.
  std::vector<std::u32string> words;
  std::size_t i = 0;
  while (i < cleaned.size()) {
    while (i < cleaned.size() && text::is_py_space(cleaned[i])) ++i;
    std::size_t j = i;
    while (j < cleaned.size() && !text::is_py_space(cleaned[j])) ++j;
    if (j == i) break;
    std::u32string word = cleaned.substr(i, j - i);
    i = j;
    if (lowercase) word = text::to_lower(word);
    if (strip) word = text::strip_accents(word);
    // _run_split_on_punc: every punctuation character is a word of its own.
    std::u32string current;
    for (char32_t cp : word) {
      if (text::is_bert_punctuation(cp)) {
        if (!current.empty()) words.push_back(std::move(current));
        current.clear();
        words.push_back(std::u32string(1, cp));
      } else {
        current.push_back(cp);
      }
    }
    if (!current.empty()) words.push_back(std::move(current));
  }
  return words;
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_vocab(std::vector<std::string> tokens, bool lowercase,
                                                  std::optional<bool> strip_accents) {
  WordPieceTokenizer t;
  t.lowercase_ = lowercase;
  t.strip_accents_ = strip_accents.value_or(lowercase);
  QKV_CHECK(tokens.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
            "WordPieceTokenizer: " << tokens.size() << " tokens, more than 2^31 - 1");
  t.ids_.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    // A repeated token is refused: BertTokenizer's load_vocab lets the last id win, which
    // leaves the earlier id unreachable by encoding, a sign of a damaged vocabulary.
    const auto [it, fresh] = t.ids_.emplace(tokens[i], static_cast<std::int64_t>(i));
    QKV_CHECK(fresh, "WordPieceTokenizer: the token " << text::quoted(tokens[i])
                                                      << " appears twice, with the ids "
                                                      << it->second << " and " << i
                                                      << " (lines " << it->second + 1 << " and "
                                                      << i + 1 << " of a vocab.txt); each token "
                                                      << "must appear once");
    t.max_token_bytes_ = std::max(t.max_token_bytes_, tokens[i].size());
  }
  t.tokens_ = std::move(tokens);
  for (const char* name : {"[UNK]", "[CLS]", "[SEP]"})
    QKV_CHECK(t.ids_.count(name) != 0, "WordPieceTokenizer: the vocabulary ("
                                           << t.tokens_.size() << " tokens) has no " << name
                                           << " token");
  t.unk_id_ = t.ids_.at("[UNK]");
  t.cls_id_ = t.ids_.at("[CLS]");
  t.sep_id_ = t.ids_.at("[SEP]");
  for (const char* name : kSpecialNames)
    if (t.ids_.count(name) != 0) t.specials_.emplace_back(name);
  return t;
}

WordPieceTokenizer WordPieceTokenizer::from_vocab_txt(const std::filesystem::path& path,
                                                      bool lowercase) {
  const std::string content = text::read_text_file(path, "WordPieceTokenizer::from_vocab_txt");
  std::vector<std::string> tokens;
  std::size_t start = 0;
  while (start < content.size()) {
    std::size_t end = content.find('\n', start);
    if (end == std::string::npos) end = content.size();
    std::string line = content.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();  // BertTokenizer strips "\n" only;
    const std::size_t line_number = tokens.size() + 1;          // \r\n files exist in the wild
    // BertTokenizer reads the file as UTF-8; a line that is not (or is far longer than any
    // token) means this is not a vocabulary, e.g. a checkpoint passed by mistake.
    QKV_CHECK(line.size() <= text::kMaxTokenBytes,
              "WordPieceTokenizer::from_vocab_txt: line " << line_number << " is " << line.size()
                  << " bytes long, longer than any token (limit " << text::kMaxTokenBytes
                  << "; is this a vocab.txt?) (file '" << path.string() << "')");
    try {
      text::decode_utf8(line, "WordPieceTokenizer::from_vocab_txt");
    } catch (const Error&) {
      throw Error("WordPieceTokenizer::from_vocab_txt: line " + std::to_string(line_number) +
                  " " + text::quoted(line) + " is not valid UTF-8 (file '" + path.string() +
                  "')");
    }
    tokens.push_back(std::move(line));
    start = end + 1;
  }
  try {
    return from_vocab(std::move(tokens), lowercase);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (file '" + path.string() + "')");
  }
}

WordPieceTokenizer WordPieceTokenizer::from_tokenizer_json(const std::filesystem::path& path) {
  const char* who = "WordPieceTokenizer::from_tokenizer_json";
  const std::string content = text::read_text_file(path, who);
  const std::string where = " in '" + path.string() + "'";
  nlohmann::json j;
  try {
    j = io::parse_json(content, std::string(who) + ": '" + path.string() + "'");
    QKV_CHECK(j.contains("model") && j["model"].is_object(),
              who << ": no \"model\" object" << where);
    const auto& model = j["model"];
    const std::string type = model.value("type", std::string("WordPiece"));
    QKV_CHECK(type == "WordPiece",
              who << ": model.type must be \"WordPiece\", got \"" << type << "\"" << where);
    QKV_CHECK(model.contains("vocab") && model["vocab"].is_object(),
              who << ": model.vocab must be an object of token -> id" << where);
    const auto& vocab = model["vocab"];
    std::vector<std::string> tokens(vocab.size());
    std::vector<bool> seen(vocab.size(), false);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      QKV_CHECK(it.value().is_number_integer(),
                who << ": model.vocab[" << text::quoted(it.key()) << "] must be an integer id"
                    << where);
      // An unsigned id beyond int64 reads as negative: refused by the same range check.
      const auto id = it.value().get<std::int64_t>();
      QKV_CHECK(id >= 0 && id < static_cast<std::int64_t>(tokens.size()) && !seen[id],
                who << ": model.vocab ids must be 0.." << tokens.size() - 1 << " each once; "
                    << text::quoted(it.key()) << " has id " << id << where);
      seen[id] = true;
      tokens[id] = it.key();
    }
    // Normalizer: BertNormalizer {lowercase, strip_accents (null: follows lowercase)}, or a
    // Sequence of Lowercase / NFD / StripAccents / BertNormalizer. None: text kept as is.
    bool lowercase = false;
    std::optional<bool> strip;
    std::vector<nlohmann::json> normalizers;
    if (j.contains("normalizer") && !j["normalizer"].is_null()) {
      const auto& n = j["normalizer"];
      if (n.value("type", std::string()) == "Sequence" && n.contains("normalizers"))
        for (const auto& m : n["normalizers"]) normalizers.push_back(m);
      else
        normalizers.push_back(n);
    }
    for (const auto& n : normalizers) {
      const std::string ntype = n.value("type", std::string());
      if (ntype == "BertNormalizer") {
        lowercase = n.value("lowercase", true);
        if (n.contains("strip_accents") && n["strip_accents"].is_boolean())
          strip = n["strip_accents"].get<bool>();
      } else if (ntype == "Lowercase") {
        lowercase = true;
      } else if (ntype == "StripAccents") {
        strip = true;
      } else if (ntype != "NFD" && ntype != "NFC" && ntype != "NFKC" && ntype != "NFKD") {
        throw Error(std::string(who) + ": unsupported normalizer type \"" + ntype + "\"" + where);
      }
    }
    WordPieceTokenizer t = from_vocab(std::move(tokens), lowercase, strip);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const std::string unk = model["unk_token"].get<std::string>();
      QKV_CHECK(t.ids_.count(unk) != 0,
                who << ": model.unk_token \"" << unk << "\" is not in model.vocab" << where);
      t.unk_id_ = t.ids_.at(unk);
    }
    if (model.contains("continuing_subword_prefix") &&
        model["continuing_subword_prefix"].is_string())
      t.continuation_ = model["continuing_subword_prefix"].get<std::string>();
    if (model.contains("max_input_chars_per_word") &&
        model["max_input_chars_per_word"].is_number_unsigned())
      t.max_chars_per_word_ = model["max_input_chars_per_word"].get<std::size_t>();
    return t;
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string(who) + ": malformed JSON" + where + ": " + e.what());
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.find(path.string()) != std::string::npos) throw;
    throw Error(message + where);
  }
}

// WordpieceTokenizer.tokenize for one word: greedy longest-match-first.
void WordPieceTokenizer::wordpiece(std::string_view word, std::vector<std::int64_t>& ids) const {
  std::vector<std::size_t> offsets;  // byte offset of each code point, then word.size()
  text::decode_utf8(word, "WordPieceTokenizer::encode", &offsets);
  const std::size_t chars = offsets.size() - 1;
  if (chars > max_chars_per_word_) {
    ids.push_back(unk_id_);
    return;
  }
  const std::size_t first = ids.size();
  std::string candidate;
  std::size_t start = 0;
  while (start < chars) {
    // No piece is longer than the longest token: start the search there, not at the end
    // of the word. The same pieces are found, and a word of n characters costs
    // O(n · longest token) instead of O(n³) when max_input_chars_per_word is large.
    const std::size_t prefix = start > 0 ? continuation_.size() : 0;
    if (prefix > max_token_bytes_) {
      ids.resize(first);
      ids.push_back(unk_id_);
      return;
    }
    const std::size_t limit = offsets[start] + (max_token_bytes_ - prefix);
    std::size_t end = static_cast<std::size_t>(
        std::upper_bound(offsets.begin() + static_cast<std::ptrdiff_t>(start),
                         offsets.begin() + static_cast<std::ptrdiff_t>(chars) + 1, limit) -
        offsets.begin() - 1);
    std::int64_t found = -1;
    while (start < end) {
      candidate.assign(start > 0 ? continuation_ : std::string());
      candidate.append(word.substr(offsets[start], offsets[end] - offsets[start]));
      const auto it = ids_.find(candidate);
      if (it != ids_.end()) {
        found = it->second;
        break;
      }
      --end;
    }
    if (found < 0) {  // no piece matches: the whole word is unknown
      ids.resize(first);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(found);
    start = end;
  }
}

std::vector<std::int64_t> WordPieceTokenizer::tokenize_ids(std::string_view text) const {
  std::vector<std::int64_t> ids;
  for (const text::Segment& segment : text::split_specials(text, specials_)) {
    if (segment.special) {
      ids.push_back(ids_.at(std::string(segment.text)));
      continue;
    }
    for (const std::u32string& word : basic_tokenize(segment.text, lowercase_, strip_accents_)) {
      std::string utf8;
      for (char32_t cp : word) text::append_utf8(utf8, cp);
      wordpiece(utf8, ids);
    }
  }
  return ids;
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  const std::vector<std::int64_t> ids = tokenize_ids(text);
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::int64_t id : ids) tokens.push_back(tokens_[id]);
  return tokens;
}

Encoding WordPieceTokenizer::encode(std::string_view text) const {
  Encoding e;
  e.ids.push_back(cls_id_);
  for (std::int64_t id : tokenize_ids(text)) e.ids.push_back(id);
  e.ids.push_back(sep_id_);
  e.token_type_ids.assign(e.ids.size(), 0);
  for (std::int64_t id : e.ids) e.tokens.push_back(tokens_[id]);
  return e;
}

Encoding WordPieceTokenizer::encode_pair(std::string_view a, std::string_view b) const {
  Encoding e = encode(a);
  std::vector<std::int64_t> second = tokenize_ids(b);
  second.push_back(sep_id_);
  for (std::int64_t id : second) {
    e.ids.push_back(id);
    e.tokens.push_back(tokens_[id]);
  }
  e.token_type_ids.resize(e.ids.size(), 1);
  return e;
}

bool WordPieceTokenizer::is_special(std::int64_t id) const {
  if (id < 0 || id >= static_cast<std::int64_t>(tokens_.size())) return false;
  for (const std::string& s : specials_)
    if (tokens_[id] == s) return true;
  return false;
}

std::string WordPieceTokenizer::decode(const std::vector<std::int64_t>& ids,
                                       bool skip_special) const {
  // " ".join(tokens).replace(" ##", "").strip(), as BertTokenizer.convert_tokens_to_string.
  std::string out;
  bool first = true;
  for (std::int64_t id : ids) {
    const std::string& token = id_to_token(id);
    if (skip_special && is_special(id)) continue;
    if (!first && token.starts_with(continuation_) && !continuation_.empty()) {
      out += token.substr(continuation_.size());
    } else {
      if (!first) out += ' ';
      out += token;
    }
    first = false;
  }
  return out;
}

std::optional<std::int64_t> WordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string& WordPieceTokenizer::id_to_token(std::int64_t id) const {
  QKV_CHECK(id >= 0 && id < static_cast<std::int64_t>(tokens_.size()),
            "WordPieceTokenizer: id " << id << " is out of range [0, " << tokens_.size() << ")");
  return tokens_[id];
}

}  // namespace qkv
