// qkv semantic search: the query/key/value retrieval of the attention explanations, with
// a pretrained sentence encoder. Each line of a corpus is a key (its embedding), the
// query is embedded the same way, and the hits are the lines whose keys score highest —
// cosine similarity, a plain dot product since the embeddings are unit vectors.
//
//   const auto model = models::UseLiteModel::load("use-lite");
//   SearchIndex index = SearchIndex::open_or_build(model, "use-lite", "corpus.txt",
//                                                  "corpus.txt.qkv-index", progress);
//   for (const SearchHit& hit : index.search(model, "a query", 10)) ...
//
// The index file is a .safetensors file: "embeddings" (N, O) f32, one row per corpus line
// (blank lines have a zero row and are never hits), the lexical index of the same lines
// (bm25.h: "bm25.*" integer tensors), and metadata naming the format, the SHA-256 of the
// corpus's bytes and the model's fingerprint (the SHA-256 of its config.json,
// model.safetensors and tokenizer.json). open_or_build reuses the file only while both
// match: a changed corpus is indexed again (and the file rewritten), an index of another
// model or a damaged file is an error naming it (it is not overwritten unless asked). An
// index without its lexical part (written before qkv had one) gets it: the lines' BM25
// index is built (a second or less; the embeddings are kept) and the file rewritten.
//
// Three rankings (SearchRanking): dense, the cosine similarity of the embeddings; lexical,
// BM25 (bm25.h); hybrid, the two fused by reciprocal rank fusion (reciprocal_rank_fusion).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/files.h"  // file_sha256
#include "search/bm25.h"
#include "qkv/options.h"
#include "qkv/tensor.h"
#include "qkv/use_lite.h"

namespace qkv {

// How hits are ranked, and so what their score is.
enum class SearchRanking {
  dense,    // cosine similarity of the embeddings, in [-1, 1]
  lexical,  // BM25 (bm25.h), > 0
  hybrid,   // reciprocal rank fusion of the two: Σ 1 / (60 + rank), in (0, 2/61]
};
// What a hit's score is, as the CLI's JSON and Python's hits name it: "cosine", "bm25", "rrf".
const char* score_name(SearchRanking ranking);

struct SearchHit {
  std::int64_t rank = 0;  // 1-based
  float score = 0;        // as the ranking scores (SearchRanking)
  std::int64_t line = 0;  // 1-based line number in the corpus
  std::string text;       // that line
};

// Lines embedded so far, of the corpus' total, for a progress bar.
using IndexProgress = std::function<void(std::int64_t done, std::int64_t total)>;

class SearchIndex {
 public:
  // The corpus' lines (io::LineReader: UTF-8, no NUL, lines at most 1 MiB) embedded by
  // `model`, in batches, calling progress after each. A corpus without a non-blank line
  // is an error.
  static SearchIndex build(const models::UseLiteModel& model, const std::string& model_dir,
                           const std::string& corpus_path, const IndexProgress& progress = {});
  // Reuses index_path when it holds this corpus' index by this model (its hashes match);
  // builds it (and writes index_path) when the file does not exist, when the corpus has
  // changed, or when `rebuild`. An index file of another model or one that does not parse
  // throws qkv::Error naming it, unless `rebuild`. `built`, when given, says which happened.
  // A file at index_path that is not a qkv search index is refused, `rebuild` or not
  // (check_index_file): open_or_build only ever replaces an index or creates the file.
  // `lexical_added`, when given, says whether an index without its lexical part got one.
  static SearchIndex open_or_build(const models::UseLiteModel& model, const std::string& model_dir,
                                   const std::string& corpus_path, const std::string& index_path,
                                   const IndexProgress& progress = {}, bool rebuild = false,
                                   bool* built = nullptr, bool* lexical_added = nullptr);
  // Whether index_path holds a qkv search index (true: a whole one, or one that starts as
  // an index does and is damaged past that) or nothing (false); anything else throws
  // qkv::Error saying it is not a qkv search index, judged by its header (safetensors
  // metadata format "qkv-search-index/1"): a corpus, a model's weights, /dev/null, a FIFO.
  static bool check_index_file(const std::string& index_path);

  void save(const std::string& path) const;

  // The top_k lines (fewer when the corpus has fewer non-blank lines) by cosine similarity
  // to the query's embedding, best first; equal scores in line order. top_k >= 1.
  // lexical and hybrid rank as search_lexical and search_hybrid do.
  std::vector<SearchHit> search(const models::UseLiteModel& model, std::string_view query,
                                std::int64_t top_k, SearchRanking ranking = SearchRanking::dense) const;
  // The same for an embedding already computed: query (O) unit vector.
  std::vector<SearchHit> search(const Tensor& query, std::int64_t top_k) const;
  // The top_k lines by BM25 (fewer when fewer lines share a term with the query; none when
  // none does). A query without a term (bm25.h) throws qkv::Error.
  std::vector<SearchHit> search_lexical(std::string_view query, std::int64_t top_k) const;
  // The top_k lines by reciprocal rank fusion of the whole dense ranking (query_embedding,
  // the (O) embedding of query) and the BM25 ranking of `query`. A query without a term
  // throws qkv::Error, as search_lexical.
  std::vector<SearchHit> search_hybrid(const Tensor& query_embedding, std::string_view query,
                                       std::int64_t top_k) const;

  const Tensor& embeddings() const { return embeddings_; }  // (N, O)
  const std::vector<std::string>& lines() const { return lines_; }
  const Bm25Index& lexical() const { return lexical_; }
  std::int64_t clipped_lines() const { return clipped_; }  // lines longer than max_length tokens

 private:
  // build() with the model's fingerprint and the corpus' SHA-256 already computed.
  static SearchIndex embed_corpus(const models::UseLiteModel& model, std::string fingerprint,
                                  const std::string& corpus_path, std::string corpus_sha,
                                  const IndexProgress& progress);

  // (score, 0-based line) of every non-blank line by cosine similarity, the best top_k first
  // (all of them sorted when top_k covers them); equal scores in line order.
  std::vector<std::pair<double, std::int64_t>> dense_ranking(const Tensor& query, std::int64_t top_k) const;
  std::vector<SearchHit> hits(const std::vector<std::pair<double, std::int64_t>>& ranked, std::int64_t top_k) const;

  Tensor embeddings_;               // (N, O), a zero row for each blank line
  std::vector<std::string> lines_;  // N corpus lines
  Bm25Index lexical_;               // the same lines' BM25 index
  std::string corpus_sha256_, model_fingerprint_;
  std::int64_t clipped_ = 0;
};

// Hex SHA-256 over the SHA-256s of dir/config.json, dir/model.safetensors and
// dir/tokenizer.json: changes when any of them does.
std::string model_fingerprint(const std::string& model_dir);

// Reciprocal rank fusion (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms
// Condorcet and individual Rank Learning Methods", SIGIR 2009): each item's score is
// Σ 1 / (k + r) over the rankings that hold it, r its 1-based rank there, k = 60 as in the
// paper. rankings: items (0-based lines) best first, each at most once per ranking. ->
// (score, item) of every item of any ranking, best first; equal scores in item order.
std::vector<std::pair<double, std::int64_t>> reciprocal_rank_fusion(
    const std::vector<std::vector<std::int64_t>>& rankings, double k = 60);

// The query options of `qkv search` and qkv.search / qkv.SearchIndex, declared once
// (qkv/options.h): top, index (default: CORPUS.qkv-index), reindex, hybrid, lexical.
struct SearchQueryOptions {
  std::int64_t top = 10;
  std::string index;     // "" = the corpus' path + ".qkv-index"
  bool reindex = false;  // embed the corpus again and overwrite the index
  bool hybrid = false;   // rank by reciprocal rank fusion of the dense and BM25 rankings
  bool lexical = false;  // rank by BM25 alone
  SearchRanking ranking() const {
    return hybrid ? SearchRanking::hybrid : lexical ? SearchRanking::lexical : SearchRanking::dense;
  }
};
const options::OptionSet<SearchQueryOptions>& search_options();

}  // namespace qkv
