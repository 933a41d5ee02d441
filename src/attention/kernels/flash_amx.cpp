// The fused attention kernel built for AMX: the avx512_bf16 variant with bf16 inputs'
// Q·Kᵀ and P·V on AMX tiles (TDPBF16PS, 16×16 f32 += 16×32 bf16 · 32×16 bf16); f32 and
// f16 inputs take the avx512 code. Chosen only where the CPU has AMX-TILE and AMX-BF16
// and Linux granted the tile state (qkv/cpu.h).
// flash_amx_emulated.cpp compiles this file again with QKV_AMX_EMULATED: the same tile
// code on a software model of the tiles (amx_tiles.inc), in namespace amx_emulated.
// Every header comes first; only the kernel body is compiled for the target.
#include <immintrin.h>
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
#include "qkv/cpu.h"
#include "qkv/tensor.h"
#include "qkv/threads.h"

#if defined(__x86_64__)
#if defined(QKV_AMX_EMULATED)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,prefer-vector-width=512")
#define QKV_AMX_VARIANT amx_emulated
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16,prefer-vector-width=512")
#define QKV_AMX_VARIANT amx
#endif
#define QKV_VEC_BYTES 64  // 32 zmm registers: 16 accumulators + loads + broadcasts
#define QKV_QK_KEYS 8
#define QKV_QK_VECS 2
#define QKV_PV_ROWS 4
#define QKV_PV_VECS 4
#define QKV_BF16_DOT 1
#define QKV_AMX_TILES 1
namespace qkv::detail::QKV_AMX_VARIANT {
#include "attention/kernels/flash_body.inc"
}  // namespace qkv::detail::QKV_AMX_VARIANT
#endif  // __x86_64__
