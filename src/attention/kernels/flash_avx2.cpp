// The fused attention kernel built for avx2.
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

#if defined(__x86_64__)
#pragma GCC target("avx2,fma")
namespace qkv::detail::avx2 {
#include "attention/kernels/flash_body.inc"
}  // namespace qkv::detail::avx2
#endif  // __x86_64__
