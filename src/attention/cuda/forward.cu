// The forward attention kernel, FlashAttention-2's algorithm (Dao, "FlashAttention-2:
// Faster Attention with Better Parallelism and Work Partitioning", 2023) on mma.sync, and
// the forward's dispatch: D = 64 and 128 go to the wgmma kernel (forward_sm90.cu) unless
// they need key splits or are short (use_sm90 below); this kernel takes the rest.
//
// - One CTA per (BM query rows, query head, batch [, key split]); warp w owns a band of
//   16 or 32 rows of the block (one or two m16 tiles), so a row's softmax state never
//   leaves its warp. Two CTA shapes (Tiling): BM = 128 (FlashAttention-2's, the default)
//   and BM = 64 (4 warps x 16 rows: decode, short queries, and QKV_CUDA_BLOCK_M=64).
// - Q (BM, D) is read once into shared memory (and, where registers allow, into
//   registers); K and V tiles (BN, D) stream through two shared buffers each with
//   cp.async, the next tile's copy in flight while this one is multiplied.
// - S = Q·Kᵀ and O += P·V on mma.sync.m16n8k16 (bf16 or f16 in, f32 accumulate); P stays
//   in registers (an accumulator fragment is an operand fragment, common.cuh).
// - Online softmax in base 2: scores carry scale·log2(e), exp2 is one MUFU instruction.
// - Only key tiles that some row of the block may see are visited (causal, window, key
//   length); only tiles that cross a mask boundary pay the per-element mask.
// - Split-KV (decode, small grids): each split writes its normalised partial output and
//   log-sum-exp in f32; combine_kernel merges them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "attention/cuda/check.h"
#include "attention/cuda/common.cuh"
#include "attention/cuda/forward_common.cuh"

namespace qkv::cuda::detail {
namespace {

// The CTA shapes, two of them (host code picks one per call, wide_block below):
// - narrow (kWide = false): 64 query rows, 4 warps x 16 rows; the shape this kernel began
//   with, kept for decode and short queries and as the A/B baseline;
// - wide (kWide = true): FlashAttention-2's 128 rows. For D = 64 and 128, 4 warps x 32 rows:
//   two m16 tiles per warp, so every K or V fragment that ldmatrix reads from shared memory
//   feeds two MMAs instead of one. For D = 256, where a warp's O (32, 256) would not fit its
//   registers, 8 warps x 16 rows. Both halve the shared-memory writes (cp.async of K and V)
//   per MMA, since each key tile serves twice the rows.
template <int D, bool kWide>
struct Tiling {
  static constexpr int kRowsPerWarp = kWide && D <= 128 ? 32 : 16;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 tiles per warp
  static constexpr int kWarps = kWide && D == 256 ? 8 : 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = kWarps * kRowsPerWarp;  // query rows per CTA
  // Keys per tile, as many as registers allow without spilling (ptxas, sm_90a: a warp
  // holds S (kRowsPerWarp, kBlockN) and O (kRowsPerWarp, D) in f32, with addresses beside;
  // wide D = 64 at 128 keys and wide D = 128 at 64 or 48 spill).
  static constexpr int kBlockN = D == 64 ? (kWide ? 64 : 128) : D == 128 && !kWide ? 64 : 32;
  // Q's fragments stay in registers through the key loop where they fit beside S and O;
  // else they are read from shared memory at every tile.
  static constexpr bool kQInRegisters = !kWide && D <= 128;
  // Shared memory: Q (kBlockM, D) + two K and two V buffers (kBlockN, D).
  static constexpr int kSharedBytes = (kBlockM + 4 * kBlockN) * D * 2;
  // Two CTAs per SM where their shared memory fits (228 KB per SM, 1 KB of it reserved
  // per CTA); the wide D = 256 CTA (128 KB, 8 warps) runs alone.
  static constexpr int kBlocksPerSM = kSharedBytes <= 112 * 1024 ? 2 : 1;
};

template <class T, int D, bool kWide>
__global__ void __launch_bounds__(Tiling<D, kWide>::kThreads, Tiling<D, kWide>::kBlocksPerSM)
    forward_kernel(const ForwardParams p) {
  using Tile = Tiling<D, kWide>;
  constexpr int BM = Tile::kBlockM, BN = Tile::kBlockN, MT = Tile::kMTiles;
  constexpr int kThreads = Tile::kThreads;
  constexpr bool kQInRegisters = Tile::kQInRegisters;
  using E = ElementTraits<T>;
  extern __shared__ __align__(1024) unsigned char smem[];  // aligned: common.cuh's block_address
  const std::uint32_t q_smem = shared_address(smem);           // (BM, D)
  const std::uint32_t k_smem = q_smem + BM * D * 2;             // (2, BN, D)
  const std::uint32_t v_smem = k_smem + 2 * BN * D * 2;         // (2, BN, D)

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // fragment row and column group (common.cuh)
  const int h = blockIdx.y;
  const int b = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const int m0 = blockIdx.x * BM;
  // The key tiles this block may see, then this split's share of them.
  const KeyTiles keys = key_tiles(p, b, split, m0, BM, BN);
  const int key_length = keys.key_length;
  const int tile_lo = keys.lo, tile_hi = keys.hi;

  const T* q = static_cast<const T*>(p.q) + b * p.q_b + h * p.q_h;
  const T* k = static_cast<const T*>(p.k) + b * p.k_b + (h / p.group) * p.k_h;
  const T* v = static_cast<const T*>(p.v) + b * p.v_b + (h / p.group) * p.v_h;

  const ScoreParams sp = score_params(p, h, keys);
  const bool plain_scores = sp.softcap_log2 == 0.0f && sp.alibi_log2 == 0.0f && sp.scale_log2 > 0.0f;

  // Prologue: Q and the first K tile in one group, the first V tile in the next.
  load_tile<BM, D, kThreads, RowSwizzledTile<D>>(q_smem, q, p.q_r, m0, p.Lq, tid);
  if (tile_lo < tile_hi) load_tile<BN, D, kThreads, RowSwizzledTile<D>>(k_smem, k, p.k_r, tile_lo * BN, key_length, tid);
  cp_async_commit();
  if (tile_lo < tile_hi) load_tile<BN, D, kThreads, RowSwizzledTile<D>>(v_smem, v, p.v_r, tile_lo * BN, key_length, tid);
  cp_async_commit();

  // Warp w owns rows warp_row0 .. warp_row0 + 16·MT − 1 of the block, as MT m16 tiles;
  // in tile m, this thread holds rows 16m + g and 16m + g + 8 (index r = 0, 1 below).
  const int warp_row0 = warp * Tile::kRowsPerWarp;  // in the block
  // This lane's ldmatrix address of the warp's first Q block (common.cuh, block_address).
  const std::uint32_t q_lane = a_operand_lane<D>(q_smem + warp_row0 * D * 2, lane);
  const bool warp_active = m0 + warp_row0 < p.Lq;  // rows past Lq: load, but skip the math
  float acc_o[MT][D / 8][4];  // O (16·MT, D) of this warp: m-tile, n-tile d of 8 columns
  float row_max[MT][2], row_sum[MT][2];  // base-2 running max; this thread's part of Σ exp2(s − max)
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int d = 0; d < D / 8; ++d) acc_o[m][d][0] = acc_o[m][d][1] = acc_o[m][d][2] = acc_o[m][d][3] = 0.0f;
    row_max[m][0] = row_max[m][1] = -INFINITY;
    row_sum[m][0] = row_sum[m][1] = 0.0f;
  }

  std::uint32_t q_frag[kQInRegisters ? MT : 1][kQInRegisters ? D / 16 : 1][4];
  cp_async_wait<1>();
  __syncthreads();
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        ldmatrix_x4(q_frag[m][kk], block_address<D>(q_lane, 16 * m, kk * 16));
      }
    }
  }

  for (int tile = tile_lo; tile < tile_hi; ++tile) {
    const int buffer = (tile - tile_lo) & 1;
    const std::uint32_t k_lane = bt_operand_lane<D>(k_smem + buffer * BN * D * 2, lane);
    const std::uint32_t v_lane = b_operand_trans_lane<D>(v_smem + buffer * BN * D * 2, lane);
    const int n0 = tile * BN;
    cp_async_wait<1>();  // this tile's K (its V may still be in flight)
    __syncthreads();     // ... for every thread; and all are done with the other buffers
    if (tile + 1 < tile_hi) {
      load_tile<BN, D, kThreads, RowSwizzledTile<D>>(k_smem + (buffer ^ 1) * BN * D * 2, k, p.k_r, n0 + BN, key_length, tid);
    }
    cp_async_commit();

    float s[MT][BN / 8][4];  // S (16·MT, BN) of this warp
    if (warp_active) {
#pragma unroll
      for (int m = 0; m < MT; ++m) {
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) s[m][n][0] = s[m][n][1] = s[m][n][2] = s[m][n][3] = 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        std::uint32_t a_reg[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if constexpr (kQInRegisters) {
            a_reg[m][0] = q_frag[m][kk][0], a_reg[m][1] = q_frag[m][kk][1];
            a_reg[m][2] = q_frag[m][kk][2], a_reg[m][3] = q_frag[m][kk][3];
          } else {
            ldmatrix_x4(a_reg[m], block_address<D>(q_lane, 16 * m, kk * 16));
          }
        }
#pragma unroll
        for (int nn = 0; nn < BN / 16; ++nn) {
          std::uint32_t b_reg[4];  // one K fragment, used by every m-tile
          ldmatrix_x4(b_reg, block_address<D>(k_lane, nn * 16, kk * 16));
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            mma_16816<T>(s[m][2 * nn], a_reg[m], b_reg[0], b_reg[1]);
            mma_16816<T>(s[m][2 * nn + 1], a_reg[m], b_reg[2], b_reg[3]);
          }
        }
      }

      // Scores: the per-element function only where a mask boundary crosses the tile or
      // softcap/ALiBi ask for it.
      const bool boundary = tile_crosses_mask(p, keys, m0, BM, n0, BN);
      // The plain case leaves S raw and folds the scale into the softmax below (one FFMA
      // per score, FlashAttention-2's exp2(s·scale − max·scale), instead of a multiply and
      // a subtraction); the per-element function leaves base-2 scores there (multiplier 1).
      const bool plain_tile = plain_scores && !boundary;
      const float multiplier = plain_tile ? sp.scale_log2 : 1.0f;
      if (!plain_tile) {
#pragma unroll
        for (int m = 0; m < MT; ++m) apply_scores(s[m], sp, boundary, m0 + warp_row0 + 16 * m + g, n0, t);
      }

      // Online softmax: new running max, rescale what was summed so far. A row whose max
      // did not change keeps its sums as they are (correction exactly 1), and O, D/8·4·MT
      // multiplies per thread, is rescaled only when some row of the warp needs it: once
      // a long row's max has settled, most tiles skip it.
      float correction[MT][2];
      bool changed = false;
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        changed = online_softmax(s[m], multiplier, row_max[m], row_sum[m], correction[m]) || changed;
      }
      if (__any_sync(0xffffffffu, changed)) {
#pragma unroll
        for (int m = 0; m < MT; ++m) {
#pragma unroll
          for (int d = 0; d < D / 8; ++d) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[m][d][e] *= correction[m][e / 2];
          }
        }
      }
    }

    cp_async_wait<1>();  // this tile's V (the next K may still be in flight)
    __syncthreads();
    if (tile + 1 < tile_hi) {
      load_tile<BN, D, kThreads, RowSwizzledTile<D>>(v_smem + (buffer ^ 1) * BN * D * 2, v, p.v_r, n0 + BN, key_length, tid);
    }
    cp_async_commit();

    if (warp_active) {
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        // Two adjacent score accumulators are the A fragment of P (16, 16).
        std::uint32_t a_reg[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          a_reg[m][0] = E::pack(s[m][2 * kk][0], s[m][2 * kk][1]);
          a_reg[m][1] = E::pack(s[m][2 * kk][2], s[m][2 * kk][3]);
          a_reg[m][2] = E::pack(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
          a_reg[m][3] = E::pack(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dd = 0; dd < D / 16; ++dd) {
          std::uint32_t b_reg[4];  // one V fragment, used by every m-tile
          ldmatrix_x4_trans(b_reg, block_address<D>(v_lane, kk * 16, dd * 16));
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            mma_16816<T>(acc_o[m][2 * dd], a_reg[m], b_reg[0], b_reg[1]);
            mma_16816<T>(acc_o[m][2 * dd + 1], a_reg[m], b_reg[2], b_reg[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // nothing may land in shared memory after the kernel's end

  if (!warp_active) return;
  // Normalise; a row that saw no key (sum 0) is 0 with lse −inf (include/qkv/attention.h).
  float inverse[MT][2], lse[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) finish_row(row_max[m][r], row_sum[m][r], inverse[m][r], lse[m][r]);
  }

  // This thread's rows: m0 + row_of(m, r) for m-tile m, r = 0 (g) or 1 (g + 8).
  const auto row_of = [&](int m, int r) { return warp_row0 + 16 * m + g + 8 * r; };
  if (p.splits > 1) {
    // Partial results, f32, normalised by this split's own sum.
    const long long row_base = ((static_cast<long long>(split) * p.B + b) * p.Hq + h) * p.Lq;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = m0 + row_of(m, r);
        if (row >= p.Lq) continue;
        float* dst = p.partial_out + (row_base + row) * D;
#pragma unroll
        for (int d = 0; d < D / 8; ++d) {
          *reinterpret_cast<float2*>(dst + d * 8 + 2 * t) =
              make_float2(acc_o[m][d][2 * r] * inverse[m][r], acc_o[m][d][2 * r + 1] * inverse[m][r]);
        }
        if (t == 0) p.partial_lse[row_base + row] = lse[m][r];
      }
    }
    return;
  }

  // Stage the warp's output rows in its own rows of the Q buffer (no other warp reads
  // them), then write whole 16-byte chunks per row: coalesced, and rows past Lq skipped.
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const std::uint32_t pair =
            E::pack(acc_o[m][d][2 * r] * inverse[m][r], acc_o[m][d][2 * r + 1] * inverse[m][r]);
        const std::uint32_t address = q_smem + swizzled_offset<D>(row_of(m, r), d) + 4 * t;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(address), "r"(pair));
      }
    }
  }
  __syncwarp();
  T* out = static_cast<T*>(p.out) + b * p.o_b + h * p.o_h;
#pragma unroll
  for (int c = lane; c < Tile::kRowsPerWarp * (D / 8); c += 32) {
    const int row = c / (D / 8), chunk = c % (D / 8);
    const int i = m0 + warp_row0 + row;
    if (i < p.Lq) {
      const uint4 value = *reinterpret_cast<const uint4*>(smem + swizzled_offset<D>(warp_row0 + row, chunk));
      *reinterpret_cast<uint4*>(out + i * p.o_r + chunk * 8) = value;
    }
  }
  if (p.lse != nullptr && t == 0) {
    float* lse_row = p.lse + (static_cast<long long>(b) * p.Hq + h) * p.Lq;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = m0 + row_of(m, r);
        if (row < p.Lq) lse_row[row] = lse[m][r];
      }
    }
  }
}

// Merges the splits' partial results of one row: lse = log Σ_s exp(lse_s) and
// out = Σ_s exp(lse_s − lse)·out_s. kRows rows per CTA, D/4 threads per row (float4).
template <class T, int D>
__global__ void __launch_bounds__(128) combine_kernel(const ForwardParams p) {
  constexpr int kThreadsPerRow = D / 4;
  constexpr int kRows = 128 / kThreadsPerRow;
  const long long rows = static_cast<long long>(p.B) * p.Hq * p.Lq;
  const long long row = static_cast<long long>(blockIdx.x) * kRows + threadIdx.x / kThreadsPerRow;
  if (row >= rows) return;
  const int column = (threadIdx.x % kThreadsPerRow) * 4;
  float max_lse = -INFINITY;
  for (int s = 0; s < p.splits; ++s) max_lse = fmaxf(max_lse, p.partial_lse[s * rows + row]);
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float lse = -INFINITY;
  if (max_lse != -INFINITY) {
    float total = 0.0f;
    for (int s = 0; s < p.splits; ++s) total += expf(p.partial_lse[s * rows + row] - max_lse);
    lse = max_lse + logf(total);
    for (int s = 0; s < p.splits; ++s) {
      const float weight = expf(p.partial_lse[s * rows + row] - lse);
      if (weight == 0.0f) continue;  // an empty split's zeros (or a far smaller one)
      const float4 x = *reinterpret_cast<const float4*>(p.partial_out + (s * rows + row) * D + column);
      acc.x += weight * x.x, acc.y += weight * x.y, acc.z += weight * x.z, acc.w += weight * x.w;
    }
  }
  const int i = static_cast<int>(row % p.Lq);
  const long long bh = row / p.Lq;
  const int h = static_cast<int>(bh % p.Hq), b = static_cast<int>(bh / p.Hq);
  T* out = static_cast<T*>(p.out) + b * p.o_b + h * p.o_h + i * p.o_r + column;
  using E = ElementTraits<T>;
  const std::uint32_t pair[2] = {E::pack(acc.x, acc.y), E::pack(acc.z, acc.w)};
  *reinterpret_cast<uint2*>(out) = make_uint2(pair[0], pair[1]);
  if (p.lse != nullptr && column == 0) p.lse[row] = lse;
}

int multiprocessor_count() {
  int device = 0, count = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device),
             "cudaDeviceGetAttribute(multiprocessor count)");
  return count;
}

// Splits for a grid of `ctas` CTAs over at most `tiles` key tiles each: none when the grid
// already fills the GPU (`per_sm` CTAs per SM), else enough to fill it, each split keeping
// at least two tiles (a split's fixed cost — Q load, partial write, combine — needs work
// to hide behind).
int automatic_splits(long long ctas, int tiles, int per_sm) {
  if (const char* forced = std::getenv("QKV_CUDA_SPLITS"); forced != nullptr && *forced != '\0') {
    const int n = std::atoi(forced);
    if (n >= 1) return n;
  }
  const long long slots = static_cast<long long>(per_sm) * multiprocessor_count();
  if (ctas >= slots) return 1;
  const long long wanted = (slots + ctas - 1) / ctas;
  return static_cast<int>(std::max(1LL, std::min({wanted, static_cast<long long>(tiles / 2), 64LL})));
}

template <class T, int D, bool kWide>
void launch(ForwardParams p, int splits, cudaStream_t stream) {
  using Tile = Tiling<D, kWide>;
  constexpr int BN = Tile::kBlockN;
  const int m_blocks = (p.Lq + Tile::kBlockM - 1) / Tile::kBlockM;
  const int tiles = (p.Lk + BN - 1) / BN;
  if (splits <= 0) {
    splits = automatic_splits(static_cast<long long>(m_blocks) * p.Hq * p.B, tiles, Tile::kBlocksPerSM);
  }
  splits = std::max(1, std::min({splits, std::max(tiles, 1), 65535 / std::max(p.B, 1)}));
  p.splits = splits;

  float* workspace = nullptr;
  const long long rows = static_cast<long long>(p.B) * p.Hq * p.Lq;
  if (splits > 1) {
    const std::size_t bytes = static_cast<std::size_t>(splits) * rows * (D + 1) * sizeof(float);
    check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&workspace), bytes, stream),
               "cudaMallocAsync(split-KV workspace)");
    p.partial_out = workspace;
    p.partial_lse = workspace + static_cast<std::size_t>(splits) * rows * D;
  }
  auto kernel = forward_kernel<T, D, kWide>;
  constexpr int kSmem = Tile::kSharedBytes;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
             "cudaFuncSetAttribute(forward kernel shared memory)");
  const dim3 grid(m_blocks, p.Hq, p.B * splits);
  kernel<<<grid, Tile::kThreads, kSmem, stream>>>(p);
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess && splits > 1) {
    constexpr int kRows = 128 / (D / 4);
    combine_kernel<T, D><<<static_cast<unsigned>((rows + kRows - 1) / kRows), 128, 0, stream>>>(p);
    status = cudaGetLastError();
  }
  if (workspace != nullptr) {
    const cudaError_t freed = cudaFreeAsync(workspace, stream);
    if (status == cudaSuccess) status = freed;
  }
  check_cuda(status, "forward attention kernel launch");
}

// The CTA shape (Tiling): the wide 128-row one for D = 64 and 128, unless Lq <= 64 (decode
// and short queries, where half of a 128-row CTA or more would multiply padding); the
// narrow 64-row one for D = 256, where the wide shape holds one CTA per SM (8 warps, 128 KB
// of shared memory) and was slower in 5 of the 6 cases measured on an H100 (BENCHMARKS.md,
// "GPU"). QKV_CUDA_BLOCK_M=64 or 128 forces either (A/B timing, tests); it is read at every
// call, as QKV_CUDA_SPLITS is, so that one process can time both shapes.
bool wide_block(int Lq, int D) {
  if (Lq <= 64) return false;
  if (const char* forced = std::getenv("QKV_CUDA_BLOCK_M"); forced != nullptr && *forced != '\0') {
    const int rows = std::atoi(forced);
    if (rows == 64) return false;
    if (rows == 128) return true;
  }
  return D != 256;
}

// Whether the wgmma kernel (forward_sm90.cu) takes the call: D = 64 or 128, query blocks
// longer than 64 rows, and a grid of its 128-row CTAs that fills the GPU without key splits
// (split-KV is the mma.sync kernel's). QKV_CUDA_KERNEL=mma, or a forced QKV_CUDA_BLOCK_M,
// sends every call to the mma.sync kernel (A/B timing, tests).
bool use_sm90(const ForwardParams& p, int D, int splits) {
  if (D > 128 || p.Lq <= 64 || splits > 1) return false;
  if (const char* kernel = std::getenv("QKV_CUDA_KERNEL"); kernel != nullptr && std::string(kernel) == "mma") {
    return false;
  }
  if (const char* forced = std::getenv("QKV_CUDA_BLOCK_M"); forced != nullptr && *forced != '\0') return false;
  if (splits == 1) return true;
  const long long ctas = static_cast<long long>((p.Lq + 127) / 128) * p.Hq * p.B;
  return automatic_splits(ctas, (p.Lk + 127) / 128, 1) == 1;
}

template <class T, int D>
void launch_for_shape(const ForwardParams& p, int splits, cudaStream_t stream) {
  if constexpr (D <= 128) {
    if (use_sm90(p, D, splits)) return launch_forward_sm90<T, D>(p, stream);
  }
  if (wide_block(p.Lq, D)) return launch<T, D, true>(p, splits, stream);
  return launch<T, D, false>(p, splits, stream);
}

template <class T>
void launch_for_dim(const ForwardParams& p, int D, int splits, cudaStream_t stream) {
  switch (D) {
    case 64: return launch_for_shape<T, 64>(p, splits, stream);
    case 128: return launch_for_shape<T, 128>(p, splits, stream);
    default: return launch_for_shape<T, 256>(p, splits, stream);  // check_arguments let only 256 through
  }
}

}  // namespace

void attention_forward_splits(const DeviceAttention& a, int splits, void* stream) {
  check_arguments(a);
  if (a.B == 0 || a.Hq == 0 || a.Lq == 0) return;
  ForwardParams p{};
  p.q = a.q, p.k = a.k, p.v = a.v, p.out = a.out, p.lse = a.lse;
  p.q_b = a.q_strides.batch, p.q_h = a.q_strides.head, p.q_r = a.q_strides.row;
  p.k_b = a.k_strides.batch, p.k_h = a.k_strides.head, p.k_r = a.k_strides.row;
  p.v_b = a.v_strides.batch, p.v_h = a.v_strides.head, p.v_r = a.v_strides.row;
  p.o_b = a.out_strides.batch, p.o_h = a.out_strides.head, p.o_r = a.out_strides.row;
  p.B = static_cast<int>(a.B), p.Hq = static_cast<int>(a.Hq);
  p.Lq = static_cast<int>(a.Lq), p.Lk = static_cast<int>(a.Lk);
  p.group = static_cast<int>(a.Hq / a.Hkv);
  if (a.softcap > 0.0f) {
    p.scale_log2 = a.scale / a.softcap;  // tanh's argument; score_value multiplies by c·log2(e)
    p.softcap_log2 = a.softcap * kLog2e;
  } else {
    p.scale_log2 = a.scale * kLog2e;
    p.softcap_log2 = 0.0f;
  }
  p.alibi = a.alibi_slopes;
  p.key_lengths = a.key_lengths;
  p.causal = a.causal;
  p.bottom_right = a.alignment == Alignment::bottom_right;
  // A window wider than both lengths bounds nothing; clamping keeps the kernel's int sums
  // (row + offset + window) from overflowing.
  const std::int64_t wide = a.Lq + a.Lk + 1;
  p.window_left = a.window_left < 0 ? -1 : static_cast<int>(std::min(a.window_left, wide));
  p.window_right = a.window_right < 0 ? -1 : static_cast<int>(std::min(a.window_right, wide));
  p.splits = 1;
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.dtype == ElementType::bf16) {
    launch_for_dim<__nv_bfloat16>(p, static_cast<int>(a.D), splits, s);
  } else {
    launch_for_dim<__half>(p, static_cast<int>(a.D), splits, s);
  }
}

}  // namespace qkv::cuda::detail

namespace qkv::cuda {

void attention_forward(const DeviceAttention& args, void* stream) {
  detail::attention_forward_splits(args, 0, stream);
}

}  // namespace qkv::cuda
