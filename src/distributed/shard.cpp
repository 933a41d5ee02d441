// The zigzag layout's shards (include/qkv/distributed.h), without MPI: views and copies.
#include <algorithm>
#include <string>
#include <vector>

#include "qkv/distributed.h"
#include "qkv/error.h"

namespace qkv::distributed {

Tensor shard_sequence(const Tensor& full, int rank, int ranks, std::int64_t dim) {
  QKV_CHECK(full.defined(), "shard_sequence: full is undefined");
  QKV_CHECK(ranks >= 1, "shard_sequence: ranks must be >= 1, got " << ranks);
  QKV_CHECK(rank >= 0 && rank < ranks, "shard_sequence: rank must be in [0, " << ranks << "), got " << rank);
  QKV_CHECK(dim >= 0 && dim < full.dim(), "shard_sequence: dim must be in [0, " << full.dim() << "), got " << dim);
  const std::int64_t L = full.size(dim);
  const std::int64_t chunks = 2 * static_cast<std::int64_t>(ranks);
  QKV_CHECK(L % chunks == 0, "shard_sequence: the sequence length L = " << L << " (dimension " << dim
                                 << " of " << full.shape_string() << ") must be divisible by 2·ranks = "
                                 << chunks << " (the zigzag layout's chunks)");
  const std::int64_t C = L / chunks;
  Shape shape = full.shape();
  shape[static_cast<std::size_t>(dim)] = 2 * C;
  Tensor shard = Tensor::empty(shape, full.dtype());
  const std::int64_t first = rank, second = chunks - 1 - rank;
  shard.slice(dim, 0, C).copy_from(full.slice(dim, first * C, (first + 1) * C));
  shard.slice(dim, C, 2 * C).copy_from(full.slice(dim, second * C, (second + 1) * C));
  return shard;
}

Tensor unshard_sequence(const std::vector<Tensor>& shards, std::int64_t dim) {
  QKV_CHECK(!shards.empty(), "unshard_sequence: no shards");
  const Tensor& s0 = shards[0];
  QKV_CHECK(s0.defined(), "unshard_sequence: shards[0] is undefined");
  QKV_CHECK(dim >= 0 && dim < s0.dim(), "unshard_sequence: dim must be in [0, " << s0.dim() << "), got " << dim);
  const std::int64_t ranks = static_cast<std::int64_t>(shards.size());
  const std::int64_t Ls = s0.size(dim);
  QKV_CHECK(Ls % 2 == 0, "unshard_sequence: a shard holds two chunks, so its length must be even, got " << Ls);
  const std::int64_t C = Ls / 2;
  Shape shape = s0.shape();
  shape[static_cast<std::size_t>(dim)] = Ls * ranks;
  Tensor full = Tensor::empty(shape, s0.dtype());
  for (std::int64_t r = 0; r < ranks; ++r) {
    const Tensor& s = shards[static_cast<std::size_t>(r)];
    QKV_CHECK(s.defined() && s.shape() == s0.shape() && s.dtype() == s0.dtype(),
              "unshard_sequence: shards[" << r << "] must have shards[0]'s shape " << s0.shape_string()
                                          << " and dtype, got " << (s.defined() ? s.shape_string() : "undefined"));
    const std::int64_t first = r, second = 2 * ranks - 1 - r;
    full.slice(dim, first * C, (first + 1) * C).copy_from(s.slice(dim, 0, C));
    full.slice(dim, second * C, (second + 1) * C).copy_from(s.slice(dim, C, 2 * C));
  }
  return full;
}

RowShare row_share(std::int64_t rows, int rank, int ranks) {
  QKV_CHECK(ranks >= 1 && rank >= 0 && rank < ranks && rows >= 0,
            "row_share: rank " << rank << " of " << ranks << " ranks, " << rows << " rows");
  const std::int64_t base = rows / ranks, extra = rows % ranks;
  RowShare s;
  s.lo = rank * base + std::min<std::int64_t>(rank, extra);
  s.hi = s.lo + base + (rank < extra ? 1 : 0);
  return s;
}

}  // namespace qkv::distributed
