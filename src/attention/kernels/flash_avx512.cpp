// The fused attention kernel built for avx512.
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
#pragma GCC target("avx512f,avx512bw,avx512vl,prefer-vector-width=512")
namespace qkv::detail::avx512 {
#include "attention/kernels/flash_body.inc"
}  // namespace qkv::detail::avx512
#endif  // __x86_64__
