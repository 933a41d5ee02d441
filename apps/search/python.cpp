// Semantic search for Python (_qkv._SearchIndex; qkv.SearchIndex and qkv.search in
// python/qkv/models.py): the index of a corpus' lines under USE-lite's embeddings.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings_common.h"
#include "bindings_options.h"
#include "qkv/use_lite.h"
#include "search/index_health.h"
#include "search/search.h"

namespace py = pybind11;
namespace models = qkv::models;
using qkv_python::naming_allocations;

namespace {

qkv::SearchRanking parse_ranking(const std::string& name) {
  if (name == "dense") return qkv::SearchRanking::dense;
  if (name == "lexical") return qkv::SearchRanking::lexical;
  if (name == "hybrid") return qkv::SearchRanking::hybrid;
  throw qkv::Error("ranking must be dense, lexical or hybrid, got '" + name + "'");
}

py::list search_hits(const std::vector<qkv::SearchHit>& hits, qkv::SearchRanking ranking) {
  py::list out;
  for (const auto& h : hits) {
    py::dict d;
    d["rank"] = h.rank;
    d["score"] = h.score;
    d["scoring"] = qkv::score_name(ranking);
    d["line"] = h.line;
    d["text"] = h.text;
    out.append(d);
  }
  return out;
}

}  // namespace

void register_search(py::module_& m) {
  qkv_python::def_options(m, qkv::search_options());  // qkv.search, qkv.SearchIndex
  py::class_<qkv::SearchIndex, std::shared_ptr<qkv::SearchIndex>>(
      m, "_SearchIndex", "qkv::SearchIndex (use qkv.SearchIndex / qkv.search).")
      .def_static(
          "open_or_build",
          [](const models::UseLiteModel& model, const std::string& model_dir,
             const std::string& corpus, const std::string& index, bool rebuild) {
            bool built = false, lexical_added = false;
            py::gil_scoped_release release;
            auto result = naming_allocations("SearchIndex of '" + corpus + "'", [&] {
              return std::make_shared<qkv::SearchIndex>(qkv::SearchIndex::open_or_build(
                  model, model_dir, corpus, index, {}, rebuild, &built, &lexical_added));
            });
            return std::make_tuple(result, built, lexical_added);
          },
          py::arg("model"), py::arg("model_dir"), py::arg("corpus"), py::arg("index"),
          py::arg("rebuild"),
          "(index, whether it was built, whether its lexical part was added). Releases the GIL.")
      .def_property_readonly("embeddings", [](const qkv::SearchIndex& s) { return s.embeddings(); })
      .def_property_readonly("lines", [](const qkv::SearchIndex& s) { return s.lines(); })
      // The lines' mean pairwise cosine, and the warning qkv.SearchIndex gives when it is
      // above search/index_health.h's threshold (None otherwise).
      .def_property_readonly("mean_cosine", [](const qkv::SearchIndex& s) { return qkv::index_mean_cosine(s); })
      .def("collapse_warning", &qkv::collapsed_index_warning, py::arg("index_path"))
      .def_property_readonly("lexical", &qkv::SearchIndex::lexical)  // a view kept alive by the index
      .def(
          "search",
          [](const qkv::SearchIndex& s, const models::UseLiteModel& model, const std::string& query,
             std::int64_t top, const std::string& ranking) {
            const qkv::SearchRanking r = parse_ranking(ranking);
            std::vector<qkv::SearchHit> hits;
            {
              py::gil_scoped_release release;
              hits = s.search(model, query, top, r);
            }
            return search_hits(hits, r);
          },
          py::arg("model"), py::arg("query"), py::arg("top"), py::arg("ranking"),
          "[{rank, score, scoring, line, text}] best first; ranking: dense, lexical or hybrid. "
          "Releases the GIL.");
  // BM25 alone, without a model (bm25.h): the tests' naive twin and the search benchmark's
  // build time and memory read it.
  py::class_<qkv::Bm25Index>(m, "_Bm25Index", "qkv::Bm25Index: BM25 over lines (k1 1.2, b 0.75).")
      .def(py::init([](const std::vector<std::string>& lines) {
             py::gil_scoped_release release;
             return qkv::Bm25Index::build(lines);
           }),
           py::arg("lines"), "The index of `lines`. Releases the GIL.")
      .def("rank", &qkv::Bm25Index::rank, py::arg("query"),
           "[(BM25 score, 0-based line)] of every line sharing a term with the query, best first")
      .def_property_readonly("documents", &qkv::Bm25Index::documents)
      .def_property_readonly("vocabulary", &qkv::Bm25Index::vocabulary)
      .def_property_readonly("postings", &qkv::Bm25Index::postings)
      .def_property_readonly("average_length", &qkv::Bm25Index::average_length)
      .def_property_readonly("memory_bytes", &qkv::Bm25Index::memory_bytes)
      .def_readonly_static("k1", &qkv::Bm25Index::kK1)
      .def_readonly_static("b", &qkv::Bm25Index::kB);
  m.def("_lexical_terms", &qkv::lexical_terms, py::arg("text"), "The BM25 terms of text (bm25.h), in order.");
  m.def(
      "_reciprocal_rank_fusion",
      [](const std::vector<std::vector<std::int64_t>>& rankings, double k) {
        return qkv::reciprocal_rank_fusion(rankings, k);
      },
      py::arg("rankings"), py::arg("k") = 60.0, "[(RRF score, item)] best first");
}
