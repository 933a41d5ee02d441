// Scaled dot-product attention and its family.
//
//   out = softmax(scale · q·kᵀ [softcap] [+ alibi] [+ float mask] [masked → −∞]) [dropout] · v
//
// Layout (any strides, so (B, L, H, D) projections need only a permute, no copy):
//   q:   (B, Hq,  Lq, Dk)
//   k:   (B, Hkv, Lk, Dk)      Hq % Hkv == 0; query head h reads key/value head h / (Hq / Hkv)
//   v:   (B, Hkv, Lk, Dv)      (GQA/MQA, as PyTorch's enable_gqa / repeat_interleave)
//   out: (B, Hq,  Lq, Dv)      dtype of q; q, k and v share one floating dtype
//
// f64: q, k and v all f64 (mixing f64 with another dtype is an error naming them) are
// computed by the reference in double from the f64 values themselves, with no rounding to
// f32 anywhere: out, lse and probs are f64, and so are the backward's dq, dk and dv
// (dout, out and lse must then be f64 too). impl automatic picks the reference for f64;
// impl fast (f32 accumulation) refuses f64 with qkv::Error(type). This is the path for
// gradient checks by finite differences (torch.autograd.gradcheck in float64). Float masks
// may be f64 whatever q's dtype: the reference reads every mask value exactly, as double;
// the fast kernels round it to f32 as they read it.
//
// Semantics (docs/attention.md's table says the same):
// - scale defaults to 1/sqrt(Dk).
// - The score of query i and key j is built in this order: s = scale·(q_i·k_j);
//   softcap c: s = c·tanh(s/c); ALiBi: s −= slope_h·|i' − j|; float mask: s += mask;
//   then every masked position (causal, window, key length, bool mask false) is −∞.
// - The diagonal: i' = i for Alignment::top_left (PyTorch SDPA's is_causal,
//   tril(ones(Lq, Lk))), i' = i + (Lk_b − Lq) for Alignment::bottom_right
//   (FlashAttention, KV caches: the last query sees every key), where Lk_b is the
//   batch's key length (key_lengths[b], or Lk). Causal keeps j <= i'; a window
//   (left, right) keeps i' − left <= j <= i' + right; −1 means unbounded on that side.
// - mask: bool (true = attend, as PyTorch SDPA) or floating (added to the scores),
//   broadcast to (B, Hq, Lq, Lk) with NumPy's rules from any rank <= 4, e.g. (Lq, Lk),
//   (B, 1, Lq, Lk), (1, Hq, Lq, Lk), (B, Hq, Lq, Lk).
// - key_lengths[b]: keys j >= key_lengths[b] of batch b are masked (padding).
// - A fully masked row has output 0 (not NaN), log-sum-exp −∞ and probabilities 0.
// - Dropout: each probability is kept with probability 1 − p and scaled by 1/(1 − p);
//   whether (b, h, i, j) is kept is a pure function of (seed, b, h, i, j), so the
//   result is identical for a seed whatever the thread count. p = 1 drops everything.
// - lse (B, Hq, Lq), f32 (f64 for f64 inputs): log Σ_j exp(s_ij) over unmasked keys,
//   before dropout.
// - probs (B, Hq, Lq, Lk), f32 (f64 for f64 inputs): the softmax before dropout (what a
//   heatmap shows).
// - NaN in q, k or v reaches only the output rows whose computation reads it: a NaN
//   score makes its row NaN, and so does a +inf score (from the inputs or a float mask),
//   as in PyTorch, whose softmax takes exp(+inf − +inf); a key that is masked or dropped
//   for a row is never read by that row, so a NaN in its value cannot leak in.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "qkv/tensor.h"

namespace qkv {

enum class Alignment { top_left, bottom_right };

struct Window {
  std::int64_t left = -1;   // keys up to `left` before the diagonal; −1 = unbounded
  std::int64_t right = -1;  // keys up to `right` after the diagonal; −1 = unbounded
};

enum class AttentionImpl {
  automatic,  // fast, except that probabilities (return_probs) and f64 inputs go to the
              // reference
  reference,  // the naive double-precision twin every fast path is tested against; the
              // only one that takes f64 (computed in double end to end)
  fast,       // the fused tiled kernel (f32 accumulation, never materializes Lq×Lk), ISA
              // chosen at run time or by QKV_ISA (simd128, avx2, avx512, avx512_bf16,
              // amx, amx_emulated: src/attention/kernels/flash.h; scalar is simd128's
              // former name); return_probs falls back to the reference; f64 inputs are
              // a qkv::Error(type)
};

struct AttentionOptions {
  std::optional<double> scale;               // default 1/sqrt(Dk); must be finite
  bool causal = false;
  Alignment alignment = Alignment::top_left;  // diagonal for causal and window
  Tensor mask;                     // undefined = none; bool or float, see above
  std::vector<std::int64_t> key_lengths;  // empty = all Lk keys; else B entries in [0, Lk]
  std::optional<Window> window;
  std::vector<float> alibi_slopes;  // empty = none; else Hq slopes
  std::optional<double> softcap;    // c > 0
  double dropout_p = 0.0;           // in [0, 1]
  std::uint64_t seed = 0;           // dropout seed
  bool return_lse = false;
  bool return_probs = false;
  AttentionImpl impl = AttentionImpl::automatic;
};

struct AttentionResult {
  Tensor out;    // (B, Hq, Lq, Dv), dtype of q
  Tensor lse;    // (B, Hq, Lq) f32 (f64 for f64 inputs), when return_lse
  Tensor probs;  // (B, Hq, Lq, Lk) f32 (f64 for f64 inputs), when return_probs
};

// The full form: output plus whatever the options ask for.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options = {});

// out: (B, Hq, Lq, Dv)
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

// Gradients of out = attention(q, k, v, options).out with respect to q, k and v, given
// dout = ∂loss/∂out (B, Hq, Lq, Dv). `out` and `lse` are what the forward returned for the
// same inputs and options (options.return_lse = true); the backward recomputes the
// probabilities tile by tile from lse (FlashAttention-2's backward), so nothing of size
// Lq×Lk is kept, and regenerates dropout from (seed, b, h, i, j). Every option of the
// forward is supported. A fully masked row (lse −∞) contributes nothing.
//   -> dq (B, Hq, Lq, Dk), dk (B, Hkv, Lk, Dk), dv (B, Hkv, Lk, Dv), contiguous f32
//   (under GQA, dk and dv sum over the query heads sharing each key/value head).
// options.impl picks the implementation as for the forward: reference (double,
// materialized probabilities) or fast (automatic). f64 as for the forward: with q, k, v
// f64, dout and out must be f64 and lse f64 (what the forward returned), and dq, dk, dv
// are f64, computed in double by the reference (automatic picks it; fast refuses f64);
// otherwise dout and out are f32, bf16 or f16 and lse f32.
struct AttentionGradients {
  Tensor dq;
  Tensor dk;
  Tensor dv;
};
AttentionGradients attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& out, const Tensor& lse,
                                      const AttentionOptions& options = {});

// The raw form of the classic explanations: softmax(X·Xᵀ)·X, with no projections and,
// by default, no scaling. x: (L, D) or (B, L, D) -> same shape, f32/bf16/f16 (f64:
// computed in double by the reference).
Tensor self_attention_raw(const Tensor& x, std::optional<double> scale = 1.0);

// The instruction set the fast kernel runs with in this process ("simd128", "avx2",
// "avx512", "avx512_bf16", "amx"): the best this CPU supports, or QKV_ISA when set, which
// may also name "amx_emulated" (an unknown or unsupported value throws qkv::Error;
// "scalar" selects simd128).
const char* fast_kernel_isa();

// Throws qkv::Error naming the argument when the inputs or options are invalid;
// returns normally otherwise. Every implementation calls this first.
void validate_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const AttentionOptions& options);

}  // namespace qkv
