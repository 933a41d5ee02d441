// The forward attention kernel on Hopper's warpgroup products (wgmma, sm_90a): the same
// algorithm as forward.cu's mma.sync kernel (FlashAttention-2's online softmax over key
// tiles), with both products issued per warpgroup of 4 warps and 64 query rows:
//
// - S (64, BN) = Q·Kᵀ: wgmma with Q and K both read by the tensor cores from shared memory
//   (no ldmatrix, no operand registers);
// - O (64, D) += P·V: wgmma with P in registers (the score accumulators packed to 16 bits,
//   wgmma.cuh) and V from shared memory, read transposed by the hardware.
//
// Every tile lives in shared memory in the 128-byte swizzle's canonical form that wgmma's
// descriptors name (wgmma.cuh, Sw128Tile); cp.async fills it as in the mma.sync kernel,
// K and V tiles double-buffered. A CTA is kWarpGroups warpgroups (64·kWarpGroups query
// rows) sharing each K and V tile; causal grids start with the longest rows. The score function, masks, online softmax and lse are
// forward_common.cuh's, shared with the mma.sync kernel.
//
// What it does not do (forward.cu's kernel does): head dim 256, split-KV. attention_forward
// sends those, short query blocks (decode) and small grids there (forward.cu, use_sm90).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "attention/cuda/check.h"
#include "attention/cuda/common.cuh"
#include "attention/cuda/forward_common.cuh"
#include "attention/cuda/wgmma.cuh"

namespace qkv::cuda::detail {
namespace {

template <int D, int kWarpGroups, int BN>
struct Sm90Tiling {
  static constexpr int kBlockM = 64 * kWarpGroups;  // query rows per CTA
  static constexpr int kThreads = 128 * kWarpGroups;
  using QTile = Sw128Tile<kBlockM, D>;
  using KVTile = Sw128Tile<BN, D>;
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kKVBytes = BN * D * 2;  // one K or V buffer
  // Q + two K and two V buffers.
  static constexpr int kSharedBytes = kQBytes + 4 * kKVBytes;
  // Two CTAs per SM where their shared memory fits and the registers suffice: one warpgroup
  // keeps 255 per thread; two keep 128, enough for S (64, 64) and O (64, 64) only.
  static constexpr int kBlocksPerSM =
      kSharedBytes <= 112 * 1024 && (kWarpGroups == 1 || (D == 64 && BN == 64)) ? 2 : 1;
};

// The schedule (FlashAttention-3's intra-warpgroup overlap, Shah et al. 2024): tile j's
// Q·Kᵀ and tile j−1's P·V are issued together and the first is waited for alone, so the
// softmax of tile j runs on the CUDA cores while the tensor cores multiply P·V of tile j−1.
// O is rescaled for tile j once that P·V is done; P of tile j waits in registers (16-bit)
// for the next round. Measured on an H100 against the two simpler orders (BENCHMARKS.md,
// "GPU"): S, wait, softmax, P·V, wait; and the same with P·V left in flight while the next
// Q·Kᵀ is issued, both waited for before the softmax.
template <class T, int D, int kWarpGroups, int BN>
__global__ void __launch_bounds__(Sm90Tiling<D, kWarpGroups, BN>::kThreads, Sm90Tiling<D, kWarpGroups, BN>::kBlocksPerSM)
    forward_sm90_kernel(const ForwardParams p) {
  using Tile = Sm90Tiling<D, kWarpGroups, BN>;
  constexpr int BM = Tile::kBlockM, kThreads = Tile::kThreads;
  using E = ElementTraits<T>;
  extern __shared__ __align__(1024) unsigned char smem[];  // 1024: the swizzle's alignment
  const std::uint32_t q_smem = shared_address(smem);           // (BM, D)
  const std::uint32_t k_smem = q_smem + Tile::kQBytes;         // (2, BN, D)
  const std::uint32_t v_smem = k_smem + 2 * Tile::kKVBytes;    // (2, BN, D)

  const int tid = threadIdx.x, group = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;  // accumulator row and column group (wgmma.cuh)
  const int h = blockIdx.y, b = blockIdx.z;
  // Causal rows further down see more keys: their blocks start first (the grid runs in
  // blockIdx order), so the short blocks fill the tail instead of the long ones.
  const int m_block = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int m0 = m_block * BM;
  const KeyTiles keys = key_tiles(p, b, 0, m0, BM, BN);
  const int key_length = keys.key_length;

  const T* q = static_cast<const T*>(p.q) + b * p.q_b + h * p.q_h;
  const T* k = static_cast<const T*>(p.k) + b * p.k_b + (h / p.group) * p.k_h;
  const T* v = static_cast<const T*>(p.v) + b * p.v_b + (h / p.group) * p.v_h;
  const ScoreParams sp = score_params(p, h, keys);
  const bool plain_scores = sp.softcap_log2 == 0.0f && sp.alibi_log2 == 0.0f && sp.scale_log2 > 0.0f;

  // Warpgroup `group` owns rows 64·group .. +63 of the block; this thread rows row0 and
  // row0 + 8 of them (the accumulator layout, wgmma.cuh).
  const int group_row0 = 64 * group;
  const int row0 = m0 + group_row0 + 16 * warp + g;
  const bool group_active = m0 + group_row0 < p.Lq;  // uniform over the warpgroup
  float acc_o[D / 8][4];  // O (64, D) of the warpgroup, this thread's part
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int d = 0; d < D / 8; ++d) acc_o[d][0] = acc_o[d][1] = acc_o[d][2] = acc_o[d][3] = 0.0f;

  // Q's descriptor for k-step 0 of this warpgroup's rows (K-major: 1024 bytes between
  // 8-row groups); step kk adds 32·(kk % 4) bytes within column block kk / 4.
  const std::uint64_t q_desc = sw128_descriptor(q_smem + group_row0 * 128, 16, 1024);
  const auto k_buffer = [&](int tile) { return k_smem + ((tile - keys.lo) & 1) * Tile::kKVBytes; };
  const auto v_buffer = [&](int tile) { return v_smem + ((tile - keys.lo) & 1) * Tile::kKVBytes; };
  const auto load_k = [&](int tile) {
    load_tile<BN, D, kThreads, typename Tile::KVTile>(k_buffer(tile), k, p.k_r, tile * BN, key_length, tid);
  };
  const auto load_v = [&](int tile) {
    load_tile<BN, D, kThreads, typename Tile::KVTile>(v_buffer(tile), v, p.v_r, tile * BN, key_length, tid);
  };
  // Copies this thread issued are done; then visible to the tensor cores' reads, and, after
  // the barrier, everyone's are (and everyone is done with what the next copies overwrite).
  const auto copies_landed = [&] {
    fence_proxy_async();
    __syncthreads();
  };

  // S (64, BN) = Q·Kᵀ of one key tile, issued and committed (not waited for).
  const auto issue_scores = [&](float (&s)[BN / 8][4], int tile) {
    const std::uint64_t k_desc = sw128_descriptor(k_buffer(tile), 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const std::uint64_t a_step = static_cast<std::uint64_t>(((kk / 4) * Tile::QTile::kBlockBytes + (kk % 4) * 32) >> 4);
      const std::uint64_t b_step = static_cast<std::uint64_t>(((kk / 4) * Tile::KVTile::kBlockBytes + (kk % 4) * 32) >> 4);
      wgmma_ss<T>(s, q_desc + a_step, k_desc + b_step, kk > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  // O += P·V of one key tile, P as 16-bit A fragments (one per key step of 16), issued and
  // committed. V's descriptor is MN-major: the column-block stride between 64-wide blocks of
  // the head dim, 1024 bytes between groups of 8 keys; key step kk starts 2048·kk bytes in.
  const auto issue_pv = [&](const std::uint32_t (&p_frag)[BN / 16][4], int tile) {
    const std::uint64_t v_desc = sw128_descriptor(v_buffer(tile), Tile::KVTile::kBlockBytes, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      wgmma_rs_transposed_b<T>(acc_o, p_frag[kk], v_desc + static_cast<std::uint64_t>((kk * 2048) >> 4));
    }
    wgmma_commit();
  };
  // The score function where needed, then the online softmax step: s becomes P (f32) and
  // `correction` what O must be multiplied by; returns whether any row of the warp changed.
  const auto softmax = [&](float (&s)[BN / 8][4], int tile, float (&correction)[2]) {
    const int n0 = tile * BN;
    const bool boundary = tile_crosses_mask(p, keys, m0, BM, n0, BN);
    const bool plain_tile = plain_scores && !boundary;  // plain: the scale folds into exp2's FFMA
    if (!plain_tile) apply_scores(s, sp, boundary, row0, n0, t);
    const bool changed = online_softmax(s, plain_tile ? sp.scale_log2 : 1.0f, row_max, row_sum, correction);
    return __any_sync(0xffffffffu, changed);
  };
  const auto rescale_o = [&](const float (&correction)[2]) {
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[d][e] *= correction[e / 2];
    }
  };
  const auto pack_p = [&](const float (&s)[BN / 8][4], std::uint32_t (&p_frag)[BN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      p_frag[kk][0] = E::pack(s[2 * kk][0], s[2 * kk][1]);
      p_frag[kk][1] = E::pack(s[2 * kk][2], s[2 * kk][3]);
      p_frag[kk][2] = E::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      p_frag[kk][3] = E::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };

  float s[BN / 8][4];                 // S (64, BN) of the warpgroup, this thread's part
  std::uint32_t p_frag[BN / 16][4];   // P of the tile whose P·V is next
  float correction[2];
  // Copy groups: {Q, K_lo}, then per tile j {K_j+1, V_j}, so that when tile j's scores
  // are issued, V_j−1 (its P·V issued beside them) has landed with K_j.
  load_tile<BM, D, kThreads, typename Tile::QTile>(q_smem, q, p.q_r, m0, p.Lq, tid);
  if (keys.lo < keys.hi) load_k(keys.lo);
  cp_async_commit();
  // Each round: copies landed (K of this tile, V of the one before), the next copies
  // issued, then the products. The first tile has no P·V beside it: peeled off, so the
  // loop's products are unconditional (a wgmma on a divergent path makes the compiler
  // serialize them all).
  const auto start_round = [&](int tile) {
    cp_async_wait<0>();
    copies_landed();
    if (tile + 1 < keys.hi) load_k(tile + 1);
    load_v(tile);
    cp_async_commit();
  };
  if (keys.lo < keys.hi) {
    start_round(keys.lo);
    if (group_active) {
      issue_scores(s, keys.lo);
      wgmma_wait<0>();
      fence_accumulators(s);
      softmax(s, keys.lo, correction);  // O is still 0: nothing to rescale
      pack_p(s, p_frag);
    }
  }
  for (int tile = keys.lo + 1; tile < keys.hi; ++tile) {
    start_round(tile);
    if (group_active) {
      issue_scores(s, tile);
      issue_pv(p_frag, tile - 1);
      wgmma_wait<1>();  // the scores; P·V may still run
      fence_accumulators(s);
      const bool changed = softmax(s, tile, correction);
      wgmma_wait<0>();  // P·V of the tile before: O is complete up to it
      fence_accumulators(acc_o);
      if (changed) rescale_o(correction);
      pack_p(s, p_frag);
    }
  }
  if (keys.lo < keys.hi) {  // P·V of the last tile
    cp_async_wait<0>();
    copies_landed();
    if (group_active) {
      issue_pv(p_frag, keys.hi - 1);
      wgmma_wait<0>();
      fence_accumulators(acc_o);
    }
  }
  cp_async_wait<0>();  // nothing may land in shared memory after the kernel's end

  if (!group_active) return;
  float inverse[2], lse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) finish_row(row_max[r], row_sum[r], inverse[r], lse[r]);
  T* out = static_cast<T*>(p.out) + b * p.o_b + h * p.o_h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row0 + 8 * r;
    if (i >= p.Lq) continue;
    T* out_row = out + i * p.o_r + 2 * t;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      *reinterpret_cast<std::uint32_t*>(out_row + 8 * d) =
          E::pack(acc_o[d][2 * r] * inverse[r], acc_o[d][2 * r + 1] * inverse[r]);
    }
    if (p.lse != nullptr && t == 0) p.lse[(static_cast<long long>(b) * p.Hq + h) * p.Lq + i] = lse[r];
  }
}

template <class T, int D, int kWarpGroups, int BN>
void launch(const ForwardParams& p, cudaStream_t stream) {
  using Tile = Sm90Tiling<D, kWarpGroups, BN>;
  auto kernel = forward_sm90_kernel<T, D, kWarpGroups, BN>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSharedBytes),
             "cudaFuncSetAttribute(sm90 forward kernel shared memory)");
  const dim3 grid((p.Lq + Tile::kBlockM - 1) / Tile::kBlockM, p.Hq, p.B);
  kernel<<<grid, Tile::kThreads, Tile::kSharedBytes, stream>>>(p);
  check_cuda(cudaGetLastError(), "sm90 forward attention kernel launch");
}

}  // namespace

// The CTA shape, warpgroups × keys per tile: "2x64" for D = 64 (two CTAs of 128 registers
// per thread fit an SM), "2x128" for D = 128, the fastest of the four on an H100 at L >= 4096
// (BENCHMARKS.md, "GPU"). QKV_CUDA_SM90_TILE may name any of "1x64", "1x128", "2x64" and
// "2x128" (A/B timing, tests; another value runs "2x128"), read at every call.
template <class T, int D>
void launch_forward_sm90(const ForwardParams& p, cudaStream_t stream) {
  const char* tile = std::getenv("QKV_CUDA_SM90_TILE");
  if (tile == nullptr || *tile == '\0') tile = D == 64 ? "2x64" : "2x128";
  if (std::strcmp(tile, "1x64") == 0) return launch<T, D, 1, 64>(p, stream);
  if (std::strcmp(tile, "1x128") == 0) return launch<T, D, 1, 128>(p, stream);
  if (std::strcmp(tile, "2x64") == 0) return launch<T, D, 2, 64>(p, stream);
  return launch<T, D, 2, 128>(p, stream);
}
template void launch_forward_sm90<__nv_bfloat16, 64>(const ForwardParams&, cudaStream_t);
template void launch_forward_sm90<__nv_bfloat16, 128>(const ForwardParams&, cudaStream_t);
template void launch_forward_sm90<__half, 64>(const ForwardParams&, cudaStream_t);
template void launch_forward_sm90<__half, 128>(const ForwardParams&, cudaStream_t);

}  // namespace qkv::cuda::detail
