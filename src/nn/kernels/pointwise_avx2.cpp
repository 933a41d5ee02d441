// The pointwise kernels (pointwise.h) built for avx2: 8 float lanes. FMA stays unused:
// contraction is off, so that this variant computes the simd128 one's bits.
// Every header comes first; only the kernel body is compiled for the target.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "nn/kernels/pointwise.h"

#if defined(__x86_64__)  // other CPUs build only the simd128 variant
// No contraction into FMA: GCC contracts a·b + c in C++ wherever the target has FMA (as
// avx512's has), and every variant must compute the simd128 one's bits.
#pragma GCC optimize("fp-contract=off")
#pragma GCC target("avx2")
namespace qkv::nn::detail::pointwise_avx2 {
#include "nn/kernels/pointwise_body.inc"
}  // namespace qkv::nn::detail::pointwise_avx2
#endif  // __x86_64__
