// The tiled attention backward built for simd128: 128-bit vectors, the compiler's baseline
// (SSE2 on x86-64, NEON on aarch64).
// Every header comes first; only the kernel body is compiled for the target.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "attention/backward.h"
#include "qkv/tensor.h"
#include "qkv/threads.h"

#define QKV_VEC_BYTES 16  // SSE2 on x86-64 (16 registers), NEON on aarch64 (32)
#define QKV_BWD_ROWS 4
#define QKV_BWD_VECS 2
namespace qkv::detail::simd128 {
#include "attention/kernels/flash_backward_body.inc"
}  // namespace qkv::detail::simd128
