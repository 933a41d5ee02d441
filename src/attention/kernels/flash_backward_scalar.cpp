// The tiled attention backward built for scalar (the compiler's baseline: SSE2 on x86-64,
// NEON on aarch64).
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

#define QKV_VEC_BYTES 16  // SSE2: 16 registers: 8 accumulators + 2 loads + 1 broadcast
#define QKV_BWD_ROWS 4
#define QKV_BWD_VECS 2
namespace qkv::detail::scalar {
#include "attention/kernels/flash_backward_body.inc"
}  // namespace qkv::detail::scalar
