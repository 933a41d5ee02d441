// The pointwise kernels (pointwise.h) built for avx512: 16 float lanes (one register holds
// the 16 lanes every sum runs over), for the avx512, avx512_bf16 and amx rows of the dispatch.
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
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")
namespace qkv::nn::detail::pointwise_avx512 {
#include "nn/kernels/pointwise_body.inc"
}  // namespace qkv::nn::detail::pointwise_avx512
#endif  // __x86_64__
