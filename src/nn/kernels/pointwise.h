// The non-product loops of a training step, vectorised: GELU (tanh form) forward and
// backward, the softmax cross-entropy of one row, the AdamW update and the sum of squares
// that gradient clipping takes. Internal (src/nn/activation.cpp, src/train/optimizer.cpp).
//
// Each is a plain loop the compiler vectorises, compiled once per ISA variant
// (pointwise_simd128.cpp: SSE2 on x86-64, NEON elsewhere; pointwise_avx2.cpp; and
// pointwise_avx512.cpp, which the avx512, avx512_bf16 and amx rows run) and chosen by the
// one runtime dispatch (attention/kernels/flash.h: selected_isa(), QKV_ISA).
//
// Every variant computes the same bits: the files are compiled without floating-point
// contraction (no FMA, by pragma), every operation is IEEE-rounded in each lane (no
// reciprocal or √ approximations), and sums run over a fixed 16 lanes in every
// variant (whatever the register width), then in one fixed order. So a result never depends
// on the ISA or the thread count, and tests/nn/test_pointwise.cpp checks each variant bit for
// bit against the simd128 one and every kernel against its naive twin (pointwise_naive(): the
// library-math loops these replaced, kept beside them) within a derived bound.
#pragma once

#include <cstdint>

#include "attention/kernels/flash.h"  // qkv::detail::Isa

namespace qkv::nn::detail {

// AdamW's per-tensor scalars, as torch computes them (src/train/optimizer.cpp):
//   θ = θ·keep;  m = β1·m + (1 − β1)·g;  v = β2·v + (1 − β2)·g²;
//   θ −= step_size·m / (√v·inv_sqrt_bias2 + eps)
struct AdamWScalars {
  float keep;             // 1 − lr·weight_decay (1 where the tensor is not decayed)
  float beta1, beta2;
  float step_size;        // lr / (1 − β1ᵗ)
  float inv_sqrt_bias2;   // 1 / √(1 − β2ᵗ)
  float eps;
};

// One row of softmax cross-entropy with label smoothing ε over V classes, target t:
//   loss = (1 − ε)(log Z − x_t) + ε(log Z − mean_v x_v),  log Z = max + log Σ_v e^(x_v − max)
// and, when d is not null, d_v = (p_v − ε/V − (1 − ε)[v = t])·scale, p = softmax(x).
struct CrossEntropyRow {
  double loss;
  std::int64_t argmax;  // the first index of the row's largest value
};

struct PointwiseKernels {
  // y = x / (1 + e^(−2u)), u = √(2/π)(x + 0.044715x³) (= ½x(1 + tanh u)); x, y: n floats.
  // Evaluated in double and rounded once, as the naive twin.
  void (*gelu_tanh)(const float* x, float* y, std::int64_t n);
  // dx = dy·(s + 2x·s(1 − s)·√(2/π)(1 + 3·0.044715x²)), s = 1 / (1 + e^(−2u)); in float.
  void (*gelu_tanh_backward)(const float* dy, const float* x, float* dx, std::int64_t n);
  // p, m, v, g: n floats each (θ, exp_avg, exp_avg_sq, gradient); p, m, v updated in place.
  void (*adamw)(const AdamWScalars& s, float* p, float* m, float* v, const float* g, std::int64_t n);
  // Σ x² in float (every term >= 0, so no cancellation); x: n floats.
  float (*sum_squares)(const float* x, std::int64_t n);
  // x: V floats (one row of logits); d: V floats or null (no gradient). t in [0, V).
  CrossEntropyRow (*cross_entropy_row)(const float* x, std::int64_t V, std::int64_t t,
                                       double label_smoothing, double scale, float* d);
};

// The variant `isa` runs (simd128, avx2, or avx512 for every row above it).
const PointwiseKernels& pointwise_kernels(qkv::detail::Isa isa);
// The variant of selected_isa(), or the naive twins while force_naive_pointwise(true).
const PointwiseKernels& pointwise_kernels();
// The naive twins: scalar loops over the C library's exp (float for the backward and the
// loss's exponentials, double for the forward), sums in plain order.
const PointwiseKernels& pointwise_naive();
// Benchmarks only (bench/training.cpp's before/after): pointwise_kernels() returns the naive
// twins while set. Not for concurrent use with training in other threads.
void force_naive_pointwise(bool naive) noexcept;

}  // namespace qkv::nn::detail
