// qkv embed and qkv search: sentence embeddings of the Universal Sentence Encoder lite
// (scripts/fetch_model.sh use-lite DIR), and semantic search of a corpus' lines with them.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "commands.h"
#include "io/text_input.h"
#include "print.h"
#include "qkv/error.h"
#include "search/index_health.h"
#include "search/search.h"
#include "qkv/use_lite.h"

namespace qkv::cli {
namespace {

models::UseLiteModel load_use_lite(const std::string& dir) {
  std::error_code ec;
  QKV_CHECK(std::filesystem::is_directory(dir, ec),
            "model directory " << quote_path(dir) << " does not exist (make one with "
                               << "scripts/fetch_model.sh use-lite DIR)");
  return models::UseLiteModel::load(dir);
}

// The model keeps the first max_length tokens, as the published graph does: say so.
void warn_clipped(const std::string& where, std::int64_t max_length) {
  std::cerr << "qkv: warning: " << where << " is longer than the model's " << max_length
            << " tokens; only the first " << max_length << " are embedded\n";
}

// A bar on stderr, redrawn in place on a terminal, else one line at the end.
class ProgressBar {
 public:
  explicit ProgressBar(std::string what) : what_(std::move(what)), tty_(::isatty(2) == 1) {}
  void operator()(std::int64_t done, std::int64_t total) {
    if (!tty_) {
      if (done == total) std::cerr << what_ << ": " << done << " lines\n";
      return;
    }
    const int width = 30;
    const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
    std::cerr << "\r\033[K" << what_ << " [" << std::string(filled, '#')
              << std::string(width - filled, '.') << "] " << done << "/" << total << std::flush;
    if (done == total) std::cerr << '\n';
  }

 private:
  std::string what_;
  bool tty_;
};

}  // namespace

int run_embed(const EmbedOptions& o, std::ostream& out) {
  const models::UseLiteModel model = load_use_lite(o.model);
  std::vector<std::string> texts = o.texts;
  std::vector<std::string> where;  // how warnings name each input
  for (std::size_t i = 0; i < texts.size(); ++i) where.push_back("--text " + std::to_string(i + 1));
  if (o.has_file) {
    if (o.file.empty()) throw UsageError("--file", "must name a file, or '-' for standard input");
    io::LineReader reader(o.file, "--file");
    for (std::string line; reader.next(line);) {
      texts.push_back(std::move(line));
      where.push_back(reader.where());
    }
  }
  if (texts.empty()) throw UsageError("--text", "one of --text or --file is required");
  std::vector<std::vector<std::int64_t>> ids;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    bool clipped = false;
    try {
      ids.push_back(model.encode(texts[i], &clipped));
    } catch (const Error& e) {
      throw Error(where[i] + ": " + e.what(), e.kind());
    }
    if (clipped) warn_clipped(where[i], model.config.max_length);
  }
  const Tensor y = model.embed_ids(ids).embeddings;  // (N, O)
  const std::int64_t O = y.size(1);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const float* row = y.data_as<float>() + static_cast<std::int64_t>(i) * O;
    if (o.json) {
      nlohmann::ordered_json j;
      j["text"] = texts[i];
      j["embedding"] = std::vector<float>(row, row + O);
      out << j.dump() << '\n';
      continue;
    }
    // Text form: the shape, then the values (8 significant digits: f32 round-trips).
    out << "# " << quote_value(texts[i]) << " (" << ids[i].size() << " tokens) -> " << O << " values\n";
    for (std::int64_t k = 0; k < O; ++k) out << format("%.9g", double{row[k]}) << (k + 1 < O ? ' ' : '\n');
  }
  return 0;
}

int run_search(const SearchOptions& o, const SearchQueryOptions& q, std::ostream& out) {
  const std::string index_path = q.index.empty() ? o.corpus + ".qkv-index" : q.index;
  {  // before the model loads: the index is never one of the inputs, nor a file of another kind
    Inputs inputs;
    add_input(inputs, "--corpus", o.corpus);
    add_directory_inputs(inputs, "--model", o.model);
    check_output_path("--index", index_path, inputs);
    try {
      SearchIndex::check_index_file(index_path);
    } catch (const Error& e) {
      throw Error(std::string("--index: ") + e.what(), e.kind());
    }
  }
  const models::UseLiteModel model = load_use_lite(o.model);
  bool clipped = false;
  std::vector<std::int64_t> query_ids;
  try {
    query_ids = model.encode(o.query, &clipped);
  } catch (const Error& e) {
    throw Error(std::string("--query: ") + e.what(), e.kind());
  }
  if (clipped) warn_clipped("--query", model.config.max_length);
  const SearchRanking ranking = q.ranking();
  if (ranking != SearchRanking::dense && lexical_terms(o.query).empty())  // before an index is built
    throw UsageError("--query", "has no word for BM25 (" + std::string(q.hybrid ? "--hybrid" : "--lexical") +
                                    ") to match: it needs letters or digits");

  ProgressBar bar("indexing " + o.corpus);
  bool built = false, lexical_added = false;
  const SearchIndex index = SearchIndex::open_or_build(
      model, o.model, o.corpus, index_path, [&](std::int64_t d, std::int64_t t) { bar(d, t); },
      q.reindex, &built, &lexical_added);
  if (built) {
    std::cerr << "qkv: indexed " << o.corpus << " into " << index_path << "\n";
    if (index.clipped_lines() > 0)
      warn_clipped(std::to_string(index.clipped_lines()) + " corpus line(s)", model.config.max_length);
  }
  if (lexical_added)
    std::cerr << "qkv: " << index_path << " had no lexical (BM25) index (an older qkv wrote it): added it, "
              << "the embeddings kept\n";
  if (const std::optional<std::string> w = collapsed_index_warning(index, index_path)) warn(*w);
  const Tensor query = model.embed_ids({query_ids}).embeddings;  // (1, O)
  const std::vector<SearchHit> hits =
      ranking == SearchRanking::lexical  ? index.search_lexical(o.query, q.top)
      : ranking == SearchRanking::hybrid ? index.search_hybrid(query.select(0, 0), o.query, q.top)
                                         : index.search(query.select(0, 0), q.top);
  if (hits.empty()) std::cerr << "qkv: no line of " << o.corpus << " shares a word with the query\n";
  // The score is the ranking's: its name heads the text column and is each JSON hit's "scoring".
  if (!o.json && !hits.empty()) out << format("rank %7s %6s  text\n", score_name(ranking), "line");
  for (const SearchHit& h : hits) {
    if (o.json) {
      nlohmann::ordered_json j;
      j["rank"] = h.rank;
      j["score"] = h.score;
      j["scoring"] = score_name(ranking);
      j["line"] = h.line;
      j["text"] = h.text;
      out << j.dump() << '\n';
      continue;
    }
    out << format("%3lld. %7.4f %6lld: ", static_cast<long long>(h.rank), double{h.score},
                  static_cast<long long>(h.line))
        << truncate_display(printable(h.text, kMaxWidth), kMaxWidth - 22) << '\n';
  }
  return 0;
}

}  // namespace qkv::cli
