// Semantic search's query options, declared once for the CLI and Python.
#include "search/search.h"

namespace qkv {

const options::OptionSet<SearchQueryOptions>& search_options() {
  using T = SearchQueryOptions;
  static const options::OptionSet<T> set = [] {
    options::OptionSet<T> s("search", "Rank the lines of a corpus by cosine similarity to a query");
    s.integer("top", &T::top, 1, options::kMaxInt, "Hits to return");
    s.path("index", &T::index,
           "Index file (default: CORPUS.qkv-index): the corpus' embeddings, reused while the corpus and the model "
           "are unchanged (SHA-256)");
    s.flag("reindex", &T::reindex, "Embed the corpus again and overwrite the index").old_names = {"rebuild"};
    return s;
  }();
  return set;
}

}  // namespace qkv
