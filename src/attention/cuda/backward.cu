// Attention backward on the GPU: FlashAttention-2's backward (Dao 2023,
// https://arxiv.org/abs/2307.08691, Algorithm 2) with mma.sync m16n8k16 tensor-core tiles
// (bf16 or f16 operands, f32 accumulation).
//
// The forward it differentiates, for query i of head h and key j (attention.h):
//   s_ij = scale·(q_i·k_j);  softcap c: t_ij = tanh(s_ij / c), s_ij ← c·t_ij
//   s_ij ← s_ij − slope_h·|i' − j|;  masked (causal, window, key length): −∞
//   P_ij = exp(s_ij − lse_i);  out_i = Σ_j P_ij·v_j
// and its gradients (backward_reference.cpp is the double-precision twin):
//   D_i   = dO_i·out_i                          (the preprocessing kernel)
//   dv_j += P_ij·dO_i
//   dP_ij = dO_i·v_j
//   dS_ij = P_ij·(dP_ij − D_i)·(1 − t_ij²)·scale   (the last two factors: softcap, scale)
//   dk_j += dS_ij·q_i,   dq_i += dS_ij·k_j
//
// Work split: one CTA per (tile of BC keys, key/value head, batch). It keeps the tile's K
// and V in shared memory and its dK and dV in registers, and walks every query tile of
// every query head of its GQA group, so dk and dv are written once, without atomics, and
// already summed over the group. dq gets contributions from every key tile, so those go
// through f32 atomics into dq (zeroed by the preprocessing kernel).
//
// Inside a CTA, warp w owns keys 16·(w mod BC/16) ..+16 of the tile: it computes the
// transposed scores Sᵀ (its 16 keys × BR queries), whose accumulator layout is already the
// A-operand layout of the next products (Pᵀ·dO, dSᵀ·Q), so P and dS never leave registers
// for dK and dV. Only dS goes through shared memory, for dQ = dS·K, where the warps split
// the query rows instead. For head dim 256 the dK/dV columns are split over DW warps per
// key group (registers), which recompute the same Sᵀ and dPᵀ.
//
// This file is the device form only (CUDA runtime and qkv's headers, so libqkv_cuda.so can
// carry it); the host form over qkv::Tensor is host_backward.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attention/cuda/check.h"
#include "attention/cuda/common.cuh"
#include "qkv/cuda.h"
#include "qkv/error.h"

namespace qkv::cuda {
namespace {

// ---------------------------------------------------------------------------------------
// Device helpers beyond common.cuh: unpacking a register pair, 4-byte copies (lse and D_i
// rows), and f32 atomics for dq.

using detail::cp_async_commit;
using detail::ElementTraits;
using detail::kLog2e;
using detail::shared_address;

template <class T>
__device__ __forceinline__ float2 unpack2(std::uint32_t x);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(std::uint32_t x) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&x));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(std::uint32_t x) {
  return __half22float2(*reinterpret_cast<__half2*>(&x));
}

template <class T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  return ElementTraits<T>::pack(lo, hi);
}

// Pointer forms of common.cuh's ldmatrix and cp.async (this file addresses padded tiles).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
  detail::ldmatrix_x4(r, shared_address(p));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
  detail::ldmatrix_x4_trans(r, shared_address(p));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  detail::cp_async_16(shared_address(dst), src, valid);
}
// 4 bytes, zero-filled when !valid (src must still be a mapped address).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_wait_all() { detail::cp_async_wait<0>(); }

template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  detail::mma_16816<T>(c, a, b0, b1);
}

__device__ __forceinline__ void atomic_add2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));  // one vector red on sm_90
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// ---------------------------------------------------------------------------------------
// Kernel arguments, resolved on the host.

struct Params {
  const void* q;     // (B, Hq, Lq, D)
  const void* k;     // (B, Hkv, Lk, D)
  const void* v;     // (B, Hkv, Lk, D)
  const void* out;   // (B, Hq, Lq, D)
  const void* dout;  // (B, Hq, Lq, D)
  const float* lse;  // (B, Hq, Lq) contiguous
  float* delta;      // (B, Hq, Lq) contiguous: D_i = dO_i·out_i (workspace)
  float* dq;         // (B, Hq, Lq, D) contiguous
  float* dk;         // (B, Hkv, Lk, D) contiguous
  float* dv;         // (B, Hkv, Lk, D) contiguous
  Strides qs, ks, vs, os, dos;
  std::int64_t B, Hq, Hkv, Lq, Lk;
  int group;  // Hq / Hkv
  float scale;
  float softcap;  // > 0 only in the SOFTCAP instantiation
  bool bottom_right;
  // The allowed band, relative to the diagonal i': i' − left <= j <= i' + right; has_* false
  // = unbounded. Causal is right = min(right, 0).
  bool has_left, has_right;
  std::int64_t left, right;
  const std::int32_t* key_lengths;  // null = Lk
  const float* alibi;               // null = none
};

// ---------------------------------------------------------------------------------------
// Preprocessing: one warp per query row. D_i = Σ_d dO_id·out_id in f32, and the row of dq
// zeroed for the main kernel's atomics.
template <class T>
__global__ void __launch_bounds__(256) backward_preprocess(Params p, int D) {
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const std::int64_t rows = p.B * p.Hq * p.Lq;
  if (row >= rows) return;
  const std::int64_t i = row % p.Lq;
  const std::int64_t h = (row / p.Lq) % p.Hq;
  const std::int64_t b = row / (p.Lq * p.Hq);
  const T* o = static_cast<const T*>(p.out) + b * p.os.batch + h * p.os.head + i * p.os.row;
  const T* dO = static_cast<const T*>(p.dout) + b * p.dos.batch + h * p.dos.head + i * p.dos.row;
  float* dq = p.dq + row * D;
  float sum = 0.0f;
  for (int d = lane * 2; d < D; d += 64) {
    const float2 x = unpack2<T>(*reinterpret_cast<const std::uint32_t*>(o + d));
    const float2 y = unpack2<T>(*reinterpret_cast<const std::uint32_t*>(dO + d));
    sum += x.x * y.x + x.y * y.y;
    *reinterpret_cast<float2*>(dq + d) = make_float2(0.0f, 0.0f);
  }
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) p.delta[row] = sum;
}

// ---------------------------------------------------------------------------------------
// The main kernel. T: element type; D: head dim; BC keys per CTA; BR queries per step; DW
// warps share one 16-key group (splitting dK/dV's columns); SOFTCAP: c·tanh(s/c) applied.
template <int D, int BC, int BR, int DW>
struct Tile {
  static constexpr int kWarps = (BC / 16) * DW;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kPad = 8;            // 16 bytes per row: ldmatrix rows hit distinct banks
  static constexpr int kRow = D + kPad;     // elements per row of K, V, Q, dO in shared memory
  static constexpr int kRowS = BR + kPad;   // elements per row of dSᵀ
  static constexpr int kDW = D / DW;        // dK/dV columns per warp
  static constexpr std::size_t kSmemElems =
      static_cast<std::size_t>(2 * BC * kRow + 4 * BR * kRow + BC * kRowS);
  static constexpr std::size_t kSmemBytes = kSmemElems * 2 + 4 * BR * sizeof(float);
  static_assert(BC % 16 == 0 && BR % 16 == 0 && D % 64 == 0 && kDW % 16 == 0, "tile shape");
};

template <class T, int D, int BC, int BR, int DW, bool SOFTCAP>
__global__ void __launch_bounds__(Tile<D, BC, BR, DW>::kThreads, 1) backward_main(Params p) {
  using Cfg = Tile<D, BC, BR, DW>;
  constexpr int kRow = Cfg::kRow, kRowS = Cfg::kRowS, kDW = Cfg::kDW;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);  // [BC][kRow]
  T* sV = sK + BC * kRow;                  // [BC][kRow]
  T* sQ = sV + BC * kRow;                  // [2][BR][kRow] (double buffered)
  T* sdO = sQ + 2 * BR * kRow;             // [2][BR][kRow]
  T* sdS = sdO + 2 * BR * kRow;            // [BC][kRowS]: dSᵀ (keys × queries), scaled
  float* sLse = reinterpret_cast<float*>(sdS + BC * kRowS);  // [2][BR]
  float* sDelta = sLse + 2 * BR;                             // [2][BR]

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t4 = lane % 4;  // the fragment's row group and column pair
  const int kw = warp % (BC / 16), dw = warp / (BC / 16);
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x) * BC;
  const std::int64_t hk = blockIdx.y, b = blockIdx.z;
  // Batch b's key length, clamped to [0, Lk] so that a bad entry cannot read past k and v.
  const std::int64_t Lk_b = p.key_lengths ? max(std::int64_t{0}, min(std::int64_t{p.key_lengths[b]}, p.Lk)) : p.Lk;
  const std::int64_t off = p.bottom_right ? Lk_b - p.Lq : 0;  // i' = i + off

  float dk[kDW / 8][4], dv[kDW / 8][4];  // this warp's 16 keys × kDW columns
#pragma unroll
  for (int n = 0; n < kDW / 8; ++n)
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[n][c] = dv[n][c] = 0.0f;

  // The query range any key of [j0, j1] may see: i' + right >= j0 and i' − left <= j1.
  const std::int64_t j1 = (j0 + BC < Lk_b ? j0 + BC : Lk_b) - 1;
  std::int64_t i_begin = 0, i_end = p.Lq;
  if (p.has_right && j0 - off - p.right > i_begin) i_begin = j0 - off - p.right;
  if (p.has_left && j1 - off + p.left + 1 < i_end) i_end = j1 - off + p.left + 1;
  const std::int64_t tile_begin = i_begin / BR;
  const std::int64_t tiles = (j0 < Lk_b && i_end > i_begin) ? (i_end + BR - 1) / BR - tile_begin : 0;
  const std::int64_t steps = tiles * p.group;  // (head of the group, query tile) pairs

  if (steps > 0) {
    // K and V of this tile, rows past the key length zero-filled (their gradients stay 0).
    const T* kg = static_cast<const T*>(p.k) + b * p.ks.batch + hk * p.ks.head;
    const T* vg = static_cast<const T*>(p.v) + b * p.vs.batch + hk * p.vs.head;
    for (int c = tid; c < BC * (D / 8); c += Cfg::kThreads) {
      const int r = c / (D / 8), col = (c % (D / 8)) * 8;
      const std::int64_t j = j0 + r;
      const bool in = j < Lk_b;
      cp_async16(sK + r * kRow + col, in ? kg + j * p.ks.row + col : kg, in);
      cp_async16(sV + r * kRow + col, in ? vg + j * p.vs.row + col : vg, in);
    }
  }

  // Issues the copies of step s (head, query tile) into buffer s % 2.
  auto load_step = [&](std::int64_t s) {
    const int buf = static_cast<int>(s % 2);
    const std::int64_t h = hk * p.group + s / tiles;
    const std::int64_t i0 = (tile_begin + s % tiles) * BR;
    const T* qg = static_cast<const T*>(p.q) + b * p.qs.batch + h * p.qs.head;
    const T* dog = static_cast<const T*>(p.dout) + b * p.dos.batch + h * p.dos.head;
    T* q_dst = sQ + buf * BR * kRow;
    T* do_dst = sdO + buf * BR * kRow;
    for (int c = tid; c < BR * (D / 8); c += Cfg::kThreads) {
      const int r = c / (D / 8), col = (c % (D / 8)) * 8;
      const std::int64_t i = i0 + r;
      const bool in = i < p.Lq;
      cp_async16(q_dst + r * kRow + col, in ? qg + i * p.qs.row + col : qg, in);
      cp_async16(do_dst + r * kRow + col, in ? dog + i * p.dos.row + col : dog, in);
    }
    if (tid < BR) {
      const std::int64_t i = i0 + tid;
      const bool in = i < p.Lq;
      const std::int64_t at = (b * p.Hq + h) * p.Lq + (in ? i : 0);
      cp_async4(sLse + buf * BR + tid, p.lse + at, in);
      cp_async4(sDelta + buf * BR + tid, p.delta + at, in);
    }
  };

  if (steps > 0) load_step(0);
  cp_async_commit();

  for (std::int64_t s = 0; s < steps; ++s) {
    cp_async_wait_all();
    __syncthreads();  // step s's tiles are in; every warp is done with step s − 1
    if (s + 1 < steps) load_step(s + 1);
    cp_async_commit();

    const int buf = static_cast<int>(s % 2);
    const std::int64_t h = hk * p.group + s / tiles;
    const std::int64_t i0 = (tile_begin + s % tiles) * BR;
    const T* tQ = sQ + buf * BR * kRow;
    const T* tdO = sdO + buf * BR * kRow;
    const float* tLse = sLse + buf * BR;
    const float* tDelta = sDelta + buf * BR;

    // Sᵀ = K_w·Qᵀ and dPᵀ = V_w·dOᵀ: 16 keys × BR queries, reduced over D.
    float st[BR / 8][4], dpt[BR / 8][4];
#pragma unroll
    for (int n = 0; n < BR / 8; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) st[n][c] = dpt[n][c] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t ak[4], av[4];
      ldmatrix_x4(ak, sK + (kw * 16 + lane % 16) * kRow + kk * 16 + (lane / 16) * 8);
      ldmatrix_x4(av, sV + (kw * 16 + lane % 16) * kRow + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int n2 = 0; n2 < BR / 16; ++n2) {
        // B = Qᵀ (k = d, n = query), stored [query][d]: the non-transposed load.
        const int r = n2 * 16 + lane % 8 + (lane / 16) * 8, col = kk * 16 + ((lane / 8) % 2) * 8;
        std::uint32_t bq[4], bo[4];
        ldmatrix_x4(bq, tQ + r * kRow + col);
        ldmatrix_x4(bo, tdO + r * kRow + col);
        mma16816<T>(st[2 * n2], ak, bq[0], bq[1]);
        mma16816<T>(st[2 * n2 + 1], ak, bq[2], bq[3]);
        mma16816<T>(dpt[2 * n2], av, bo[0], bo[1]);
        mma16816<T>(dpt[2 * n2 + 1], av, bo[2], bo[3]);
      }
    }

    // Whether every (query, key) of this step's tile is allowed: then no per-element test.
    const bool interior = i0 + BR <= p.Lq && j0 + BC <= Lk_b &&
                          (!p.has_right || j0 + BC - 1 <= i0 + off + p.right) &&
                          (!p.has_left || j0 >= i0 + BR - 1 + off - p.left);
    const float slope = p.alibi ? p.alibi[h] : 0.0f;

    // P = exp(s − lse) in place of Sᵀ, then dSᵀ in place of dPᵀ.
#pragma unroll
    for (int n = 0; n < BR / 8; ++n) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int qi = n * 8 + 2 * t4 + (c & 1);       // query within the tile
        const int kj = kw * 16 + g + (c >= 2 ? 8 : 0);  // key within the tile
        const std::int64_t i = i0 + qi, j = j0 + kj;
        float x = st[n][c] * p.scale;
        float dtanh = 1.0f;
        if constexpr (SOFTCAP) {
          const float th = tanhf(x / p.softcap);
          x = p.softcap * th;
          dtanh = 1.0f - th * th;
        }
        if (p.alibi) {
          const std::int64_t dist = i + off - j;
          x -= slope * static_cast<float>(dist < 0 ? -dist : dist);
        }
        bool allowed = true;
        if (!interior) {
          const std::int64_t d = i + off;
          allowed = i < p.Lq && j < Lk_b && (!p.has_right || j <= d + p.right) &&
                    (!p.has_left || j >= d - p.left);
        }
        // A fully masked row has lse −∞ and contributes nothing (its P is 0, not exp(+∞)).
        const float lse = tLse[qi];
        const float prob = (allowed && lse != -INFINITY) ? exp2f((x - lse) * kLog2e) : 0.0f;
        st[n][c] = prob;
        dpt[n][c] = prob == 0.0f ? 0.0f : prob * (dpt[n][c] - tDelta[qi]) * dtanh * p.scale;
      }
    }

    // dV += Pᵀ·dO and dK += dSᵀ·Q: A from registers (k = query), B = dO or Q stored
    // [query][d] = [k][n], the transposed load.
#pragma unroll
    for (int ks = 0; ks < BR / 16; ++ks) {
      const std::uint32_t ap[4] = {pack2<T>(st[2 * ks][0], st[2 * ks][1]),
                                   pack2<T>(st[2 * ks][2], st[2 * ks][3]),
                                   pack2<T>(st[2 * ks + 1][0], st[2 * ks + 1][1]),
                                   pack2<T>(st[2 * ks + 1][2], st[2 * ks + 1][3])};
      const std::uint32_t ads[4] = {pack2<T>(dpt[2 * ks][0], dpt[2 * ks][1]),
                                    pack2<T>(dpt[2 * ks][2], dpt[2 * ks][3]),
                                    pack2<T>(dpt[2 * ks + 1][0], dpt[2 * ks + 1][1]),
                                    pack2<T>(dpt[2 * ks + 1][2], dpt[2 * ks + 1][3])};
      if (dw == 0) {
        // dSᵀ for dQ: rows g and g + 8 of this warp's keys, query columns 2·t4 and +1.
        T* row0 = sdS + (kw * 16 + g) * kRowS + ks * 16 + 2 * t4;
        T* row8 = row0 + 8 * kRowS;
        *reinterpret_cast<std::uint32_t*>(row0) = ads[0];
        *reinterpret_cast<std::uint32_t*>(row8) = ads[1];
        *reinterpret_cast<std::uint32_t*>(row0 + 8) = ads[2];
        *reinterpret_cast<std::uint32_t*>(row8 + 8) = ads[3];
      }
#pragma unroll
      for (int n2 = 0; n2 < kDW / 16; ++n2) {
        const int r = ks * 16 + lane % 8 + ((lane / 8) % 2) * 8;
        const int col = dw * kDW + n2 * 16 + (lane / 16) * 8;
        std::uint32_t bo[4], bq[4];
        ldmatrix_x4_trans(bo, tdO + r * kRow + col);
        ldmatrix_x4_trans(bq, tQ + r * kRow + col);
        mma16816<T>(dv[2 * n2], ap, bo[0], bo[1]);
        mma16816<T>(dv[2 * n2 + 1], ap, bo[2], bo[3]);
        mma16816<T>(dk[2 * n2], ads, bq[0], bq[1]);
        mma16816<T>(dk[2 * n2 + 1], ads, bq[2], bq[3]);
      }
    }
    __syncthreads();  // dSᵀ complete

    // dQ += dS·K: units of 16 query rows × 64 columns spread over the warps. A = dS from
    // dSᵀ stored [key][query] (transposed load), B = K stored [key][d] = [k][n] (transposed).
    float* dqg = p.dq + (b * p.Hq + h) * p.Lq * D;
    constexpr int kUnits = (BR / 16) * (D / 64);
    for (int u = warp; u < kUnits; u += Cfg::kWarps) {
      const int r0 = (u % (BR / 16)) * 16, c0 = (u / (BR / 16)) * 64;
      float acc[8][4];
#pragma unroll
      for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[n][c] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < BC / 16; ++ks) {
        std::uint32_t a[4];
        const int m = lane / 8;
        ldmatrix_x4_trans(a, sdS + (ks * 16 + lane % 8 + (m / 2) * 8) * kRowS + r0 + (m % 2) * 8);
#pragma unroll
        for (int n2 = 0; n2 < 4; ++n2) {
          std::uint32_t bk[4];
          ldmatrix_x4_trans(bk, sK + (ks * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kRow + c0 +
                                    n2 * 16 + (lane / 16) * 8);
          mma16816<T>(acc[2 * n2], a, bk[0], bk[1]);
          mma16816<T>(acc[2 * n2 + 1], a, bk[2], bk[3]);
        }
      }
      const std::int64_t ia = i0 + r0 + g, ib = ia + 8;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int col = c0 + n * 8 + 2 * t4;
        if (ia < p.Lq) atomic_add2(dqg + ia * D + col, acc[n][0], acc[n][1]);
        if (ib < p.Lq) atomic_add2(dqg + ib * D + col, acc[n][2], acc[n][3]);
      }
    }
  }
  cp_async_wait_all();

  // dK and dV of this warp's keys (zeros for keys no query sees), f32 contiguous.
  const std::int64_t ja = j0 + kw * 16 + g, jb = ja + 8;
  const std::int64_t base = (b * p.Hkv + hk) * p.Lk;
#pragma unroll
  for (int n = 0; n < kDW / 8; ++n) {
    const int col = dw * kDW + n * 8 + 2 * t4;
    if (ja < p.Lk) {
      *reinterpret_cast<float2*>(p.dk + (base + ja) * D + col) = make_float2(dk[n][0], dk[n][1]);
      *reinterpret_cast<float2*>(p.dv + (base + ja) * D + col) = make_float2(dv[n][0], dv[n][1]);
    }
    if (jb < p.Lk) {
      *reinterpret_cast<float2*>(p.dk + (base + jb) * D + col) = make_float2(dk[n][2], dk[n][3]);
      *reinterpret_cast<float2*>(p.dv + (base + jb) * D + col) = make_float2(dv[n][2], dv[n][3]);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Host side.

using detail::check_cuda;

template <class T, int D, int BC, int BR, int DW, bool SOFTCAP>
void launch_main(const Params& p, cudaStream_t stream) {
  using Cfg = Tile<D, BC, BR, DW>;
  auto kernel = backward_main<T, D, BC, BR, DW, SOFTCAP>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Cfg::kSmemBytes)),
             "cudaFuncSetAttribute (shared memory)");
  const dim3 grid(static_cast<unsigned>((p.Lk + BC - 1) / BC), static_cast<unsigned>(p.Hkv),
                  static_cast<unsigned>(p.B));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  check_cuda(cudaGetLastError(), "backward kernel launch");
}

// The tile shapes per head dim: dK and dV live in registers, so the wider the head, the
// fewer queries per step (and for 256, two warps per key group split the columns).
template <class T, bool SOFTCAP>
void launch_for_head_dim(const Params& p, int D, cudaStream_t stream) {
  switch (D) {
    case 64: return launch_main<T, 64, 64, 64, 1, SOFTCAP>(p, stream);
    case 128: return launch_main<T, 128, 64, 32, 1, SOFTCAP>(p, stream);
    case 256: return launch_main<T, 256, 64, 32, 2, SOFTCAP>(p, stream);
    default: throw Error("qkv::cuda::attention_backward: head dim must be 64, 128 or 256");
  }
}

template <class T>
void launch_all(const Params& p, int D, bool softcap, cudaStream_t stream) {
  const std::int64_t rows = p.B * p.Hq * p.Lq;
  if (rows > 0) {
    backward_preprocess<T><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(p, D);
    check_cuda(cudaGetLastError(), "preprocessing kernel launch");
  }
  if (p.Lk == 0) return;
  if (softcap)
    launch_for_head_dim<T, true>(p, D, stream);
  else
    launch_for_head_dim<T, false>(p, D, stream);
}

constexpr const char* kWhere = "qkv::cuda::attention_backward: ";

bool aligned(const void* ptr, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0;
}

// The checks of the device form: everything the kernels assume, before any launch.
void validate(const DeviceAttentionBackward& a) {
  const DeviceAttention& f = a.forward;
  detail::check_arguments(f);  // what the forward checks (device.cpp); then the backward's own
  const bool has_rows = f.B > 0 && f.Hq > 0 && f.Lq > 0;  // dq, dout, lse non-empty
  const bool has_keys = f.B > 0 && f.Hkv > 0 && f.Lk > 0;  // dk, dv non-empty
  QKV_CHECK(f.B <= 65535 && f.Hkv <= 65535, kWhere << "B and Hkv must be at most 65535 (grid), got "
                                                   << f.B << " and " << f.Hkv);
  if (has_rows) {
    QKV_CHECK(f.lse != nullptr, kWhere << "lse is null (the forward's log-sum-exp is needed)");
    QKV_CHECK(a.dout != nullptr && a.dq != nullptr, kWhere << "dout and dq must not be null");
    QKV_CHECK(aligned(a.dout, 16), kWhere << "dout must be 16-byte aligned");
    const Strides& s = a.dout_strides;
    QKV_CHECK(s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0,
              kWhere << "dout's strides (batch " << s.batch << ", head " << s.head << ", row " << s.row
                     << ") must be multiples of 8 elements (16 bytes)");
    QKV_CHECK(aligned(a.dq, 8), kWhere << "dq must be 8-byte aligned");
  }
  if (has_keys) {
    QKV_CHECK(a.dk != nullptr && a.dv != nullptr, kWhere << "dk and dv must not be null");
    QKV_CHECK(aligned(a.dk, 8) && aligned(a.dv, 8), kWhere << "dk and dv must be 8-byte aligned");
  }
}

Params make_params(const DeviceAttentionBackward& a, float* delta) {
  const DeviceAttention& f = a.forward;
  Params p{};
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.out = f.out;
  p.dout = a.dout;
  p.lse = f.lse;
  p.delta = delta;
  p.dq = a.dq;
  p.dk = a.dk;
  p.dv = a.dv;
  p.qs = f.q_strides;
  p.ks = f.k_strides;
  p.vs = f.v_strides;
  p.os = f.out_strides;
  p.dos = a.dout_strides;
  p.B = f.B;
  p.Hq = f.Hq;
  p.Hkv = f.Hkv;
  p.Lq = f.Lq;
  p.Lk = f.Lk;
  p.group = static_cast<int>(f.Hq / f.Hkv);
  p.scale = f.scale;
  p.softcap = f.softcap;
  p.bottom_right = f.alignment == Alignment::bottom_right;
  p.has_left = f.window_left >= 0;
  p.left = f.window_left;
  p.has_right = f.causal || f.window_right >= 0;
  p.right = f.window_right >= 0 ? f.window_right : 0;
  if (f.causal && p.right > 0) p.right = 0;
  p.key_lengths = f.key_lengths;
  p.alibi = f.alibi_slopes;
  return p;
}

}  // namespace

void attention_backward(const DeviceAttentionBackward& args, void* stream_ptr) {
  validate(args);
  const DeviceAttention& f = args.forward;
  if (f.B == 0) return;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const std::int64_t rows = f.B * f.Hq * f.Lq;
  // D_i lives in a stream-ordered workspace, so the device form needs no caller scratch.
  float* delta = nullptr;
  if (rows > 0)
    check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&delta), rows * sizeof(float), stream),
               "cudaMallocAsync of the D_i workspace");
  const Params p = make_params(args, delta);
  try {
    if (f.dtype == ElementType::bf16) {
      launch_all<__nv_bfloat16>(p, static_cast<int>(f.D), f.softcap > 0.0f, stream);
    } else {
      launch_all<__half>(p, static_cast<int>(f.D), f.softcap > 0.0f, stream);
    }
  } catch (...) {
    if (delta) cudaFreeAsync(delta, stream);
    throw;
  }
  if (delta) check_cuda(cudaFreeAsync(delta, stream), "cudaFreeAsync of the D_i workspace");
}

}  // namespace qkv::cuda
