// What the two forward kernels share: their parameters, the tile copy, the key range a
// block of rows visits, the score function over an accumulator tile and the online softmax
// step. forward.cu holds the mma.sync kernel (sm_80 instructions, every head dim, split-KV)
// and the dispatch; forward_sm90.cu the wgmma kernel (Hopper's warpgroup products).
//
// Both kernels hold scores in accumulator tiles of 16 rows × 8 columns, laid out as
// mma.sync.m16n8k16's C fragment (common.cuh): with g = lane/4, t = lane%4, a thread holds
// s[n][0..1] = S[g][8n + 2t ..+1] and s[n][2..3] = S[g + 8][8n + 2t ..+1]; the four lanes
// of a row group (same g) together hold whole rows.
#pragma once

#include <cstdint>

#include "attention/cuda/common.cuh"

namespace qkv::cuda::detail {

struct ForwardParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // (B, Hq, Lq) or null
  long long q_b, q_h, q_r, k_b, k_h, k_r, v_b, v_h, v_r, o_b, o_h, o_r;
  int B, Hq, Lq, Lk, group;  // group = Hq / Hkv
  float scale_log2, softcap_log2;
  const float* alibi;       // (Hq) or null
  const int* key_lengths;   // (B) or null
  bool causal, bottom_right;
  int window_left, window_right;
  int splits;
  float* partial_out;  // (splits, B, Hq, Lq, D) f32, when splits > 1
  float* partial_lse;  // (splits, B, Hq, Lq) f32, when splits > 1
};

// The wgmma kernel for D = 64 and 128 (forward_sm90.cu); split-KV is not its job (p.splits
// must be 1).
template <class T, int D>
void launch_forward_sm90(const ForwardParams& p, cudaStream_t stream);

// The shared-memory layout of the mma.sync kernel's tiles: rows of D halves, chunk c of row
// r at chunk position c ^ (r % 8) (common.cuh, swizzled_offset).
template <int D>
struct RowSwizzledTile {
  __device__ __forceinline__ static std::uint32_t offset(int row, int chunk) { return swizzled_offset<D>(row, chunk); }
};

// Copies rows [row0, row0 + ROWS) of a (rows, D) global matrix into a shared tile laid out
// by Layout::offset(row, chunk); rows >= limit are zero-filled (not read). All THREADS
// threads of the CTA take part: thread tid copies chunk tid % (D/8) of rows tid / (D/8),
// + THREADS / (D/8), ... — a trip count known at compile time and one pointer stepped by a
// constant, so the copy unrolls into cp.async instructions with little address arithmetic
// between them (a loop starting at tid did not unroll and cost about 15 integer
// instructions per 16-byte copy).
template <int ROWS, int D, int THREADS, class Layout, class T>
__device__ __forceinline__ void load_tile(std::uint32_t dst, const T* src, long long row_stride,
                                          int row0, int limit, int tid) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static_assert(THREADS % kChunks == 0 && ROWS % (THREADS / kChunks) == 0);
  constexpr int kRowStep = THREADS / kChunks;
  const int chunk = tid % kChunks;
  const int row = tid / kChunks;
  const T* p = src + static_cast<long long>(row0 + row) * row_stride + chunk * 8;
  const long long step = kRowStep * row_stride;
#pragma unroll
  for (int i = 0; i < ROWS / kRowStep; ++i) {
    const bool valid = row0 + row + i * kRowStep < limit;
    cp_async_16(dst + Layout::offset(row + i * kRowStep, chunk), valid ? p + i * step : src, valid);
  }
}

// The key tiles a block of BM query rows starting at m0 visits, for batch b and key split
// `split` of p.splits: only tiles some row of the block may see (causal, window, key length).
struct KeyTiles {
  int key_length;  // Lk_b
  int offset;      // i' − i: 0 (top_left) or Lk_b − Lq (bottom_right)
  int lo, hi;      // tiles [lo, hi) of BN keys
};
__device__ __forceinline__ KeyTiles key_tiles(const ForwardParams& p, int b, int split, int m0, int BM, int BN) {
  KeyTiles r;
  r.key_length = p.key_lengths ? min(max(p.key_lengths[b], 0), p.Lk) : p.Lk;
  r.offset = p.bottom_right ? r.key_length - p.Lq : 0;
  const int row_last = min(m0 + BM, p.Lq) - 1;
  int k_begin = 0, k_end = r.key_length;
  if (p.causal) k_end = min(k_end, row_last + r.offset + 1);
  if (p.window_right >= 0) k_end = min(k_end, row_last + r.offset + p.window_right + 1);
  if (p.window_left >= 0) k_begin = max(k_begin, m0 + r.offset - p.window_left);
  const int first_tile = k_begin / BN;
  const int end_tile = k_end > k_begin ? (k_end + BN - 1) / BN : first_tile;
  const int per_split = (end_tile - first_tile + p.splits - 1) / p.splits;
  r.lo = min(first_tile + split * per_split, end_tile);
  r.hi = min(r.lo + per_split, end_tile);
  return r;
}

__device__ __forceinline__ ScoreParams score_params(const ForwardParams& p, int h, const KeyTiles& keys) {
  ScoreParams sp;
  sp.scale_log2 = p.scale_log2;
  sp.softcap_log2 = p.softcap_log2;
  sp.alibi_log2 = p.alibi ? p.alibi[h] * kLog2e : 0.0f;
  sp.causal = p.causal;
  sp.window_left = p.window_left;
  sp.window_right = p.window_right;
  sp.key_length = keys.key_length;
  sp.diagonal_offset = keys.offset;
  return sp;
}

// Whether a mask boundary (key length, causal diagonal, window edge) crosses the tile of
// keys [n0, n0 + BN) for rows [m0, m0 + BM).
__device__ __forceinline__ bool tile_crosses_mask(const ForwardParams& p, const KeyTiles& keys, int m0, int BM,
                                                  int n0, int BN) {
  return n0 + BN > keys.key_length || (p.causal && n0 + BN - 1 > m0 + keys.offset) ||
         (p.window_left >= 0 && n0 < m0 + BM - 1 + keys.offset - p.window_left) ||
         (p.window_right >= 0 && n0 + BN - 1 > m0 + keys.offset + p.window_right);
}

// The score function over one 16-row accumulator tile whose thread rows are row0 (g) and
// row0 + 8 and whose columns start at key n0: base-2 scores, −inf where masked (only
// checked on a boundary tile).
template <int NT>
__device__ __forceinline__ void apply_scores(float (&s)[NT][4], const ScoreParams& sp, bool boundary, int row0,
                                             int n0, int t) {
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = row0 + (e >= 2 ? 8 : 0);
      const int j = n0 + n * 8 + 2 * t + (e & 1);
      const float value = score_value(sp, s[n][e], i, j);
      s[n][e] = (!boundary || score_allowed(sp, i, j)) ? value : -INFINITY;
    }
  }
}

// One online-softmax step over a 16-row accumulator tile: the rows' new running max (of
// s·multiplier, base 2), s replaced by exp2(s·multiplier − max), the running sums rescaled
// and increased. correction[r] is what the row's earlier output must be multiplied by;
// returns whether any of this thread's two rows changed its max (a row whose max did not
// change keeps correction exactly 1).
template <int NT>
__device__ __forceinline__ bool online_softmax(float (&s)[NT][4], float multiplier, float (&row_max)[2],
                                               float (&row_sum)[2], float (&correction)[2]) {
  bool changed = false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float tile_max = -INFINITY;  // of the unscaled scores (the multiplier is > 0)
#pragma unroll
    for (int n = 0; n < NT; ++n) tile_max = fmaxf(tile_max, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float mx = fmaxf(row_max[r], tile_max * multiplier);
    const float base = mx == -INFINITY ? 0.0f : mx;  // all masked so far: exp2(−inf) = 0
    correction[r] = mx == row_max[r] ? 1.0f : fast_exp2(row_max[r] - base);
    changed = changed || mx != row_max[r];
    row_max[r] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      s[n][2 * r] = fast_exp2(fmaf(s[n][2 * r], multiplier, -base));
      s[n][2 * r + 1] = fast_exp2(fmaf(s[n][2 * r + 1], multiplier, -base));
      sum += s[n][2 * r] + s[n][2 * r + 1];
    }
    row_sum[r] = row_sum[r] * correction[r] + sum;
  }
  return changed;
}

// The row's final normaliser and log-sum-exp from its running max and this thread's part
// of the sum: a row that saw no key (sum 0) gets 0 and −inf (include/qkv/attention.h).
__device__ __forceinline__ void finish_row(float row_max, float row_sum, float& inverse, float& lse) {
  float sum = row_sum;
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
  lse = sum == 0.0f ? -INFINITY : (row_max + __log2f(sum)) * kLn2;
}

}  // namespace qkv::cuda::detail
