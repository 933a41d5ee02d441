// Whether a search index's embeddings have collapsed. See apps/search/index_health.h.

#include "search/index_health.h"

#include <cstdio>

#include "qkv/embedding_health.h"

namespace qkv {

std::optional<double> index_mean_cosine(const SearchIndex& index) {
  return mean_pairwise_cosine(index.embeddings());  // (N, O); blank lines are zero rows, left out
}

std::optional<std::string> collapsed_index_warning(const SearchIndex& index, const std::string& index_path) {
  const std::optional<double> cosine = index_mean_cosine(index);
  if (!cosine || *cosine <= kCollapsedIndexCosine) return std::nullopt;
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "%.3f, above %.2f", *cosine, kCollapsedIndexCosine);
  return "the embeddings of the lines in " + index_path + " have collapsed: their mean pairwise cosine is " +
         numbers + " (corpora the model searches well measure 0.27-0.66), so every query scores every line "
         "about alike; the lines may be too much alike for this model (try --lexical or --hybrid), or the "
         "model may be damaged (fetch it again and rebuild the index with --reindex)";
}

}  // namespace qkv
