// Semantic search for Python (_qkv._SearchIndex; qkv.SearchIndex and qkv.search in
// python/qkv/models.py): the index of a corpus' lines under USE-lite's embeddings.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings_common.h"
#include "bindings_options.h"
#include "qkv/use_lite.h"
#include "search/search.h"

namespace py = pybind11;
namespace models = qkv::models;
using qkv_python::naming_allocations;

namespace {

py::list search_hits(const std::vector<qkv::SearchHit>& hits) {
  py::list out;
  for (const auto& h : hits) {
    py::dict d;
    d["rank"] = h.rank;
    d["score"] = h.score;
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
            bool built = false;
            py::gil_scoped_release release;
            auto result = naming_allocations("SearchIndex of '" + corpus + "'", [&] {
              return std::make_shared<qkv::SearchIndex>(qkv::SearchIndex::open_or_build(
                  model, model_dir, corpus, index, {}, rebuild, &built));
            });
            return std::make_pair(result, built);
          },
          py::arg("model"), py::arg("model_dir"), py::arg("corpus"), py::arg("index"),
          py::arg("rebuild"), "(index, whether it was built). Releases the GIL.")
      .def_property_readonly("embeddings", [](const qkv::SearchIndex& s) { return s.embeddings(); })
      .def_property_readonly("lines", [](const qkv::SearchIndex& s) { return s.lines(); })
      .def(
          "search",
          [](const qkv::SearchIndex& s, const models::UseLiteModel& model, const std::string& query,
             std::int64_t top) {
            std::vector<qkv::SearchHit> hits;
            {
              py::gil_scoped_release release;
              hits = s.search(model, query, top);
            }
            return search_hits(hits);
          },
          py::arg("model"), py::arg("query"), py::arg("top"),
          "[{rank, score, line, text}] best first. Releases the GIL.");
}
