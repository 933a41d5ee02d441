// The pointwise kernels (pointwise.h) built for simd128: the compiler's baseline, SSE2's
// 4 float lanes on x86-64 (NEON on aarch64, where it is the only variant).
// Every header comes first; only the kernel body is compiled for the target.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "nn/kernels/pointwise.h"

// No contraction into FMA: GCC contracts a·b + c in C++ wherever the target has FMA (as
// avx512's has), and every variant must compute the simd128 one's bits.
#pragma GCC optimize("fp-contract=off")
namespace qkv::nn::detail::pointwise_simd128 {
#include "nn/kernels/pointwise_body.inc"
}  // namespace qkv::nn::detail::pointwise_simd128
