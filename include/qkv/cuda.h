// Attention on NVIDIA GPUs: FlashAttention-2-style kernels for Hopper (sm_90).
//
// Built when CMake finds a CUDA compiler (QKV_CUDA=AUTO, the default; ON requires it, OFF
// skips it). Without it, or without a GPU at run time, every function here exists and
// throws qkv::Error saying why (available() and unavailable_reason() ask first).
//
// Two forms:
// - The device form (as FlashAttention's C++ entry points): pointers to GPU memory and
//   their strides, for callers that keep tensors on the GPU (the Python module with CUDA
//   torch tensors, `qkv bench --device cuda`).
// - The host form: qkv::Tensor in host memory, copied to the GPU, computed, copied back;
//   the same semantics as qkv::attention (attention.h) for the options it supports, so the
//   tests compare it with the CPU reference directly.
//
// Supported: bf16 and f16 inputs with f32 accumulation; Dk == Dv in {64, 128, 256};
// causal in both alignments; key lengths (padding, varlen); sliding window; ALiBi;
// softcap; GQA/MQA (Hq % Hkv == 0); scale; log-sum-exp out. Not supported on the GPU
// (qkv::Error names it): f32 inputs, masks given as tensors, dropout, probabilities.
#pragma once

#include <cstdint>
#include <string>

#include "qkv/attention.h"

namespace qkv::cuda {

// True when qkv was built with CUDA and a CUDA device can be used.
bool available();
// Empty when available(); otherwise why not ("qkv was built without CUDA", "no CUDA
// device: <driver's message>").
std::string unavailable_reason();
// The device's name ("NVIDIA H100 80GB HBM3"); throws when !available().
std::string device_name();

enum class ElementType { bf16, f16 };

// Strides in elements; the last dimension (head dim) is contiguous.
struct Strides {
  std::int64_t batch = 0, head = 0, row = 0;
};

// One attention call on device memory. Shapes as in attention.h:
//   q (B, Hq, Lq, D), k and v (B, Hkv, Lk, D), out (B, Hq, Lq, D), lse (B, Hq, Lq) f32.
struct DeviceAttention {
  ElementType dtype = ElementType::bf16;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;  // contiguous (B, Hq, Lq); null = not wanted (forward)
  Strides q_strides, k_strides, v_strides, out_strides;
  std::int64_t B = 0, Hq = 0, Hkv = 0, Lq = 0, Lk = 0, D = 0;
  float scale = 0.0f;  // the caller resolves the default 1/sqrt(D)
  bool causal = false;
  Alignment alignment = Alignment::top_left;
  std::int64_t window_left = -1, window_right = -1;  // −1 = unbounded (no window: both −1)
  const std::int32_t* key_lengths = nullptr;         // device, B entries; null = all Lk
  const float* alibi_slopes = nullptr;               // device, Hq slopes; null = none
  float softcap = 0.0f;                              // 0 = none
};

// The gradients of a forward call: dout as out, dq/dk/dv contiguous f32
// (B, Hq, Lq, D), (B, Hkv, Lk, D), (B, Hkv, Lk, D); lse must be the forward's.
struct DeviceAttentionBackward {
  DeviceAttention forward;  // its out and lse are read, not written
  const void* dout = nullptr;
  Strides dout_strides;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};

// Launch on `stream` (a cudaStream_t; null = the default stream). Arguments are checked
// (shapes, head dim, alignment of pointers and strides) before anything is launched;
// a failed launch throws with the CUDA error's text.
void attention_forward(const DeviceAttention& args, void* stream = nullptr);
void attention_backward(const DeviceAttentionBackward& args, void* stream = nullptr);

// The host form: same result fields as qkv::attention (out in q's dtype, lse when
// options.return_lse).
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options = {});
AttentionGradients attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                      const Tensor& v, const Tensor& out, const Tensor& lse,
                                      const AttentionOptions& options = {});

}  // namespace qkv::cuda
