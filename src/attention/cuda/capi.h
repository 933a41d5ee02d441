/* The C ABI of qkv's CUDA forward (libqkv_cuda.so), for callers that cannot link C++:
 * python/qkv/cuda.py through ctypes, whose Structure mirrors this one field by field.
 * All sizes and strides are int64 (strides in elements); pointers are device pointers. */
#ifndef QKV_CUDA_CAPI_H
#define QKV_CUDA_CAPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QKV_CUDA_ABI_VERSION 1

struct qkv_cuda_forward_args {
  int64_t dtype; /* 0 = bf16, 1 = f16 */
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse; /* contiguous (B, Hq, Lq) f32, or NULL */
  int64_t q_strides[3], k_strides[3], v_strides[3], out_strides[3]; /* batch, head, row */
  int64_t B, Hq, Hkv, Lq, Lk, D;
  double scale;
  int64_t causal;
  int64_t bottom_right;
  int64_t window_left, window_right; /* -1 = unbounded */
  const int32_t* key_lengths;        /* device, B entries, or NULL */
  const float* alibi_slopes;         /* device, Hq entries, or NULL */
  double softcap;                    /* 0 = none */
  int64_t splits;                    /* 0 = automatic, 1 = none, n = split-KV in n */
  void* stream;                      /* cudaStream_t; NULL = default stream */
};

/* The gradients of a forward call (FlashAttention-2's backward): forward's out and lse
 * (required) are read, its splits ignored, its stream used. */
struct qkv_cuda_backward_args {
  struct qkv_cuda_forward_args forward;
  const void* dout;
  int64_t dout_strides[3]; /* batch, head, row */
  float* dq;               /* contiguous (B, Hq, Lq, D) f32 */
  float* dk;               /* contiguous (B, Hkv, Lk, D) f32 */
  float* dv;               /* contiguous (B, Hkv, Lk, D) f32 */
};

int qkv_cuda_abi_version(void);
/* 0 on success; otherwise 1 and the message in error[0..error_size). */
int qkv_cuda_attention_forward(const struct qkv_cuda_forward_args* args, char* error, size_t error_size);
int qkv_cuda_attention_backward(const struct qkv_cuda_backward_args* args, char* error, size_t error_size);
/* 1 when a usable CUDA device is there; else 0 and the reason in reason[0..reason_size). */
int qkv_cuda_available(char* reason, size_t reason_size);

#ifdef __cplusplus
}
#endif
#endif
