// The fused attention kernel built for scalar (the compiler's baseline: SSE2 on x86-64).
// Every header comes first; only the kernel body is compiled for the target.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/kernels/flash.h"
#include "qkv/threads.h"



namespace qkv::detail::scalar {
#include "attention/kernels/flash_body.inc"
}  // namespace qkv::detail::scalar

