// Chooses the ISA variant of the kernels at run time: the one table of variants and the one
// mechanism every kernel call goes through, so that no other code chooses among them.
// QKV_ISA=simd128|avx2|avx512|avx512_bf16|amx|amx_emulated (or scalar, simd128's former
// name) overrides the choice.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <new>
#include <string>

#include "attention/kernels/flash.h"
#include "qkv/cpu.h"
#include "qkv/error.h"
#include "qkv/threads.h"

namespace qkv::detail {

// The entry points each variant's sources define in its namespace (flash_<isa>.cpp,
// flash_backward_<isa>.cpp); x86-64 variants compile to nothing on other CPUs.
namespace simd128 {
FlashForward flash_forward, flash_decode;
FlashBackward flash_backward;
FlashForwardMemory flash_forward_memory;
FlashBackwardMemory flash_backward_memory;
}  // namespace simd128
#if defined(__x86_64__)
namespace avx2 {
FlashForward flash_forward, flash_decode;
FlashBackward flash_backward;
FlashForwardMemory flash_forward_memory;
FlashBackwardMemory flash_backward_memory;
}  // namespace avx2
namespace avx512 {
FlashForward flash_forward, flash_decode;
FlashBackward flash_backward;
FlashForwardMemory flash_forward_memory;
FlashBackwardMemory flash_backward_memory;
}  // namespace avx512
namespace avx512_bf16 { FlashForward flash_forward, flash_decode; FlashForwardMemory flash_forward_memory; }
namespace amx { FlashForward flash_forward, flash_decode; FlashForwardMemory flash_forward_memory; }
namespace amx_emulated { FlashForward flash_forward, flash_decode; FlashForwardMemory flash_forward_memory; }
#endif

namespace {

#if defined(__x86_64__)
bool has_avx512(const CpuFeatures& f) { return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq; }
#endif

struct IsaRow {
  const char* name;
  bool (*runs)(const CpuFeatures& f);  // whether this CPU (and the OS) can run the variant
  const char* stands_in_for;           // a stand-in is tested where the CPU lacks that one, never chosen
  IsaKernels kernels;
};

// Best last: with no QKV_ISA the last row this CPU runs is chosen (stand-ins aside).
constexpr IsaRow kRows[] = {
    {"simd128", [](const CpuFeatures&) { return true; }, nullptr,
     {simd128::flash_forward, simd128::flash_decode, simd128::flash_backward, simd128::flash_forward_memory,
      simd128::flash_backward_memory}},
#if defined(__x86_64__)
    {"avx2", [](const CpuFeatures& f) { return f.avx2 && f.fma && f.f16c; }, nullptr,
     {avx2::flash_forward, avx2::flash_decode, avx2::flash_backward, avx2::flash_forward_memory,
      avx2::flash_backward_memory}},
    {"avx512", has_avx512, nullptr,
     {avx512::flash_forward, avx512::flash_decode, avx512::flash_backward, avx512::flash_forward_memory,
      avx512::flash_backward_memory}},
    {"avx512_bf16", [](const CpuFeatures& f) { return has_avx512(f) && f.avx512_bf16; }, nullptr,
     {avx512_bf16::flash_forward, avx512_bf16::flash_decode, avx512::flash_backward,
      avx512_bf16::flash_forward_memory, avx512::flash_backward_memory}},
    // amx_tile: the CPU has the tiles and Linux granted their state (qkv/cpu.h).
    {"amx", [](const CpuFeatures& f) { return has_avx512(f) && f.avx512_bf16 && f.amx_tile && f.amx_bf16; },
     nullptr,
     {amx::flash_forward, amx::flash_decode, avx512::flash_backward, amx::flash_forward_memory,
      avx512::flash_backward_memory}},
    // The tile model needs no AMX.
    {"amx_emulated", [](const CpuFeatures& f) { return has_avx512(f) && f.avx512_bf16; }, "amx",
     {amx_emulated::flash_forward, amx_emulated::flash_decode, avx512::flash_backward,
      amx_emulated::flash_forward_memory, avx512::flash_backward_memory}},
#endif
};
constexpr int kRowCount = static_cast<int>(std::size(kRows));

// Former names QKV_ISA still accepts: {alias, name}.
constexpr const char* kAliases[][2] = {{"scalar", "simd128"}};

const IsaRow& row_of(Isa isa) {
  QKV_CHECK(isa.row >= 0 && isa.row < kRowCount, "no ISA variant " << isa.row << " in this build");
  return kRows[isa.row];
}

bool cpu_runs(Isa isa) { return row_of(isa).runs(cpu_features()); }

Isa checked(Isa isa) {
  QKV_CHECK(cpu_runs(isa), "QKV_ISA: this CPU cannot run '" << isa_name(isa)
                                                             << "' (" << cpu_summary() << ")");
  return isa;
}

// −1 = not chosen yet; else the row.
std::atomic<int> g_isa{-1};

}  // namespace

const char* isa_name(Isa isa) { return row_of(isa).name; }

Isa parse_isa(const std::string& name) {
  std::string wanted = name, names;  // names: for the error, every name from the same lists
  for (const auto& alias : kAliases)
    if (name == alias[0]) wanted = alias[1];
  for (int row = 0; row < kRowCount; ++row) {
    if (wanted == kRows[row].name) return Isa{row};
    names += (names.empty() ? "" : ", ") + std::string(kRows[row].name);
  }
  for (const auto& alias : kAliases) names += std::string(", ") + alias[0] + " (= " + alias[1] + ")";
  throw Error("QKV_ISA: expected one of " + names + "; got '" + name + "'");
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (int row = 0; row < kRowCount; ++row)
    if (!kRows[row].stands_in_for && cpu_runs(Isa{row})) isas.push_back(Isa{row});
  return isas;
}

std::vector<Isa> tested_isas() {
  std::vector<Isa> isas = supported_isas();
  for (int row = 0; row < kRowCount; ++row)
    if (kRows[row].stands_in_for && cpu_runs(Isa{row}) && !cpu_runs(parse_isa(kRows[row].stands_in_for)))
      isas.push_back(Isa{row});
  return isas;
}

Isa selected_isa() {
  int chosen = g_isa.load(std::memory_order_relaxed);
  if (chosen < 0) {
    const char* env = std::getenv("QKV_ISA");
    chosen = ((env && *env) ? checked(parse_isa(env)) : supported_isas().back()).row;
    g_isa.store(chosen, std::memory_order_relaxed);
  }
  return Isa{chosen};
}

const IsaKernels& isa_kernels(Isa isa) { return row_of(checked(isa)).kernels; }

bool is_decode(const AttentionProblem& p) {
  if (p.B * p.Hq * p.Lq == 0) return false;  // nothing to compute (and no key lengths when B = 0)
  const std::int64_t max_keys = *std::max_element(p.key_lengths.begin(), p.key_lengths.end());
  return p.Lq <= kSplitMaxRows && max_keys > 2 * kSplitKeys;
}

AttentionResult flash_attention(const AttentionProblem& problem, const Tensor& q, const Tensor& k,
                                const Tensor& v, bool return_lse, Isa isa) {
  // The kernels read f32, bf16 and f16 (and f64 float masks); f64 data is the reference's,
  // computed in double (attention.cpp sends it there; make_problem refuses impl fast).
  QKV_CHECK_TYPE(q.dtype() != DType::f64,
                 "scaled_dot_product_attention: the fast kernel does not take f64 inputs");
  const IsaKernels& kernels = isa_kernels(isa);
  const AttentionProblem& p = problem;
  MemoryPlan plan("scaled_dot_product_attention");
  plan.add("the output (B, Hq, Lq, Dv)", {p.B, p.Hq, p.Lq, p.Dv, static_cast<std::int64_t>(dtype_size(q.dtype()))});
  if (return_lse) plan.add("the log-sum-exp (B, Hq, Lq) f32", {p.B, p.Hq, p.Lq, 4});
  kernels.forward_memory(p, q, k, v, num_threads(), plan);
  return plan.run([&] {
    AttentionResult result;
    result.out = Tensor::empty({p.B, p.Hq, p.Lq, p.Dv}, q.dtype());
    if (return_lse) result.lse = Tensor::empty({p.B, p.Hq, p.Lq}, DType::f32);
    float* lse = return_lse ? result.lse.data_as<float>() : nullptr;
    FlashForward* run = is_decode(p) ? kernels.decode : kernels.forward;
    run(p, q, k, v, result.out, lse);
    return result;
  });
}

}  // namespace qkv::detail
