// Whether a learned embedding table has collapsed: its rows all pointing one way, so that
// a nearest-neighbour query ("movies like X", "lines like this query") finds everything
// alike. The measure is the mean cosine similarity over pairs of distinct rows; the
// applications that warn on it (the recommender, search) each choose their threshold from
// their own measurements.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "qkv/tensor.h"

namespace qkv {

// The mean of cos(row_i, row_j) over every unordered pair i < j of the chosen rows of
// `table` (N, d) (f32 or f64; `rows` empty = all N), exactly: with u_i = row_i / |row_i|,
//   Σ_{i≠j} u_i·u_j = |Σ_i u_i|² − n,   so the mean is (|Σ_i u_i|² − n) / (n (n − 1)),
// one pass over the rows in double instead of n²/2 dot products. A zero row has no
// direction and is left out (search's blank lines, a biases-only model's factors).
// std::nullopt when fewer than two non-zero rows remain. qkv::Error for a table that is
// not 2-D, a row index out of range or a value that is not finite.
std::optional<double> mean_pairwise_cosine(const Tensor& table, std::span<const std::int64_t> rows = {});

}  // namespace qkv
