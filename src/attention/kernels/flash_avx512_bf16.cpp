// The fused attention kernel built for AVX-512 with AVX512-BF16: the avx512 variant plus
// bf16 inputs multiplied as bf16 pairs. One source, three builds:
//   this file:              namespace avx512_bf16, the pairs multiply with vdpbf16ps;
//   flash_amx.cpp:          QKV_AMX_TILES, namespace amx: bf16 inputs' Q·Kᵀ and P·V on
//                           AMX tiles (TDPBF16PS, 16×16 f32 += 16×32 bf16 · 32×16 bf16),
//                           chosen only where the CPU has AMX-TILE and AMX-BF16 and Linux
//                           granted the tile state (qkv/cpu.h);
//   flash_amx_emulated.cpp: also QKV_AMX_EMULATED, namespace amx_emulated: the same tile
//                           code on a software model of the tiles (amx_tiles.inc).
// f32 and f16 inputs take the avx512 code in all three.
// Every header comes first; only the kernel body is compiled for the target.
#if defined(__x86_64__)  // as the kernel below: other CPUs build only the simd128 variant
#include <immintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "attention/kernels/flash.h"
#include "core/amx_tile_config.h"
#include "qkv/tensor.h"
#include "qkv/threads.h"

#if defined(__x86_64__)
#if defined(QKV_AMX_TILES) && !defined(QKV_AMX_EMULATED)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16,prefer-vector-width=512")
#define QKV_BF16_VARIANT amx
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,prefer-vector-width=512")
#if defined(QKV_AMX_TILES)
#define QKV_BF16_VARIANT amx_emulated
#else
#define QKV_BF16_VARIANT avx512_bf16
#endif
#endif
#define QKV_VEC_BYTES 64  // 32 zmm registers: 16 accumulators + loads + broadcasts
#define QKV_QK_KEYS 8
#define QKV_QK_VECS 2
#define QKV_PV_ROWS 4
#define QKV_PV_VECS 4
#define QKV_BF16_DOT 1
namespace qkv::detail::QKV_BF16_VARIANT {
#include "attention/kernels/flash_body.inc"
}  // namespace qkv::detail::QKV_BF16_VARIANT
#endif  // __x86_64__
