// The fused CPU attention kernel ("flash" style), one build per instruction set.
//
// Each ISA variant is the same source (flash_body.inc) compiled under a different
// `#pragma GCC target` in its own namespace; dispatch.cpp picks one at run time from
// the CPU's features, or from QKV_ISA=scalar|avx2|avx512|avx512_bf16|amx|amx_emulated
// (tests, benchmarks). avx512_bf16 is avx512 plus bf16 inputs multiplied as bf16 pairs
// (vdpbf16ps); amx multiplies those pairs on AMX tiles; amx_emulated is the amx code with
// the tile instructions modeled in C++ (amx_tiles.inc), so that it is tested everywhere.
#pragma once

#include <string>
#include <vector>

#include "attention/problem.h"

namespace qkv::detail {

enum class Isa { scalar, avx2, avx512, avx512_bf16, amx, amx_emulated };

const char* isa_name(Isa isa);
// The variants this build contains that this CPU can run, best last (amx_emulated is
// not among them: it only stands in for amx).
std::vector<Isa> supported_isas();
// What the tests run: supported_isas() plus amx_emulated where the CPU runs it but has no
// AMX, so the tile code is tested on every machine with AVX512-BF16.
std::vector<Isa> tested_isas();
// QKV_ISA when set (an unknown or unsupported value throws qkv::Error), else the best.
Isa selected_isa();
// Overrides the selection for this process (tests); throws when the CPU lacks it.
void set_isa(Isa isa);

// out (B, Hq, Lq, Dv) in q's dtype; lse (B, Hq, Lq) f32 when wanted. Probabilities are
// not produced here (the caller takes the reference path for them).
AttentionResult flash_attention(const AttentionProblem& problem, const Tensor& q, const Tensor& k,
                                const Tensor& v, bool return_lse, Isa isa);

// One kernel per ISA variant, all of this signature:
//   out (B, Hq, Lq, Dv), preallocated in q's dtype; lse (B, Hq, Lq) or null.
using FlashForward = void(const AttentionProblem& p, const Tensor& q, const Tensor& k,
                          const Tensor& v, Tensor& out, float* lse);
namespace scalar { FlashForward flash_forward; }
namespace avx2 { FlashForward flash_forward; }
namespace avx512 { FlashForward flash_forward; }
namespace avx512_bf16 { FlashForward flash_forward; }
namespace amx { FlashForward flash_forward; }
namespace amx_emulated { FlashForward flash_forward; }

}  // namespace qkv::detail
