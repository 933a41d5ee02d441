// mean_pairwise_cosine: see include/qkv/embedding_health.h.

#include "qkv/embedding_health.h"

#include <cmath>
#include <vector>

#include "qkv/error.h"

namespace qkv {

std::optional<double> mean_pairwise_cosine(const Tensor& table, std::span<const std::int64_t> rows) {
  QKV_CHECK(table.defined() && table.dim() == 2,
            "mean_pairwise_cosine: the table must be 2-D (rows, dim), got "
                << (table.defined() ? table.shape_string() : std::string("undefined")));
  const Tensor t = table.to(DType::f64).contiguous();  // (N, d)
  const std::int64_t N = t.size(0), d = t.size(1);
  const double* p = t.data_as<double>();
  std::vector<double> sum(static_cast<std::size_t>(d), 0.0);  // Σ u_i, (d)
  std::int64_t n = 0;
  const auto add_row = [&](std::int64_t i) {
    QKV_CHECK(i >= 0 && i < N, "mean_pairwise_cosine: row " << i << " is out of range [0, " << N << ")");
    const double* e = p + i * d;
    double norm2 = 0;
    for (std::int64_t j = 0; j < d; ++j) {
      QKV_CHECK(std::isfinite(e[j]), "mean_pairwise_cosine: row " << i << " holds a value that is not finite");
      norm2 += e[j] * e[j];
    }
    if (norm2 == 0) return;
    const double inv = 1.0 / std::sqrt(norm2);
    for (std::int64_t j = 0; j < d; ++j) sum[static_cast<std::size_t>(j)] += e[j] * inv;
    ++n;
  };
  if (rows.empty()) {
    for (std::int64_t i = 0; i < N; ++i) add_row(i);
  } else {
    for (const std::int64_t i : rows) add_row(i);
  }
  if (n < 2) return std::nullopt;
  double s2 = 0;
  for (const double s : sum) s2 += s * s;
  const double nn = static_cast<double>(n);
  return (s2 - nn) / (nn * (nn - 1));
}

}  // namespace qkv
