// A search index whose lines' embeddings have collapsed: they all point one way, so every
// query scores every line about alike and the ranking says little. `qkv search` warns of it
// when it opens or builds an index, qkv.SearchIndex with a UserWarning.
#pragma once

#include <optional>
#include <string>

#include "search/search.h"

namespace qkv {

// Above this mean pairwise cosine of the corpus lines' embeddings an index counts as
// collapsed. Measured with USE-lite (docs/search.md, "Warnings"): corpora it searches well
// lie between 0.27 and 0.66 (the Brown corpus' held-out files 0.268, State of the Union
// sentences 0.280 and 0.313, the 63,697 Debian package lines 0.595, 300 bare package
// names 0.656); lines the model cannot tell apart lie above 0.9 (300 lines "package number
// N" 0.914, "libN: a library for the N protocol" 0.950). 0.8 leaves 0.14 above the
// most alike corpus measured and 0.11 below the templated lines.
inline constexpr double kCollapsedIndexCosine = 0.8;

// The mean pairwise cosine of the index's non-blank lines (qkv/embedding_health.h: exact,
// one pass over the embeddings, as cheap as one query); nullopt for fewer than two.
std::optional<double> index_mean_cosine(const SearchIndex& index);

// The warning for an index above kCollapsedIndexCosine, naming the measured cosine, the
// threshold and what to do; nullopt for a healthy one.
std::optional<std::string> collapsed_index_warning(const SearchIndex& index, const std::string& index_path);

}  // namespace qkv
