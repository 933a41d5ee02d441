// SearchIndex: a corpus' lines embedded by the Universal Sentence Encoder lite, kept in a
// .safetensors file checked by content hashes, and searched by cosine similarity.

#include "search/search.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

#include "io/text_input.h"
#include "models/checkpoint.h"
#include "qkv/error.h"
#include "qkv/files.h"
#include "qkv/safetensors.h"

namespace qkv {

namespace {

constexpr const char* kFormat = "qkv-search-index/1";

// Lines embedded per call of embed_ids: the unit of progress (a few hundred ms each).
constexpr std::size_t kChunkLines = 2048;
// Sentences per batch: the corpus is sorted by length first, so batches pad little, and
// wide batches give the products enough rows even for short lines.
constexpr std::int64_t kBatch = 128;

// file_sha256 of the corpus, its errors naming it as the corpus.
std::string corpus_sha256(const std::string& path) {
  try {
    return file_sha256(path);
  } catch (const Error& e) {
    throw Error(std::string("corpus: ") + e.what(), e.kind());
  }
}

bool blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; });
}

}  // namespace

std::string model_fingerprint(const std::string& model_dir) {
  const std::filesystem::path d(model_dir);
  std::string hashes;  // the SHA-256 of the SHA-256s, in this order
  for (const char* name : {"config.json", "model.safetensors", "tokenizer.json"})
    hashes += file_sha256((d / name).string());
  return sha256_hex(hashes);
}

SearchIndex SearchIndex::build(const models::UseLiteModel& model, const std::string& model_dir,
                               const std::string& corpus_path, const IndexProgress& progress) {
  return embed_corpus(model, model_fingerprint(model_dir), corpus_path, corpus_sha256(corpus_path),
                      progress);
}

SearchIndex SearchIndex::embed_corpus(const models::UseLiteModel& model, std::string fingerprint,
                                      const std::string& corpus_path, std::string corpus_sha,
                                      const IndexProgress& progress) {
  SearchIndex index;
  index.model_fingerprint_ = std::move(fingerprint);
  index.corpus_sha256_ = std::move(corpus_sha);
  std::vector<std::vector<std::int64_t>> ids;
  {
    io::LineReader reader(corpus_path, "corpus");
    for (std::string line; reader.next(line);) {
      bool clipped = false;
      try {
        ids.push_back(blank(line) ? std::vector<std::int64_t>{} : model.encode(line, &clipped));
      } catch (const Error& e) {
        throw Error(reader.where() + ": " + e.what(), e.kind());
      }
      index.clipped_ += clipped;
      index.lines_.push_back(std::move(line));
    }
  }
  index.lexical_ = Bm25Index::build(index.lines_);
  const auto N = static_cast<std::int64_t>(index.lines_.size());
  std::vector<std::size_t> order;  // the non-blank lines, longest first: batches pad little
  for (std::size_t i = 0; i < index.lines_.size(); ++i)
    if (!blank(index.lines_[i])) order.push_back(i);
  QKV_CHECK(!order.empty(), "corpus '" << corpus_path << "' has no non-blank line to index");
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return ids[a].size() > ids[b].size(); });

  const std::int64_t O = model.config.output_size;
  index.embeddings_ = Tensor::zeros({N, O});  // (N, O): blank lines keep a zero row
  float* dst = index.embeddings_.data_as<float>();
  std::int64_t done = 0;
  if (progress) progress(0, static_cast<std::int64_t>(order.size()));
  for (std::size_t start = 0; start < order.size(); start += kChunkLines) {
    const std::size_t end = std::min(order.size(), start + kChunkLines);
    std::vector<std::vector<std::int64_t>> chunk;
    for (std::size_t k = start; k < end; ++k) chunk.push_back(std::move(ids[order[k]]));
    const Tensor y = model.embed_ids(chunk, false, kBatch).embeddings;  // (chunk, O)
    for (std::size_t k = start; k < end; ++k)
      std::copy_n(y.data_as<float>() + static_cast<std::int64_t>(k - start) * O, O,
                  dst + static_cast<std::int64_t>(order[k]) * O);
    done += static_cast<std::int64_t>(end - start);
    if (progress) progress(done, static_cast<std::int64_t>(order.size()));
  }
  return index;
}

namespace {

// The start of every index save() writes, after the u64 header size: the metadata comes
// first and its keys in order, "corpus" (64 hex digits) before "format". A damaged index
// (cut short, say) is recognised by as much of this as it holds.
constexpr std::string_view kIndexStart = "{\"__metadata__\":{\"corpus\":\"";
constexpr std::string_view kIndexFormat = "\",\"format\":\"qkv-search-index/1\"";

bool starts_like_an_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(8 + kIndexStart.size() + 64 + kIndexFormat.size(), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (head.size() < 8 + kIndexStart.size()) return false;
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, head.data(), 8);  // little-endian, as the file format
  if (header_size < kIndexStart.size() + 64 + kIndexFormat.size() || header_size > (std::uint64_t{1} << 30))
    return false;
  const std::string_view body = std::string_view(head).substr(8);
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (i < kIndexStart.size()) {
      if (c != kIndexStart[i]) return false;
    } else if (i < kIndexStart.size() + 64) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    } else if (c != kIndexFormat[i - kIndexStart.size() - 64]) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool SearchIndex::check_index_file(const std::string& index_path) {
  struct stat st{};
  if (::stat(index_path.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;  // (a dangling symlink too: writing creates its target)
    const int e = errno;
    throw Error("index '" + index_path + "': " + std::strerror(e));
  }
  const std::string never = "; it is never read as an index nor replaced by one (not even by a "
                            "rebuild, qkv search --reindex): name another index file";
  if (!S_ISREG(st.st_mode))
    throw Error("index '" + index_path + "' is not a qkv search index: it is " +
                (S_ISDIR(st.st_mode) ? "a directory" : S_ISCHR(st.st_mode) ? "a character device"
                 : S_ISBLK(st.st_mode) ? "a block device" : S_ISFIFO(st.st_mode) ? "a FIFO"
                 : "not a regular file") + never);
  std::string format;
  try {
    const SafeTensors file = SafeTensors::open(index_path);
    const auto it = file.metadata().find("format");
    if (it != file.metadata().end() && it->second == kFormat) return true;
    format = it == file.metadata().end() ? std::string() : it->second;
  } catch (const Error&) {
    if (starts_like_an_index(index_path)) return true;  // a damaged index: open_or_build says so
    throw Error("index '" + index_path + "' is not a qkv search index (its header is not one: " +
                std::to_string(st.st_size) + " bytes that do not start as an index does)" + never);
  }
  throw Error("index '" + index_path + "' is not a qkv search index (a safetensors file of format '" +
              format + "', expected '" + kFormat + "')" + never);
}

SearchIndex SearchIndex::open_or_build(const models::UseLiteModel& model,
                                       const std::string& model_dir,
                                       const std::string& corpus_path,
                                       const std::string& index_path, const IndexProgress& progress,
                                       bool rebuild, bool* built, bool* lexical_added) {
  if (lexical_added) *lexical_added = false;
  // Each hashed once: the model's files are tens of MB, the corpus may be too.
  const std::string fingerprint = model_fingerprint(model_dir);
  const std::string corpus_sha = corpus_sha256(corpus_path);
  // Anything but an index (whole or damaged) or nothing is refused, even with `rebuild`.
  const bool exists = check_index_file(index_path);
  if (!rebuild && exists) {
    SafeTensors file;
    try {
      file = SafeTensors::open(index_path);
    } catch (const Error& e) {
      throw Error("index '" + index_path + "' is damaged (" + e.what() +
                  "): rebuild it (qkv search --reindex)");
    }
    const auto& meta = file.metadata();
    auto get = [&](const char* key) {
      const auto it = meta.find(key);
      return it == meta.end() ? std::string() : it->second;
    };
    QKV_CHECK(get("format") == kFormat, "index '" << index_path << "' is not a qkv search index ("
                                                  << "format '" << get("format") << "', expected '"
                                                  << kFormat << "')");
    QKV_CHECK(get("model") == fingerprint,
              "index '" << index_path << "' was built by another model (fingerprint "
                        << get("model").substr(0, 12) << "…, this model's "
                        << fingerprint.substr(0, 12)
                        << "…): rebuild it (qkv search --reindex) or name another --index");
    if (get("corpus") == corpus_sha) {
      SearchIndex index;
      index.model_fingerprint_ = fingerprint;
      index.corpus_sha256_ = corpus_sha;
      io::LineReader reader(corpus_path, "corpus");
      for (std::string line; reader.next(line);) index.lines_.push_back(std::move(line));
      const auto N = static_cast<std::int64_t>(index.lines_.size());
      const std::int64_t O = model.config.output_size;
      Tensor e;
      try {
        e = file.get("embeddings");
      } catch (const Error& err) {
        throw Error("index '" + index_path + "' is damaged (" + err.what() + ")");
      }
      QKV_CHECK(e.dtype() == DType::f32 && e.shape() == (Shape{N, O}),
                "index '" << index_path << "' is damaged: embeddings " << e.shape_string()
                          << ", the corpus has " << N << " lines of width " << O);
      // A view into the index's buffer: SafeTensors::open copies the file, so a rewrite of
      // the file under a running search changes nothing here.
      index.embeddings_ = e;
      models::detail::check_finite(e, "index '" + index_path + "' is damaged", "embeddings");
      if (!Bm25Index::read(file, N, "index '" + index_path + "'", &index.lexical_)) {
        // An index written before the lexical part (or by other term rules): the embeddings
        // stay, the BM25 index is made from the lines, and the file is written whole again.
        index.lexical_ = Bm25Index::build(index.lines_);
        index.save(index_path);
        if (lexical_added) *lexical_added = true;
      }
      if (built) *built = false;
      return index;
    }
  }
  SearchIndex index = embed_corpus(model, fingerprint, corpus_path, corpus_sha, progress);
  index.save(index_path);
  if (built) *built = true;
  return index;
}

void SearchIndex::save(const std::string& path) const {
  // save_safetensors writes beside and renames: an interrupted save leaves the old file
  // or none, never half of one.
  save_safetensors(path, {{"embeddings", embeddings_}},
                   {{"format", kFormat}, {"model", model_fingerprint_}, {"corpus", corpus_sha256_},
                    {"lines", std::to_string(lines_.size())}, {"lexical", Bm25Index::kTermsVersion}},
                   lexical_.tensors());
}

const char* score_name(SearchRanking ranking) {
  switch (ranking) {
    case SearchRanking::dense: return "cosine";
    case SearchRanking::lexical: return "bm25";
    case SearchRanking::hybrid: return "rrf";
  }
  return "?";
}

std::vector<SearchHit> SearchIndex::search(const models::UseLiteModel& model, std::string_view query,
                                           std::int64_t top_k, SearchRanking ranking) const {
  if (ranking == SearchRanking::lexical) return search_lexical(query, top_k);
  const Tensor q = model.embed({std::string(query)}).embeddings;  // (1, O)
  return ranking == SearchRanking::hybrid ? search_hybrid(q.select(0, 0), query, top_k)
                                          : search(q.select(0, 0), top_k);
}

std::vector<SearchHit> SearchIndex::search(const Tensor& query, std::int64_t top_k) const {
  QKV_CHECK(top_k >= 1, "search: top_k must be >= 1, got " << top_k);
  return hits(dense_ranking(query, top_k), top_k);
}

std::vector<SearchHit> SearchIndex::search_lexical(std::string_view query, std::int64_t top_k) const {
  QKV_CHECK(top_k >= 1, "search: top_k must be >= 1, got " << top_k);
  return hits(lexical_.rank(query), top_k);
}

std::vector<SearchHit> SearchIndex::search_hybrid(const Tensor& query_embedding, std::string_view query,
                                                  std::int64_t top_k) const {
  QKV_CHECK(top_k >= 1, "search: top_k must be >= 1, got " << top_k);
  std::vector<std::vector<std::int64_t>> rankings(2);
  for (const auto& [score, line] : lexical_.rank(query)) rankings[1].push_back(line);  // first: it checks the query
  for (const auto& [score, line] : dense_ranking(query_embedding, options::kMaxInt)) rankings[0].push_back(line);
  return hits(reciprocal_rank_fusion(rankings), top_k);
}

std::vector<std::pair<double, std::int64_t>> SearchIndex::dense_ranking(const Tensor& query,
                                                                        std::int64_t top_k) const {
  const std::int64_t N = embeddings_.size(0), O = embeddings_.size(1);
  QKV_CHECK(query.defined() && query.dim() == 1 && query.size(0) == O && query.dtype() == DType::f32,
            "search: the query must be an f32 vector of " << O << ", got "
                << (query.defined() ? query.shape_string() : std::string("undefined")));
  const Tensor q = query.contiguous();
  const float* e = embeddings_.data_as<float>();
  std::vector<std::pair<double, std::int64_t>> scored;  // (score, line index)
  for (std::int64_t i = 0; i < N; ++i) {
    if (blank(lines_[static_cast<std::size_t>(i)])) continue;
    double s = 0;
    for (std::int64_t o = 0; o < O; ++o) s += double{e[i * O + o]} * q.data_as<float>()[o];
    scored.emplace_back(static_cast<float>(s), i);  // the f32 score a hit shows orders the hits
  }
  const auto k = static_cast<std::size_t>(std::min<std::int64_t>(top_k, static_cast<std::int64_t>(scored.size())));
  std::partial_sort(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(k), scored.end(),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  scored.resize(k);
  return scored;
}

std::vector<SearchHit> SearchIndex::hits(const std::vector<std::pair<double, std::int64_t>>& ranked,
                                         std::int64_t top_k) const {
  std::vector<SearchHit> out;
  for (std::size_t r = 0; r < ranked.size() && static_cast<std::int64_t>(r) < top_k; ++r)
    out.push_back({static_cast<std::int64_t>(r) + 1, static_cast<float>(ranked[r].first), ranked[r].second + 1,
                   lines_[static_cast<std::size_t>(ranked[r].second)]});
  return out;
}

std::vector<std::pair<double, std::int64_t>> reciprocal_rank_fusion(
    const std::vector<std::vector<std::int64_t>>& rankings, double k) {
  std::map<std::int64_t, double> score;
  for (const auto& ranking : rankings)
    for (std::size_t r = 0; r < ranking.size(); ++r) score[ranking[r]] += 1.0 / (k + static_cast<double>(r + 1));
  std::vector<std::pair<double, std::int64_t>> fused;
  fused.reserve(score.size());
  for (const auto& [item, s] : score) fused.emplace_back(s, item);
  std::stable_sort(fused.begin(), fused.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return fused;  // the map gave them in item order: stable_sort keeps ties so
}

}  // namespace qkv
