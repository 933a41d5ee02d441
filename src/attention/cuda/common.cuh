// Device helpers shared by the CUDA attention kernels (forward.cu, backward.cu).
//
// Everything here is the sm_80+ instruction set that FlashAttention-2's kernels are built
// from, written out as small inline functions over raw registers:
// - cp.async 16-byte copies global -> shared with zero fill (rows past the end read as 0);
// - an XOR swizzle of 16-byte chunks so that ldmatrix reads of 8 rows hit 8 different
//   bank groups (rows of 64..256 halves are 128..512 bytes: unswizzled, the 8 rows of an
//   8x8 matrix would all sit in the same banks);
// - ldmatrix (.x4, plain and .trans) and mma.sync.m16n8k16 for bf16 and f16 with f32
//   accumulators, and the fragment layouts they imply (documented at each function);
// - the score function of include/qkv/attention.h (softcap before ALiBi, structural
//   masks) in the base-2 domain the softmax uses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace qkv::cuda::detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------
// Element types: T is __nv_bfloat16 or __half; pairs travel as one 32-bit register.

template <class T> struct ElementTraits;
template <> struct ElementTraits<__nv_bfloat16> {
  using T = __nv_bfloat16;
  static constexpr bool is_bf16 = true;
  __device__ static std::uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x = lo (the lower 16 bits)
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
  __device__ static T from_float(float x) { return __float2bfloat16_rn(x); }
  __device__ static float to_float(T x) { return __bfloat162float(x); }
};
template <> struct ElementTraits<__half> {
  using T = __half;
  static constexpr bool is_bf16 = false;
  __device__ static std::uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
  __device__ static T from_float(float x) { return __float2half_rn(x); }
  __device__ static float to_float(T x) { return __half2float(x); }
};

// ---------------------------------------------------------------------------------------
// Shared memory layout: a tile of `rows` x D halves, row-major, each row D/8 chunks of 16
// bytes; chunk c of row r is stored at chunk position c ^ (r % 8). The XOR stays inside
// the row for D >= 64 (8 chunks or more). Returns the byte offset.
template <int D>
__device__ __forceinline__ std::uint32_t swizzled_offset(int row, int chunk) {
  return static_cast<std::uint32_t>(row * (D * 2) + ((chunk ^ (row & 7)) << 4));
}

__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------------------------------
// cp.async: 16 bytes global -> shared, bypassing L1 (.cg). With valid == false nothing is
// read (src-size 0) and the 16 bytes are zero-filled; `src` must still be a mapped
// address, so callers pass a clamped one.
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---------------------------------------------------------------------------------------
// ldmatrix.x4: four 8x8 matrices of 16-bit elements. Lanes 8m..8m+7 give the row
// addresses (16 bytes each) of matrix m; every lane receives, in r[m], the two elements
// (row lane/4, columns 2(lane%4), 2(lane%4)+1) of matrix m — or, with .trans, the two
// elements (rows 2(lane%4), 2(lane%4)+1; column lane/4), i.e. of the transposed matrix.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// ---------------------------------------------------------------------------------------
// mma.sync.m16n8k16, row.col, f32 accumulate: c (16x8) += a (16x16) * b (16x8).
// With g = lane/4, t = lane%4, the fragments are (PTX ISA, "Matrix Fragments for
// mma.m16n8k16"):
//   a[0] = A[g][2t..2t+1]    a[1] = A[g+8][2t..2t+1]
//   a[2] = A[g][2t+8..+9]    a[3] = A[g+8][2t+8..+9]
//   b[0] = B[2t..2t+1][g]    b[1] = B[2t+8..+9][g]
//   c[0..1] = C[g][2t..2t+1] c[2..3] = C[g+8][2t..2t+1]
// So two adjacent 16x8 accumulators (columns 0-7 and 8-15) hold, after packing pairs,
// exactly an A fragment of the next product (P·V reuses the scores in registers).
template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4],
                                          std::uint32_t b0, std::uint32_t b1) {
  if constexpr (ElementTraits<T>::is_bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ldmatrix.x4 addresses in a swizzled tile. Each lane gives one row address of a 16x16
// block; the three operand forms differ only in which lane gives which 8x8 matrix:
// - A operand (rows = M, columns = K), matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7),
//   (rows 0-7, cols 8-15), (rows 8-15, cols 8-15) -> a[0..3];
// - Bᵀ operand, a tile stored (N rows, K contiguous) — keys by head dim — read as the B of
//   A·Bᵀ (B[k][n] = tile[n][k]): matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
//   (n 8-15, k 8-15) -> r[0], r[1] = b0, b1 of n-tile 0; r[2], r[3] = b0, b1 of n-tile 1;
// - B operand read with ldmatrix.trans from a tile stored (K rows, N contiguous) — keys by
//   head dim, for P·V (B[k][n] = tile[k][n]): matrices (k 0-7, n 0-7), (k 8-15, n 0-7),
//   (k 0-7, n 8-15), (k 8-15, n 8-15) -> the same b0, b1 pairs; the lane pattern is the A
//   operand's.
//
// The swizzle steps by XOR: in a block at (row0, col0) with row0 a multiple of 8 and col0 of
// 16, a lane's row is row0 + r (r < 16) and its chunk 2j + x (j = col0 / 16, x = 0 or 1),
// so its swizzled chunk is (2j + x) ^ (r & 7) = (x ^ (r & 7)) ^ 2j. Its byte offset is thus
// (offset in the block at (0, 0)) ^ (2·col0), plus row0·2D: one XOR per column step and an
// immediate per row step, where the general formula costs an add, an XOR, a shift and an
// add per ldmatrix (the forward kernel's integer work per tile fell by about a third). The
// XOR must not reach the row bits, so tile addresses must be multiples of a row (2D bytes,
// a power of two): the forward kernel aligns its shared memory to 1024 bytes and every tile
// in it starts at a whole row.
template <int D>
__device__ __forceinline__ std::uint32_t a_operand_lane(std::uint32_t tile, int lane) {
  return tile + swizzled_offset<D>((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
}
template <int D>
__device__ __forceinline__ std::uint32_t bt_operand_lane(std::uint32_t tile, int lane) {
  return tile + swizzled_offset<D>((lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
}
template <int D>
__device__ __forceinline__ std::uint32_t b_operand_trans_lane(std::uint32_t tile, int lane) {
  return a_operand_lane<D>(tile, lane);
}
// The address of the block at (row0, col0) from a lane's address of the block at (0, 0).
template <int D>
__device__ __forceinline__ std::uint32_t block_address(std::uint32_t lane_address, int row0, int col0) {
  return (lane_address ^ static_cast<std::uint32_t>(2 * col0)) + static_cast<std::uint32_t>(row0 * 2 * D);
}

// ---------------------------------------------------------------------------------------
// Fast math: the MUFU instructions. ex2.approx(-inf) = +0, which the online softmax relies
// on for masked scores.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// tanh from one ex2 and one division: 1 − 2/(e^{2x} + 1). Absolute error ~1e-7, where
// tanh.approx.f32's ~5e-4 would move softcapped scores (c up to 50) by several hundredths.
// Saturates correctly: e^{2x} = inf gives 1, e^{2x} = 0 gives −1.
__device__ __forceinline__ float fast_tanh(float x) {
  return 1.0f - 2.0f / (fast_exp2(x * (2.0f * kLog2e)) + 1.0f);
}

// ---------------------------------------------------------------------------------------
// The score function of include/qkv/attention.h, per element, in base 2 (log2(e) folded
// into every term so the softmax can use exp2):
//   s = scale·(q·k); softcap c: s = c·tanh(s/c); ALiBi: s −= slope·|i' − j|;
//   structurally masked (causal, window, key length) -> −inf.
struct ScoreParams {
  float scale_log2;      // scale·log2(e) (no softcap) or scale / c (softcap: tanh's argument)
  float softcap_log2;    // c·log2(e); 0 = no softcap
  float alibi_log2;      // slope_h·log2(e); 0 = no ALiBi
  bool causal;
  int window_left, window_right;  // −1 = unbounded
  int key_length;                 // Lk_b
  int diagonal_offset;            // i' − i: 0 (top_left) or Lk_b − Lq (bottom_right)
};

// The base-2 score from the raw product qk = q·k of query i and key j (no mask applied).
__device__ __forceinline__ float score_value(const ScoreParams& p, float qk, int i, int j) {
  float s;
  if (p.softcap_log2 != 0.0f) {
    s = p.softcap_log2 * fast_tanh(qk * p.scale_log2);
  } else {
    s = qk * p.scale_log2;
  }
  if (p.alibi_log2 != 0.0f) {
    const int d = i + p.diagonal_offset - j;
    s -= p.alibi_log2 * static_cast<float>(d < 0 ? -d : d);
  }
  return s;
}

// Whether key j is structurally allowed for query i (problem.h's structurally_allowed).
__device__ __forceinline__ bool score_allowed(const ScoreParams& p, int i, int j) {
  if (j >= p.key_length) return false;
  const int d = i + p.diagonal_offset;
  if (p.causal && j > d) return false;
  if (p.window_left >= 0 && j < d - p.window_left) return false;
  if (p.window_right >= 0 && j > d + p.window_right) return false;
  return true;
}

}  // namespace qkv::cuda::detail
