// The fused CPU attention kernels ("flash" style), one build per instruction set, and the
// one mechanism that chooses among them (dispatch.cpp).
//
// Each ISA variant is the same source (flash_body.inc for the forward,
// flash_backward_body.inc for the backward) compiled under a different
// `#pragma GCC target` in its own namespace. The variants:
//   simd128       128-bit vectors: SSE2 on x86-64 (every x86-64 CPU runs it), NEON on
//                 aarch64, where it is the only variant (tests/cross runs its tests there);
//                 QKV_ISA=scalar, its former name, still selects it
//   avx2          256-bit, with FMA and F16C
//   avx512        512-bit (F, BW, VL, DQ)
//   avx512_bf16   avx512 plus bf16 inputs multiplied as bf16 pairs (vdpbf16ps)
//   amx           avx512_bf16 with those pairs multiplied on AMX tiles
//   amx_emulated  the amx code with the tile instructions modeled in C++ (amx_tiles.inc),
//                 so that it is tested on every CPU with AVX512-BF16; never chosen by itself
// dispatch.cpp's table has one row per variant: its name, what the CPU needs, and its entry
// points, filled at compile time. Adding an instruction set means its kernel sources
// (listed in sources.cmake) and one row there; no other code chooses among the variants.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attention/problem.h"
#include "core/budget.h"    // MemoryPlan: every entry point's memory is planned first
#include "core/parallel.h"  // RegionErrors: every parallel region of the kernels

namespace qkv::detail {

// One ISA variant: a row of dispatch.cpp's table. isa_name() names it.
struct Isa {
  int row = 0;
  bool operator==(const Isa&) const = default;
};

const char* isa_name(Isa isa);
// The variant QKV_ISA names (or an alias of it, such as scalar for simd128); throws
// qkv::Error listing every name when there is none. Whether the CPU runs it is not checked.
Isa parse_isa(const std::string& name);
// The variants this build contains that this CPU can run, best last (amx_emulated is
// not among them: it only stands in for amx).
std::vector<Isa> supported_isas();
// What the tests run: supported_isas() plus amx_emulated where the CPU runs it but has no
// AMX, so the tile code is tested on every machine with AVX512-BF16.
std::vector<Isa> tested_isas();
// QKV_ISA when set (an unknown or unsupported value throws qkv::Error), else the best;
// read once per process.
Isa selected_isa();

// The entry points of one variant, all working on a validated problem:
//   forward, decode: out (B, Hq, Lq, Dv), preallocated in q's dtype; lse (B, Hq, Lq) or null.
//     Probabilities are not produced here (the caller takes the reference path for them).
//   backward: g holds contiguous f32 tensors, which the kernel fills completely:
//     dq (B, Hq, Lq, Dk), dk (B, Hkv, Lk, Dk), dv (B, Hkv, Lk, Dv).
using FlashForward = void(const AttentionProblem& p, const Tensor& q, const Tensor& k,
                          const Tensor& v, Tensor& out, float* lse);
using FlashBackward = void(const AttentionProblem& p, const Tensor& dout, const Tensor& q,
                           const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                           AttentionGradients& g);
//   forward_memory, backward_memory: add to `plan` what forward (or decode) and backward
//   allocate besides their outputs, on `threads` threads (temporary copies, scratch per thread).
using FlashForwardMemory = void(const AttentionProblem& p, const Tensor& q, const Tensor& k,
                                const Tensor& v, int threads, MemoryPlan& plan);
using FlashBackwardMemory = void(const AttentionProblem& p, int threads, MemoryPlan& plan);
struct IsaKernels {
  FlashForward* forward;    // every problem but decode's: tasks of one query block each
  FlashForward* decode;     // is_decode(p): each task's keys split into chunks (below)
  FlashBackward* backward;  // the bf16-pair and tile variants run the avx512 one (f32)
  FlashForwardMemory* forward_memory;
  FlashBackwardMemory* backward_memory;  // the backward's, as `backward`
};
// The entry points of `isa`; throws qkv::Error when this CPU cannot run it.
const IsaKernels& isa_kernels(Isa isa);

// Decode: few queries, many keys. The decode entry point splits each task's keys into
// chunks of kSplitKeys, each a unit of parallel work whose partial (m, l, O) are merged
// afterwards, so that one query can use every core. The split depends only on the shape,
// never on the thread count, so results stay bit-identical for any number of threads.
constexpr std::int64_t kSplitMaxRows = 16;  // queries (Lq) at most
constexpr std::int64_t kSplitKeys = 512;    // keys per chunk; decode needs more than two chunks
bool is_decode(const AttentionProblem& p);

// The head dimensions the fast kernels take, forward and backward. Their scratch per thread
// holds tiles and blocks of whole rows of the head dimension: forward about 132 rows of Dk and
// of Dv (0.5 KiB per unit of Dk + Dv: 17 MiB at 16384 each, but 1.1 GiB at 2^20, which made
// legal inputs fail), backward about 256 rows of Dk and 192 of Dv plus the task's dQ. Wider
// heads run the reference (attention.cpp), whose scratch per thread is Lk + Dv doubles
// forward (Lk·(Dk + Dv) backward).
constexpr std::int64_t kMaxFastHeadDim = 16384;
inline bool fast_kernel_takes(const AttentionProblem& p) {
  return p.Dk <= kMaxFastHeadDim && p.Dv <= kMaxFastHeadDim;
}

// Checks the memory the call needs (the outputs and forward_memory's) against the limit,
// then allocates out (and lse when wanted) and runs isa's forward or decode entry point.
AttentionResult flash_attention(const AttentionProblem& problem, const Tensor& q, const Tensor& k,
                                const Tensor& v, bool return_lse, Isa isa);

}  // namespace qkv::detail
