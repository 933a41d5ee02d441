// qkv tokenizers: BERT WordPiece and GPT-2 byte-level BPE, with Hugging Face semantics.
//
// WordPieceTokenizer is BertTokenizer (tokenizers' BertNormalizer + BertPreTokenizer +
// WordPiece): clean text, split CJK ideographs, optionally lowercase and strip accents,
// split on whitespace and punctuation, then greedy longest-match-first WordPiece with "##"
// continuations. BpeTokenizer is GPT-2's byte-level BPE: the GPT-2 pre-tokenization
// pattern, every byte mapped through bytes_to_unicode, merges applied by lowest rank.
//
// All text is UTF-8. encode() of text that is not valid UTF-8 throws qkv::Error naming the
// byte offset; so do missing or malformed vocabulary files (the message names the file and
// the line or entry). Vocabulary files are read whole and must be regular files of at most
// 64 MiB; ids are checked against the number of tokens before anything is sized from them.
// The special tokens of a vocabulary ([CLS], [SEP], [PAD], [MASK], [UNK] for WordPiece;
// "<|endoftext|>" for GPT-2) written literally in the text are kept whole, as Hugging
// Face's tokenizers keep added special tokens.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace qkv {

// One encoded sequence; the three vectors have the same length.
struct Encoding {
  std::vector<std::int64_t> ids;             // (L) vocabulary ids, special tokens included
  std::vector<std::int64_t> token_type_ids;  // (L) 0 for the first segment, 1 for the second
  std::vector<std::string> tokens;           // (L) the vocabulary strings of ids
};

class WordPieceTokenizer {
 public:
  // vocab.txt: one token per line, id = line number (0-based). lowercase = do_lower_case,
  // which also strips accents (NFD, drop Mn), as BertTokenizer does. Every line must be
  // valid UTF-8 and at most 64 KiB; a token that appears twice is an error (BertTokenizer
  // lets the later id win, leaving the earlier one unreachable).
  static WordPieceTokenizer from_vocab_txt(const std::filesystem::path& path,
                                           bool lowercase = true);
  // tokenizer.json with model.type "WordPiece"; lowercase / strip_accents come from a
  // BertNormalizer (or Lowercase / StripAccents normalizers) when present.
  static WordPieceTokenizer from_tokenizer_json(const std::filesystem::path& path);
  // tokens[i] has id i, each token once. The vocabulary must hold [UNK], [CLS] and [SEP].
  static WordPieceTokenizer from_vocab(std::vector<std::string> tokens, bool lowercase = true,
                                       std::optional<bool> strip_accents = std::nullopt);

  // Word pieces of text, without [CLS]/[SEP].
  std::vector<std::string> tokenize(std::string_view text) const;
  // [CLS] text [SEP], token_type_ids all 0.
  Encoding encode(std::string_view text) const;
  // [CLS] a [SEP] b [SEP]; token_type_ids 0 up to and including the first [SEP], then 1.
  Encoding encode_pair(std::string_view a, std::string_view b) const;
  // Tokens joined by spaces with "##" pieces glued to the one before (" ##" removed), as
  // BertTokenizer.convert_tokens_to_string. No clean_up_tokenization_spaces.
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special = true) const;

  std::optional<std::int64_t> token_to_id(std::string_view token) const;
  const std::string& id_to_token(std::int64_t id) const;  // throws for an id out of range
  std::size_t vocab_size() const { return tokens_.size(); }
  bool lowercase() const { return lowercase_; }
  bool strip_accents() const { return strip_accents_; }
  std::int64_t unk_id() const { return unk_id_; }
  std::int64_t cls_id() const { return cls_id_; }
  std::int64_t sep_id() const { return sep_id_; }
  std::optional<std::int64_t> pad_id() const { return token_to_id("[PAD]"); }
  std::optional<std::int64_t> mask_id() const { return token_to_id("[MASK]"); }
  bool is_special(std::int64_t id) const;

 private:
  WordPieceTokenizer() = default;
  std::vector<std::int64_t> tokenize_ids(std::string_view text) const;
  void wordpiece(std::string_view word, std::vector<std::int64_t>& ids) const;

  std::vector<std::string> tokens_;                    // id -> token
  std::unordered_map<std::string, std::int64_t> ids_;  // token -> id
  std::vector<std::string> specials_;                  // kept whole when met in text
  bool lowercase_ = true;
  bool strip_accents_ = true;
  std::string continuation_ = "##";
  std::size_t max_chars_per_word_ = 100;  // longer words become [UNK]
  std::size_t max_token_bytes_ = 0;       // the longest token: no piece can be longer
  std::int64_t unk_id_ = 0, cls_id_ = 0, sep_id_ = 0;
};

class BpeTokenizer {
 public:
  // GPT-2's files: vocab.json (token -> id, a.k.a. encoder.json) and merges.txt (vocab.bpe:
  // an optional "#version" line, then one "a b" merge per line, rank = order; lines valid
  // UTF-8).
  static BpeTokenizer from_files(const std::filesystem::path& vocab_json,
                                 const std::filesystem::path& merges_txt);
  // tokenizer.json with model.type "BPE"; merges as "a b" strings or [a, b] pairs.
  static BpeTokenizer from_tokenizer_json(const std::filesystem::path& path);
  // Tokens are in the bytes_to_unicode alphabet ("Ġ" for a space). The N tokens' ids must be
  // 0..N-1, each once (checked before anything is sized from them), and every merge's
  // parts and result must be in the vocabulary (Error names the offending one).
  static BpeTokenizer from_vocab_and_merges(
      const std::map<std::string, std::int64_t>& vocab,
      const std::vector<std::pair<std::string, std::string>>& merges);

  std::vector<std::int64_t> encode(std::string_view text) const;
  // The exact bytes the ids stand for (not necessarily valid UTF-8 for a partial sequence).
  std::string decode(const std::vector<std::int64_t>& ids) const;
  // The GPT-2 pre-tokens of text (UTF-8 pieces, before BPE), for tests and inspection.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  std::optional<std::int64_t> token_to_id(std::string_view token) const;
  const std::string& id_to_token(std::int64_t id) const;
  std::size_t vocab_size() const { return tokens_.size(); }
  std::optional<std::int64_t> eos_id() const { return token_to_id("<|endoftext|>"); }

 private:
  BpeTokenizer() = default;
  void bpe(std::string_view piece, std::vector<std::int64_t>& ids) const;

  std::vector<std::string> tokens_;                    // id -> token
  std::unordered_map<std::string, std::int64_t> ids_;  // token -> id
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::int64_t, std::int64_t>> merges_;
  std::int64_t byte_ids_[256] = {};    // id of each byte's symbol, -1 if absent
  std::vector<std::string> specials_;  // kept whole when met in text
};

// A tokenizer directory as Hugging Face lays it out: tokenizer.json if present, else
// vocab.txt (WordPiece, lowercased) or vocab.json + merges.txt (byte-level BPE).
class Tokenizer {
 public:
  static Tokenizer load(const std::filesystem::path& directory);
  explicit Tokenizer(WordPieceTokenizer t) : impl_(std::move(t)) {}
  explicit Tokenizer(BpeTokenizer t) : impl_(std::move(t)) {}

  // WordPiece: [CLS] text [SEP]; BPE: the plain ids.
  std::vector<std::int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::size_t vocab_size() const;

  const WordPieceTokenizer* wordpiece() const { return std::get_if<WordPieceTokenizer>(&impl_); }
  const BpeTokenizer* bpe() const { return std::get_if<BpeTokenizer>(&impl_); }

 private:
  std::variant<WordPieceTokenizer, BpeTokenizer> impl_;
};

}  // namespace qkv
