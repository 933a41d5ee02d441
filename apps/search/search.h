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
// (blank lines have a zero row and are never hits), and metadata naming the format, the
// SHA-256 of the corpus's bytes and the model's fingerprint (the SHA-256 of its
// config.json, model.safetensors and tokenizer.json). open_or_build reuses the file only
// while both match: a changed corpus is indexed again (and the file rewritten), an index
// of another model or a damaged file is an error naming it (it is not overwritten unless
// asked).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/files.h"  // file_sha256
#include "qkv/options.h"
#include "qkv/tensor.h"
#include "qkv/use_lite.h"

namespace qkv {

struct SearchHit {
  std::int64_t rank = 0;  // 1-based
  float score = 0;        // cosine similarity in [-1, 1]
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
  static SearchIndex open_or_build(const models::UseLiteModel& model, const std::string& model_dir,
                                   const std::string& corpus_path, const std::string& index_path,
                                   const IndexProgress& progress = {}, bool rebuild = false,
                                   bool* built = nullptr);
  // Whether index_path holds a qkv search index (true: a whole one, or one that starts as
  // an index does and is damaged past that) or nothing (false); anything else throws
  // qkv::Error saying it is not a qkv search index, judged by its header (safetensors
  // metadata format "qkv-search-index/1"): a corpus, a model's weights, /dev/null, a FIFO.
  static bool check_index_file(const std::string& index_path);

  void save(const std::string& path) const;

  // The top_k lines (fewer when the corpus has fewer non-blank lines) by cosine similarity
  // to the query's embedding, best first; equal scores in line order. top_k >= 1.
  std::vector<SearchHit> search(const models::UseLiteModel& model, std::string_view query,
                                std::int64_t top_k) const;
  // The same for an embedding already computed: query (O) unit vector.
  std::vector<SearchHit> search(const Tensor& query, std::int64_t top_k) const;

  const Tensor& embeddings() const { return embeddings_; }  // (N, O)
  const std::vector<std::string>& lines() const { return lines_; }
  std::int64_t clipped_lines() const { return clipped_; }  // lines longer than max_length tokens

 private:
  // build() with the model's fingerprint and the corpus' SHA-256 already computed.
  static SearchIndex embed_corpus(const models::UseLiteModel& model, std::string fingerprint,
                                  const std::string& corpus_path, std::string corpus_sha,
                                  const IndexProgress& progress);

  Tensor embeddings_;               // (N, O), a zero row for each blank line
  std::vector<std::string> lines_;  // N corpus lines
  std::string corpus_sha256_, model_fingerprint_;
  std::int64_t clipped_ = 0;
};

// Hex SHA-256 over the SHA-256s of dir/config.json, dir/model.safetensors and
// dir/tokenizer.json: changes when any of them does.
std::string model_fingerprint(const std::string& model_dir);

// The query options of `qkv search` and qkv.search / qkv.SearchIndex, declared once
// (qkv/options.h): top, index (default: CORPUS.qkv-index), reindex.
struct SearchQueryOptions {
  std::int64_t top = 10;
  std::string index;     // "" = the corpus' path + ".qkv-index"
  bool reindex = false;  // embed the corpus again and overwrite the index
};
const options::OptionSet<SearchQueryOptions>& search_options();

}  // namespace qkv
