// The tiled attention backward built for avx512 (also what avx512_bf16 runs).
// Every header comes first; only the kernel body is compiled for the target.
#if defined(__x86_64__)  // as the kernel below: other CPUs build only the simd128 variant
#include <immintrin.h>
#endif
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

#if defined(__x86_64__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")
#define QKV_VEC_BYTES 64  // 32 zmm registers: 16 accumulators + 4 loads + 1 broadcast
#define QKV_BWD_ROWS 4
#define QKV_BWD_VECS 4
namespace qkv::detail::avx512 {
#include "attention/kernels/flash_backward_body.inc"
}  // namespace qkv::detail::avx512
#endif  // __x86_64__
