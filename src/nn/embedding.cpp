// Embedding and LearnedPositionalEmbedding: table lookups and their backward.

#include <algorithm>

#include "nn/common.h"
#include "qkv/rng.h"
#include "core/parallel.h"
#include "qkv/threads.h"

namespace qkv::nn {

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, std::uint64_t seed) {
  QKV_CHECK(num_embeddings >= 0 && embedding_dim >= 0,
            "Embedding: num_embeddings and embedding_dim must be >= 0, got "
                << num_embeddings << ", " << embedding_dim);
  weight = Tensor::empty({num_embeddings, embedding_dim});
  Rng rng(seed);  // torch: N(0, 1)
  float* p = weight.data_as<float>();
  for (std::int64_t i = 0; i < weight.numel(); ++i) p[i] = static_cast<float>(rng.normal());
}

Tensor Embedding::forward(std::span<const std::int64_t> ids, const Shape& shape,
                          Record* record) const {
  std::int64_t count = 1;
  for (auto s : shape) {
    QKV_CHECK(s >= 0, "Embedding: shape " << shape_to_string(shape) << " has a negative size");
    count *= s;
  }
  QKV_CHECK(static_cast<std::int64_t>(ids.size()) == count,
            "Embedding: ids has " << ids.size() << " entries, shape " << shape_to_string(shape)
                                  << " needs " << count);
  QKV_CHECK(weight.defined() && weight.dim() == 2,
            "Embedding: weight must be (num_embeddings, embedding_dim)");
  const std::int64_t V = weight.size(0), E = weight.size(1);
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t id = ids[static_cast<std::size_t>(i)];
    QKV_CHECK(id >= 0 && id < V, "Embedding: ids[" << i << "] = " << id
                                                   << " is out of range [0, " << V << ")");
  }
  const Tensor w = detail::contiguous_f32(weight, "Embedding", "weight");  // (V, E)
  Shape out_shape = shape;
  out_shape.push_back(E);
  Tensor out = Tensor::empty(out_shape);  // (shape..., E)
  const float* pw = w.data_as<float>();
  float* po = out.data_as<float>();
  qkv::detail::parallel_chunks("nn.embedding", count, count * E >= (1 << 15), num_threads(),
                          [&](std::int64_t i0, std::int64_t i1) {
                            for (std::int64_t i = i0; i < i1; ++i)
                              std::copy_n(pw + ids[static_cast<std::size_t>(i)] * E, E, po + i * E);
                          });
  if (record) record->ids.assign(ids.begin(), ids.end());
  return out;
}

// forward: y[i] = weight[ids[i]]
void Embedding::backward(const Tensor& dy, const Record& record, Embedding& grads) const {
  Tensor& dweight = grads.weight;
  detail::check_grad(dweight, weight.shape(), "Embedding::backward", "grads.weight");
  const std::int64_t E = dweight.size(1);
  const auto n = static_cast<std::int64_t>(record.ids.size());
  QKV_CHECK(dy.defined() && dy.numel() == n * E && (n == 0 || dy.size(-1) == E),
            "Embedding::backward: dy must hold " << n << " rows of " << E << ", got "
                                                 << (dy.defined() ? dy.shape_string() : "undefined"));
  Tensor g = detail::contiguous_f32(dy, "Embedding::backward", "dy");
  const float* pg = g.data_as<float>();
  float* pw = dweight.data_as<float>();
  const std::int64_t* ids = record.ids.data();  // checked by the forward
  // Ids repeat (the same character many times), so threads split the columns, not the
  // rows: each column's additions run in the order of the ids whatever the thread count.
  const int threads = static_cast<int>(
      std::min<std::int64_t>(num_threads(), std::max<std::int64_t>(E / 16, 1)));
  qkv::detail::parallel_team("nn.embedding_backward", threads, [&](int t, int T) {
    const std::int64_t e0 = E * t / T, e1 = E * (t + 1) / T;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t e = e0; e < e1; ++e) pw[ids[i] * E + e] += pg[i * E + e];
  });
}

ParameterList Embedding::parameters(const std::string& prefix) {
  return {{prefix + "weight", &weight}};
}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(std::int64_t max_positions,
                                                       std::int64_t dim, std::uint64_t seed)
    : table(max_positions, dim, seed) {}

Tensor LearnedPositionalEmbedding::forward(std::int64_t length, std::int64_t offset,
                                           Record* record) const {
  QKV_CHECK(length >= 0 && offset >= 0 && offset + length <= table.weight.size(0),
            "LearnedPositionalEmbedding: positions [" << offset << ", " << offset + length
                                                      << ") exceed max_positions "
                                                      << table.weight.size(0));
  std::vector<std::int64_t> ids(static_cast<std::size_t>(length));
  for (std::int64_t i = 0; i < length; ++i) ids[static_cast<std::size_t>(i)] = offset + i;
  return table.forward(ids, {length}, record);
}

void LearnedPositionalEmbedding::backward(const Tensor& dy, const Record& record,
                                          LearnedPositionalEmbedding& grads) const {
  table.backward(dy, record, grads.table);
}

ParameterList LearnedPositionalEmbedding::parameters(const std::string& prefix) {
  return table.parameters(prefix);
}

}  // namespace qkv::nn
