// BM25 over a corpus' lines: the lexical ranking of `qkv search --lexical` and one half of
// `--hybrid` (search.h). Okapi BM25 as Robertson & Zaragoza write it ("The Probabilistic
// Relevance Framework: BM25 and Beyond", 2009, eq. 3.15), with Lucene's idf, which is never
// negative:
//
//   score(D, Q) = Σ_{t ∈ Q} idf(t) · f(t, D) · (k1 + 1) / (f(t, D) + k1 · (1 − b + b · |D| / avgdl))
//   idf(t)      = ln(1 + (N − n(t) + 0.5) / (n(t) + 0.5))
//
// f(t, D): how often term t occurs in line D; |D|: D's terms; N: the documents (lines with
// at least one term); avgdl: their mean |D|; n(t): the documents holding t. Q is the query's
// terms as a set (a term typed twice counts once). k1 = 1.2 and b = 0.75, the usual
// defaults (Manning, Raghavan & Schütze, "Introduction to Information Retrieval", 11.4.3).
//
// Terms (lexical_terms): the maximal runs of letters and digits (Unicode \p{L} and \p{N},
// everything else separates), each lowercased (ICU's full lowercase, as Python's
// str.lower()) and its plural taken off by Harman's S stemmer ("How effective is
// suffixing?", JASIS 42(1), 1991), on terms of 3 or more characters: "ies" → "y" unless
// "aies" or "eies"; else "es" → "e" unless "aes", "ees" or "oes"; else a final "s" goes
// unless "us" or "ss" — so "files" and "file", "photos" and "photo", "libraries" and
// "library" match. No stop words: idf weighs "a" and "the" near zero.
//
// In the index file (search.h) the index is five integer tensors beside the embeddings:
//   bm25.terms      U8  (bytes)  the V terms, sorted, each followed by '\n'
//   bm25.postings   I32 (V)      n(t): how many lines hold each term
//   bm25.lines      I32 (P)      each term's lines, ascending (0-based), terms in order
//   bm25.counts     I32 (P)      f(t, D) at each of them
//   bm25.lengths    I32 (N)      |D| of every corpus line (0: not a document)
// and the metadata "lexical" = kTermsVersion, which names the rules above: an index made
// by other rules is made again.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/safetensors.h"

namespace qkv {

// The terms of text, in order, with repeats (see the top of the file). Throws qkv::Error
// for text that is not UTF-8.
std::vector<std::string> lexical_terms(std::string_view text);

class Bm25Index {
 public:
  static constexpr double kK1 = 1.2;
  static constexpr double kB = 0.75;
  static constexpr const char* kTermsVersion = "bm25/1: letters and digits, lowercase, S stemmer";

  // The index of every line (a line without a term is no document and never ranked).
  static Bm25Index build(const std::vector<std::string>& lines);

  // The index held by an index file of `lines` corpus lines, into *out: false when the file
  // has none, or one made by other rules (an older qkv's index). A damaged one throws
  // qkv::Error "<what> is damaged (...): rebuild it (qkv search --reindex)".
  static bool read(const SafeTensors& file, std::int64_t lines, const std::string& what, Bm25Index* out);
  // The tensors and the metadata value (kTermsVersion) that read() reads back.
  std::vector<std::pair<std::string, RawTensor>> tensors() const;

  // (BM25 score, 0-based line) of every line that holds a term of the query, best first;
  // equal scores in line order. Empty when no line does. A query without a term (nothing
  // but spaces and punctuation) throws qkv::Error: it has nothing for BM25 to match.
  std::vector<std::pair<double, std::int64_t>> rank(std::string_view query) const;

  std::int64_t lines() const { return static_cast<std::int64_t>(lengths_.size()); }
  std::int64_t documents() const { return documents_; }
  std::int64_t vocabulary() const { return static_cast<std::int64_t>(terms_.size()); }
  std::int64_t postings() const { return static_cast<std::int64_t>(lines_.size()); }
  double average_length() const { return average_length_; }
  // What the index holds in memory: its arrays and the terms' characters.
  std::int64_t memory_bytes() const;

 private:
  void finish();  // documents_ and average_length_ from lengths_

  std::vector<std::string> terms_;      // (V) sorted, unique
  std::vector<std::int64_t> starts_;    // (V + 1) term t's postings are [starts_[t], starts_[t + 1])
  std::vector<std::int32_t> lines_;     // (P) 0-based line of each posting, ascending per term
  std::vector<std::int32_t> counts_;    // (P) f(t, D) of each posting, >= 1
  std::vector<std::int32_t> lengths_;   // (N) |D| of each line
  std::int64_t documents_ = 0;          // lines with a term
  double average_length_ = 0;           // their mean length
};

}  // namespace qkv
