// qkv::nn basic modules: Linear, Embedding, LearnedPositionalEmbedding, LayerNorm, and
// torch-style state dicts.
//
// Every module holds its parameters as f32 qkv::Tensors laid out exactly as torch.nn does
// (Linear.weight is (out, in)), so a torch state_dict maps 1:1 onto `parameters()`.
// Constructors initialise the parameters as torch does (same distributions, not the same
// numbers; seeded, deterministic); load_state_dict overwrites them.
//
// One forward per module, for inference and training alike: it takes an optional
// `Record*`. Absent (inference), nothing is kept; given (training), the record receives
// what the module's backward needs. The backward has the mirrored signature
//   forward(x, ..., Record* record) -> y
//   backward(dy, const Record& record, Module& grads) -> dx
// and ADDS the parameter gradients into `grads`, a second instance of the same module
// (same config) whose parameter tensors hold gradients (zero them first, train::zero_grad,
// for one batch's gradient); see qkv/nn/functional.h for the conventions.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qkv/nn/functional.h"
#include "qkv/tensor.h"

namespace qkv::nn {

// name -> tensor, names as torch's state_dict() gives them.
using StateDict = std::map<std::string, Tensor>;
// (full name, the module's own tensor) in torch's registration order.
using ParameterList = std::vector<std::pair<std::string, Tensor*>>;
// A backward's report that the gradients of one module are final (every contribution to
// them has been added), called as soon as that module's backward returns, last module first.
// Data-parallel training starts reducing those gradients across processes while the
// backward goes on (distributed::GradientReducer).
using GradientsReady = std::function<void(const ParameterList& ready)>;

struct Linear {
  Tensor weight;  // (out_features, in_features); may be undefined when `packed` is defined
                  // (an inference-only model that dropped its plain copy)
  Tensor bias;    // (out_features), undefined when bias = false
  // Optional, for inference: the weight in oneDNN's blocked layout, f32 or bf16 (pack()).
  // A forward without a record reads it when defined; a forward with a record (training)
  // reads the live `weight`, so an optimizer step never meets a stale copy.
  PackedWeight packed;

  struct Record {
    Tensor x;  // (..., in) the input, contiguous f32
  };

  Linear() = default;
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true,
         std::uint64_t seed = 0);
  std::int64_t in_features() const;
  std::int64_t out_features() const;
  // Fills `packed` from `weight` (see PackedWeight); call again after changing `weight`.
  void pack(DType dtype = DType::f32);

  // (..., in) -> (..., out): epilogue(x·Wᵀ + b). With a record the epilogue may add a
  // residual but not apply an activation (the backward would need its input).
  Tensor forward(const Tensor& x, const LinearEpilogue& epilogue = {},
                 Record* record = nullptr) const;
  Tensor backward(const Tensor& dy, const Record& record, Linear& grads) const;
  ParameterList parameters(const std::string& prefix = "");
};

struct Embedding {
  Tensor weight;  // (num_embeddings, embedding_dim)

  struct Record {
    std::vector<std::int64_t> ids;  // the looked-up rows, numel(shape) of them
  };

  Embedding() = default;
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, std::uint64_t seed = 0);
  // ids: numel(shape) indices in [0, num_embeddings), row-major over `shape`
  // -> (shape..., embedding_dim): weight[ids]
  Tensor forward(std::span<const std::int64_t> ids, const Shape& shape,
                 Record* record = nullptr) const;
  // dy (shape..., E): grads.weight[ids[i]] += dy[i] for every occurrence (ids repeat).
  // Nothing flows further back (ids are not differentiable).
  void backward(const Tensor& dy, const Record& record, Embedding& grads) const;
  ParameterList parameters(const std::string& prefix = "");
};

// A learned absolute position table: an Embedding over positions offset, offset + 1, ...
struct LearnedPositionalEmbedding {
  Embedding table;  // weight (max_positions, dim)

  using Record = Embedding::Record;

  LearnedPositionalEmbedding() = default;
  LearnedPositionalEmbedding(std::int64_t max_positions, std::int64_t dim, std::uint64_t seed = 0);
  // -> (length, dim): table rows [offset, offset + length)
  Tensor forward(std::int64_t length, std::int64_t offset = 0, Record* record = nullptr) const;
  void backward(const Tensor& dy, const Record& record, LearnedPositionalEmbedding& grads) const;
  ParameterList parameters(const std::string& prefix = "");
};

struct LayerNorm {
  Shape normalized_shape;  // the trailing dimensions normalised over
  double eps = 1e-5;
  Tensor weight;  // (normalized_shape), undefined when elementwise_affine = false
  Tensor bias;    // (normalized_shape), undefined when elementwise_affine = false

  struct Record {
    Tensor x;     // (..., normalized_shape) the input, contiguous f32
    Tensor mean;      // (rows)
    Tensor variance;  // (rows), biased
  };

  LayerNorm() = default;
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x, Record* record = nullptr) const;  // (..., normalized) -> same
  Tensor backward(const Tensor& dy, const Record& record, LayerNorm& grads) const;
  ParameterList parameters(const std::string& prefix = "");
};

// ---------------------------------------------------------------------------------------
// State dicts.

// Copies every entry of `state` into the matching parameter (converted to f32). Throws
// qkv::Error naming the parameter when one is missing or has the wrong shape, and, when
// `strict`, naming any entry that matches no parameter.
void load_state_dict(const ParameterList& parameters, const StateDict& state, bool strict = true);
template <class Module>
void load_state_dict(Module& module, const StateDict& state, bool strict = true) {
  load_state_dict(module.parameters(), state, strict);
}
// The parameters as views (no copy).
StateDict state_dict(const ParameterList& parameters);
template <class Module>
StateDict state_dict(Module& module) {
  return state_dict(module.parameters());
}

}  // namespace qkv::nn
