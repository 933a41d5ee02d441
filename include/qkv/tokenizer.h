// qkv tokenizers: BERT WordPiece, GPT-2 byte-level BPE and SentencePiece unigram.
//
// WordPieceTokenizer is BertTokenizer (tokenizers' BertNormalizer + BertPreTokenizer +
// WordPiece): clean text, split CJK ideographs, optionally lowercase and strip accents,
// split on whitespace and punctuation, then greedy longest-match-first WordPiece with "##"
// continuations. BpeTokenizer is GPT-2's byte-level BPE: the GPT-2 pre-tokenization
// pattern, every byte mapped through bytes_to_unicode, merges applied by lowest rank.
// SentencePieceTokenizer is the unigram segmentation of the Universal Sentence Encoder
// lite's published pipeline (npm @energetic-ai/embeddings 0.2.0): NFKC, "▁" for spaces,
// and that code's Viterbi pass, whose ids it reproduces exactly (see the class).
//
// All text is UTF-8. encode() of text that is not valid UTF-8 throws qkv::Error naming the
// byte offset; so do missing or malformed vocabulary files (the message names the file and
// the line or entry). Vocabulary files are read whole and must be regular files of at most
// 64 MiB; ids are checked against the number of tokens before anything is sized from them.
// The special tokens of a vocabulary ([CLS], [SEP], [PAD], [MASK], [UNK] for WordPiece;
// "<|endoftext|>" for GPT-2) written literally in the text are kept whole, as Hugging
// Face's tokenizers keep added special tokens. SentencePiece's reserved pieces (<s>, </s>,
// the unknown piece) are never matched from text, as in SentencePiece itself.
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
  // The same from the files' texts, already read; the paths name them in errors.
  static BpeTokenizer from_texts(const std::string& vocab_text, const std::string& merges_text,
                                 const std::filesystem::path& vocab_json,
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

// Byte-level BPE training, the way GPT-2's vocabulary was made (and Hugging Face's
// BpeTrainer with the ByteLevel pre-tokenizer makes one):
//   1. the text is split into GPT-2 pre-tokens (BpeTokenizer::pre_tokenize), and each
//      distinct pre-token counted;
//   2. every byte is a symbol of the bytes_to_unicode alphabet, ids 0..255 in code point
//      order (GPT-2's vocab.json order);
//   3. the adjacent pair of symbols that occurs most often, counted inside the pre-tokens
//      weighted by their counts, becomes a new symbol (id 256, 257, ...; merges never
//      cross pre-tokens), until the vocabulary holds vocab_size tokens or no pair occurs
//      min_frequency times. Ties go to the smallest (left id, right id): deterministic.
//      A pair whose token would stand for more than max_token_bytes bytes is never
//      merged (a run of 3 MB of one digit would otherwise double its token 18 times,
//      into merges.txt lines longer than any tokenizer reads back).
//   4. The special tokens take the last ids.
// The result loads in BpeTokenizer and round-trips any UTF-8 text. Errors (qkv::Error): an
// empty text, one that is not UTF-8 or holds a NUL byte (binary), vocab_size below 257 +
// the special tokens, min_frequency or max_token_bytes below 1, an empty or repeated
// special token.
struct BpeTrainingOptions {
  std::int64_t vocab_size = 0;  // 256 bytes + merges + special tokens
  std::int64_t min_frequency = 2;
  std::int64_t max_token_bytes = 256;  // of text a merged token may stand for
  std::vector<std::string> special_tokens{"<|endoftext|>"};
};

struct BpeVocabulary {
  std::vector<std::string> tokens;                          // id -> token
  std::vector<std::pair<std::string, std::string>> merges;  // rank -> (left, right)

  BpeTokenizer tokenizer() const;
  // DIR/vocab.json ({token: id}, in id order) and DIR/merges.txt ("#version: 0.2", then one
  // "left right" line per merge): GPT-2's files, which BpeTokenizer::from_files reads. Each
  // is written whole or not at all (qkv/files.h); a model directory adds both texts to its
  // ModelFiles instead, so they change with its weights.
  void save(const std::filesystem::path& dir) const;
  std::string vocab_json() const;
  std::string merges_txt() const;
};

BpeVocabulary train_bpe(std::string_view text, const BpeTrainingOptions& options);

// SentencePiece unigram, as the Universal Sentence Encoder lite's published pipeline
// segments text (npm @energetic-ai/embeddings 0.2.0: lib/tokenizer.ts, lib/trie.ts).
// encode(text):
//   1. NFKC (ICU); if the result is not empty, "▁" (U+2581) in front and every U+0020 space
//      replaced by "▁". Other whitespace is kept, nothing is collapsed or stripped.
//   2. The symbols are the code points. At each position every non-reserved piece that is a
//      prefix of the rest is a candidate; where there is none, the single symbol is an
//      unknown candidate (unk_id, score 0).
//   3. Viterbi over end positions, the candidates ending at one in ascending start order:
//      score = piece score + best[start], taken when best[end] == 0 || score >= best[end].
//      A best of exactly 0 counts as unset, and a later candidate wins a tie; a position
//      no candidate reaches keeps best 0 and the unknown id.
//   4. Backtrack from the end by the length of each chosen piece, the unknown one included,
//      in UTF-16 code units (the JavaScript string length): 1 for the USE unknown piece
//      U+FFFD, 2 per character above U+FFFF, so a piece holding one skips a symbol more
//      (the USE vocabulary has none), as the pipeline does.
//   5. Runs of the unknown id merged into one.
// These rules, quirks included, are the pipeline's; the ids agree with it on every input
// whose NFKC is the same under this ICU and the pipeline's (text assigned in Unicode
// versions newer than the linked ICU may normalize differently).
class SentencePieceTokenizer {
 public:
  // tokenizer.json as qkv's converter writes it: normalizer {"type": "NFKC"}, pre_tokenizer
  // Metaspace ("▁", add_prefix_space true), model {"type": "Unigram", "unk_id", "vocab":
  // [[piece, score], ...]}, added_tokens [{"id", "content", "special": true}] for the
  // reserved pieces. Anything else is an Error naming the file and the field.
  static SentencePieceTokenizer from_tokenizer_json(const std::filesystem::path& path);
  // pieces[i] has id i and scores[i] (finite). Pieces are valid UTF-8 and not empty; the
  // same piece may appear twice (the USE vocabulary has "”5" three times): the later id
  // is the one matched, as the pipeline's trie keeps the last inserted. unk_id and the ids
  // in `reserved` are never matched from text.
  static SentencePieceTokenizer from_pieces(std::vector<std::string> pieces,
                                            std::vector<double> scores, std::int64_t unk_id,
                                            std::vector<std::int64_t> reserved);

  std::vector<std::int64_t> encode(std::string_view text) const;
  std::vector<std::string> tokenize(std::string_view text) const;  // the pieces of encode()
  // The pieces joined, "▁" as a space, the leading space (the one encode adds) removed.
  std::string decode(const std::vector<std::int64_t>& ids) const;

  // The id a piece is matched as (the later of duplicates), reserved pieces included.
  std::optional<std::int64_t> token_to_id(std::string_view piece) const;
  const std::string& id_to_token(std::int64_t id) const;  // throws for an id out of range
  double score(std::int64_t id) const;                    // throws for an id out of range
  bool is_reserved(std::int64_t id) const;
  std::size_t vocab_size() const { return pieces_.size(); }
  std::int64_t unk_id() const { return unk_id_; }

 private:
  SentencePieceTokenizer() = default;
  std::int64_t child(std::int64_t node, char32_t symbol) const;

  std::vector<std::string> pieces_;                    // id -> piece
  std::vector<double> scores_;                         // id -> score
  std::vector<std::int64_t> utf16_lengths_;            // id -> JavaScript length of the piece
  std::vector<bool> reserved_;                         // id -> never matched from text
  std::unordered_map<std::string, std::int64_t> ids_;  // piece -> id (the later of duplicates)
  // The trie of the matchable pieces over code points, flattened: node k's children are
  // edges_[edge_begin_[k] .. edge_begin_[k + 1]), sorted by symbol; node 0 is the root.
  std::vector<std::int64_t> edge_begin_;                  // (nodes + 1)
  std::vector<std::pair<char32_t, std::int64_t>> edges_;  // (edges) symbol, child node
  std::vector<std::int64_t> node_piece_;                  // (nodes) piece id ending here, or -1
  std::int64_t unk_id_ = 0;
};

// A tokenizer directory as Hugging Face lays it out: tokenizer.json if present (model.type
// "WordPiece", "BPE" or "Unigram"), else vocab.txt (WordPiece, lowercased) or vocab.json +
// merges.txt (byte-level BPE).
class Tokenizer {
 public:
  static Tokenizer load(const std::filesystem::path& directory);
  explicit Tokenizer(WordPieceTokenizer t) : impl_(std::move(t)) {}
  explicit Tokenizer(BpeTokenizer t) : impl_(std::move(t)) {}
  explicit Tokenizer(SentencePieceTokenizer t) : impl_(std::move(t)) {}

  // WordPiece: [CLS] text [SEP]; BPE and SentencePiece: the plain ids.
  std::vector<std::int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::size_t vocab_size() const;
  // Any of the three: the vocabulary string of an id and back.
  std::optional<std::int64_t> token_to_id(std::string_view token) const;
  const std::string& id_to_token(std::int64_t id) const;

  const WordPieceTokenizer* wordpiece() const { return std::get_if<WordPieceTokenizer>(&impl_); }
  const BpeTokenizer* bpe() const { return std::get_if<BpeTokenizer>(&impl_); }
  const SentencePieceTokenizer* sentencepiece() const {
    return std::get_if<SentencePieceTokenizer>(&impl_);
  }

 private:
  std::variant<WordPieceTokenizer, BpeTokenizer, SentencePieceTokenizer> impl_;
};

}  // namespace qkv
