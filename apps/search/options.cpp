// Semantic search's query options, declared once for the CLI and Python.
#include "search/search.h"

namespace qkv {

const options::OptionSet<SearchQueryOptions>& search_options() {
  using T = SearchQueryOptions;
  static const options::OptionSet<T> set = [] {
    options::OptionSet<T> s("search", "Rank the lines of a corpus by cosine similarity to a query, by BM25, or by both fused");
    s.integer("top", &T::top, 1, options::kMaxInt, "Hits to return");
    s.path("index", &T::index,
           "Index file (default: CORPUS.qkv-index): the corpus' embeddings, reused while the corpus and the model "
           "are unchanged (SHA-256)");
    s.flag("reindex", &T::reindex, "Embed the corpus again and overwrite the index").old_names = {"rebuild"};
    s.flag("hybrid", &T::hybrid,
           "Rank by reciprocal rank fusion (k = 60) of the cosine ranking and BM25's; the score is the RRF score");
    s.flag("lexical", &T::lexical, "Rank by BM25 (k1 = 1.2, b = 0.75) of the query's words alone; the score is BM25's");
    s.check([](T& t) {
      if (t.hybrid && t.lexical) throw options::OptionError("lexical", "and --hybrid pick the ranking: give one");
    });
    return s;
  }();
  return set;
}

}  // namespace qkv
