// The fused attention kernel built for simd128: 128-bit vectors, the compiler's baseline
// (SSE2 on x86-64, NEON on aarch64, where it is the only variant: tests/cross runs its
// tests there).
// Every header comes first; only the kernel body is compiled for the target.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "attention/kernels/flash.h"
#include "qkv/tensor.h"
#include "qkv/threads.h"

#define QKV_VEC_BYTES 16  // SSE2 on x86-64 (16 registers), NEON on aarch64 (32)
#define QKV_QK_KEYS 4
#define QKV_QK_VECS 2
#define QKV_PV_ROWS 4
#define QKV_PV_VECS 2
namespace qkv::detail::simd128 {
#include "attention/kernels/flash_body.inc"
}  // namespace qkv::detail::simd128
