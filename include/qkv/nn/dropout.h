// qkv::nn::Dropout — inverted dropout for residual branches and embeddings (torch.nn.Dropout's
// semantics, not its random numbers).
//
// In training each element is kept with probability 1 − p and scaled by 1/(1 − p), so the
// expectation of every element is unchanged; in eval mode (training = false) and for p = 0
// the module is the identity.
//
// The mask is a pure function of (seed, offset + element index), the counter-based generator
// of qkv/rng.h that the attention's dropout draws from too:
//
//   keep(i)  ⇔  counter_uniform(seed, offset + i) >= p      i: the flat row-major index in x
//
// Nothing depends on what was drawn before or on which thread handles an element, so the
// result for a seed is the same for any thread count (qkv/threads.h), and the backward
// regenerates the mask from its record instead of storing it. `offset` lets several dropout
// sites of one step share a seed without sharing masks: give them disjoint counter ranges
// (site k at offset k·numel, say), or different seeds.
//
// DropoutDraw is what a training forward through a layer or model takes: the probability
// and the seed of its every dropout site, one seed per step from which each site derives
// its own (site()), so that no two sites share a mask.
#pragma once

#include <cstdint>

#include "qkv/rng.h"
#include "qkv/tensor.h"

namespace qkv::nn {

// The dropout of one training forward: p at every site (torch's layers take one `dropout`
// for all of theirs) and the seed the sites' masks derive from. The default, p = 0, is eval
// mode: a layer given it computes exactly what it computes without one.
struct DropoutDraw {
  double p = 0.0;          // in [0, 1)
  std::uint64_t seed = 0;  // the step's

  bool active() const { return p > 0.0; }
  // Sub-site k's draw: the same p, seed mix64(mix64(seed) + k). mix64 is a bijection, so
  // distinct k give distinct seeds and distinct mask streams; a model hands each layer a
  // site and the layer hands each of its dropouts one of its own (transformer.h).
  DropoutDraw site(std::uint64_t k) const { return {p, mix64(mix64(seed) + k)}; }
};

struct Dropout {
  double p = 0.0;         // the probability of dropping an element, in [0, 1)
  bool training = true;   // false: eval mode, the identity (as torch's module.eval())

  // What the backward needs to regenerate the mask: no tensor is kept.
  struct Record {
    Shape shape;             // x's shape
    bool dropped = false;    // whether the forward applied a mask (training and p > 0)
    double p = 0.0;
    std::uint64_t seed = 0, offset = 0;
  };

  Dropout() = default;
  // Throws qkv::Error naming p unless 0 <= p < 1.
  explicit Dropout(double p, bool training = true);

  // x (...) any floating dtype but f64, any strides -> (...) f32: x ⊙ keep / (1 − p).
  // The identity when !training or p == 0: x as a contiguous f32 tensor, which shares x's
  // storage when x already is one. Throws qkv::Error naming p unless 0 <= p < 1.
  Tensor forward(const Tensor& x, std::uint64_t seed, std::uint64_t offset = 0,
                 Record* record = nullptr) const;
  // dy (record.shape) -> dx = dy ⊙ keep / (1 − p), the mask regenerated from the record
  // (dy itself, as contiguous f32, when the forward was the identity). Throws qkv::Error
  // naming both shapes when dy's is not the forward's. No parameters, so no grads module.
  Tensor backward(const Tensor& dy, const Record& record) const;
};

}  // namespace qkv::nn
