// qkv::nn functional forms: elementwise helpers, linear (oneDNN matmul), layer norm,
// activations and positional encodings — each beside its backward.
//
// Conventions of every backward in qkv::nn (llm.c's): it takes the gradient of the output
// and what the forward kept, returns the gradient of the input (a fresh tensor) and ADDS
// the gradients of the parameters into caller-owned buffers (contiguous f32, zeroed by the
// caller for one batch's gradient). Each quotes the forward line it differentiates.
// Activations are f32; inputs of other floating dtypes are converted.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::nn {

// ---------------------------------------------------------------------------------------
// Elementwise helpers, used by every layer and model. Elementwise, so splitting across
// threads changes no bit of a result.

// a + b, same shape; either may be any strided view (an expanded table, say).
// -> contiguous f32
Tensor add(const Tensor& a, const Tensor& b);
// a += b in place (the residual add); a contiguous f32 owned by the caller, b any view of
// the same shape.
void add_(Tensor& a, const Tensor& b);
// a *= s in place; a contiguous f32 owned by the caller.
void scale_(Tensor& a, float s);

// ---------------------------------------------------------------------------------------
// Linear.

// What linear() can apply to x·Wᵀ + b inside oneDNN's product (its post-ops), instead of
// separate passes over the output:  y = activation(x·Wᵀ + b) + residual.
enum class LinearActivation { none, relu, gelu_erf, gelu_tanh };
struct LinearEpilogue {
  LinearActivation activation = LinearActivation::none;
  Tensor residual;  // (..., out), the shape of y, any strides; or undefined
};

// y = epilogue(x·Wᵀ + b) (torch.nn.functional.linear without an epilogue), through
// oneDNN's f32 matmul.
//   x: (..., in) any strides   weight: (out, in)   bias: (out) or undefined  ->  (..., out)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const LinearEpilogue& epilogue = {});

// A linear weight (out, in) reordered once into the blocked layout oneDNN's matmul reads
// fastest. With a plain (out, in) weight the matmul re-packs W on every call; decoding one
// row against all of W then reads W twice and writes it once. An owned copy, immutable:
// changing the tensor it was made from does not change it (Linear::pack makes one).
//
// dtype bf16 stores W rounded to bf16 (half the bytes to read, for memory-bound decoding);
// x is then rounded to bf16 as well, since oneDNN multiplies bf16 by bf16 only, and the
// products are accumulated and returned in f32. Not exact: about 3 significant digits per
// factor. Needs oneDNN's bf16 matmul on this CPU (AVX512-BF16 or AMX), else qkv::Error
// (ErrorKind::type).
class PackedWeight {
 public:
  struct Impl;
  PackedWeight() = default;
  // weight (out, in), any floating dtype and strides; dtype f32 or bf16.
  explicit PackedWeight(const Tensor& weight, DType dtype = DType::f32);
  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  std::int64_t out_features() const;
  std::int64_t in_features() const;
  // Whether oneDNN chose a plain, unblocked layout: f32 on oneDNN 2.6 without AVX-512,
  // where it has no blocked kernels and "packing" only transposes the rows.
  bool plain_layout() const;
  const Impl& impl() const;

 private:
  std::shared_ptr<const Impl> impl_;
};
// linear() with a packed weight: the same result as with the tensor it was made from.
Tensor linear(const Tensor& x, const PackedWeight& weight, const Tensor& bias = {},
              const LinearEpilogue& epilogue = {});

// forward: y = x·Wᵀ + b (the epilogue's residual passes dy through unchanged, so it is the
// caller's). dy (..., out), x (..., in), weight (out, in) -> dx (..., in);
// dweight (out, in) += dyᵀ·x; *dbias (out) += Σ dy when dbias is given and defined.
// Matrix products through oneDNN.
Tensor linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, Tensor& dweight,
                       Tensor* dbias);

// ---------------------------------------------------------------------------------------
// Layer normalization: one implementation, oneDNN's layer normalization primitives, forward
// (inference, or training with the per-row statistics) and backward.

// Over the trailing `normalized` dimensions (torch.nn.functional.layer_norm; biased
// variance, as torch), N = their product:
//   x: (..., N1..Nk)   weight, bias: (N1..Nk) or undefined  ->  (..., N1..Nk)
// When mean and variance are given they receive (rows) f32 with rows = numel / N: each
// row's mean and (biased) variance, what layer_norm_backward needs.
Tensor layer_norm(const Tensor& x, const Shape& normalized, const Tensor& weight,
                  const Tensor& bias, double eps = 1e-5, Tensor* mean = nullptr,
                  Tensor* variance = nullptr);
// forward: y = x̂·w + b,  x̂ = (x − mean)·rstd,  rstd = 1/sqrt(variance + eps), per row of N
//   dx = rstd·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)),  dx̂ = dy·w;  dw = Σ dy·x̂,  db = Σ dy
// dy, x (..., N); mean, variance (rows) from the forward; weight (N) or undefined (then
// no dweight/dbias) -> dx (..., N); *dweight += dw and *dbias += db (N) where given.
Tensor layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                           const Tensor& variance, const Tensor& weight, double eps,
                           Tensor* dweight, Tensor* dbias);

// ---------------------------------------------------------------------------------------
// Activations. Any shape -> the same shape, contiguous f32.

enum class GeluApproximation { none, tanh };  // torch's approximate="none" | "tanh"
// none: x·Φ(x) = ½x(1 + erf(x/√2)); tanh: ½x(1 + tanh(√(2/π)(x + 0.044715x³))).
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
// The linear() epilogue that applies that form of GELU.
inline LinearActivation linear_activation(GeluApproximation approximate) {
  return approximate == GeluApproximation::tanh ? LinearActivation::gelu_tanh
                                                : LinearActivation::gelu_erf;
}
Tensor relu(const Tensor& x);  // x > 0 ? x : 0 (NaN stays NaN, as torch)

// dx = dy · f'(x), x the forward's input.
Tensor gelu_backward(const Tensor& dy, const Tensor& x,
                     GeluApproximation approximate = GeluApproximation::none);
Tensor relu_backward(const Tensor& dy, const Tensor& x);
// The same in place: dy (contiguous f32, the caller's) becomes dx. Saves a pass over
// memory where the incoming gradient is not needed afterwards.
void relu_backward_(Tensor& dy, const Tensor& x);

// ---------------------------------------------------------------------------------------
// Positional encodings.

// The sinusoidal table of "Attention Is All You Need" (§3.5):
//   pe[p, 2i] = sin(p / 10000^(2i/D)),  pe[p, 2i+1] = cos(p / 10000^(2i/D)).
// -> (L, D); an odd D ends with a sin column. No parameters: its gradient is the identity
// on what it is added to.
Tensor sinusoidal_positional_encoding(std::int64_t length, std::int64_t dim, double base = 10000.0);

// tensor2tensor's timing signal (get_timing_signal_1d), which the Universal Sentence
// Encoder adds: the same sines and cosines as above, but the sines in the first half of
// the row and the cosines in the second, and the frequencies spread so the last is
// exactly 1/max_timescale:
//   inv_i = min_timescale · exp(−i · ln(max_timescale / min_timescale) / (D/2 − 1)),  i < D/2
//   pe[p] = [sin(p·inv_0), …, sin(p·inv_{D/2−1}), cos(p·inv_0), …, cos(p·inv_{D/2−1})]
// Computed in f32 step by step as TensorFlow computes it (the increment, the exponent,
// p·inv rounded to f32), the sine and cosine of that f32 angle to f32 accuracy, so a
// converted model sees the table it was trained with. -> (L, D); D even, >= 4.
Tensor timing_signal(std::int64_t length, std::int64_t dim, double min_timescale = 1.0,
                     double max_timescale = 1.0e4);

// Rotary position embedding, rotate-half form (GPT-NeoX, Llama in HF transformers):
//   θ_i = base^(−2i/D), angle = (offset + l)·θ_i for i < D/2,
//   out[..., i]       = x[i]·cos − x[i + D/2]·sin
//   out[..., i + D/2] = x[i + D/2]·cos + x[i]·sin
// x: (B, H, L, D) any strides, D even -> (B, H, L, D) contiguous. `offset` is the position
// of row 0 (the number of tokens already in a KV cache).
Tensor apply_rope(const Tensor& x, std::int64_t offset = 0, double base = 10000.0);
// RoPE is a rotation of each pair (i, i + D/2): its backward rotates dy back.
// dy (B, H, L, D) -> dx (B, H, L, D).
Tensor apply_rope_backward(const Tensor& dy, std::int64_t offset = 0, double base = 10000.0);

// ALiBi slopes for `num_heads` heads (Press et al. 2022, the reference get_slopes):
// for n a power of two, slope_h = 2^(−8(h+1)/n); otherwise, with m the largest power of
// two below n, the m slopes for m followed by every other slope for 2m, n − m of them.
// Feed them to AttentionOptions::alibi_slopes.
std::vector<float> alibi_slopes(std::int64_t num_heads);

// x: (B, L, D) + table (L', D) with L' >= L -> (B, L, D): x + table[:L]
Tensor add_positional(const Tensor& x, const Tensor& table);
// x: (B, L, D) ++ table (L', P) with L' >= L -> (B, L, D + P): the table's rows appended
Tensor concat_positional(const Tensor& x, const Tensor& table);

}  // namespace qkv::nn
