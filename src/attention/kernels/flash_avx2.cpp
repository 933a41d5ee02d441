// The fused attention kernel built for avx2.
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
#include <memory>
#include <utility>
#include <vector>

#include "attention/kernels/flash.h"
#include "qkv/tensor.h"
#include "qkv/threads.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#define QKV_F16C 1  // vcvtph2ps: every AVX2 CPU has F16C, and dispatch checks it
#define QKV_VEC_BYTES 32  // 16 ymm registers: 8 accumulators + 2 loads + 1 broadcast
#define QKV_QK_KEYS 4
#define QKV_QK_VECS 2
#define QKV_PV_ROWS 4
#define QKV_PV_VECS 2
namespace qkv::detail::avx2 {
#include "attention/kernels/flash_body.inc"
}  // namespace qkv::detail::avx2
#endif  // __x86_64__
