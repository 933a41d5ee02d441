// Chooses the ISA variant of the fused kernel at run time: the one mechanism every
// kernel goes through (STYLE.md 9). QKV_ISA=scalar|avx2|avx512|avx512_bf16|amx|amx_emulated
// overrides it.
#include <atomic>
#include <cstdlib>
#include <string>

#include "attention/kernels/flash.h"
#include "qkv/cpu.h"
#include "qkv/error.h"

namespace qkv::detail {
namespace {

bool cpu_runs(Isa isa) {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return f.avx2 && f.fma && f.f16c;
    case Isa::avx512: return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
    case Isa::avx512_bf16: return cpu_runs(Isa::avx512) && f.avx512_bf16;
    case Isa::amx: return cpu_runs(Isa::avx512_bf16) && f.amx_tile && f.amx_bf16;
    case Isa::amx_emulated: return cpu_runs(Isa::avx512_bf16);  // the model needs no AMX
  }
  return false;
#else
  return isa == Isa::scalar;
#endif
}

constexpr Isa kAllIsas[] = {Isa::scalar, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx, Isa::amx_emulated};

Isa parse_isa(const std::string& name) {
  std::string names;  // for the error: every name, from the same list
  for (Isa isa : kAllIsas) {
    if (name == isa_name(isa)) return isa;
    names += (names.empty() ? "" : ", ") + std::string(isa_name(isa));
  }
  throw Error("QKV_ISA: expected one of " + names + "; got '" + name + "'");
}

Isa checked(Isa isa) {
  QKV_CHECK(cpu_runs(isa), "QKV_ISA: this CPU cannot run '" << isa_name(isa)
                                                             << "' (" << cpu_summary() << ")");
  return isa;
}

// −1 = not chosen yet.
std::atomic<int> g_isa{-1};

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::amx: return "amx";
    case Isa::amx_emulated: return "amx_emulated";
  }
  return "unknown";
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : kAllIsas)
    if (isa != Isa::amx_emulated && cpu_runs(isa)) isas.push_back(isa);
  return isas;
}

std::vector<Isa> tested_isas() {
  std::vector<Isa> isas = supported_isas();
  if (!cpu_runs(Isa::amx) && cpu_runs(Isa::amx_emulated)) isas.push_back(Isa::amx_emulated);
  return isas;
}

Isa selected_isa() {
  int chosen = g_isa.load(std::memory_order_relaxed);
  if (chosen < 0) {
    const char* env = std::getenv("QKV_ISA");
    const Isa isa = (env && *env) ? checked(parse_isa(env)) : supported_isas().back();
    chosen = static_cast<int>(isa);
    g_isa.store(chosen, std::memory_order_relaxed);
  }
  return static_cast<Isa>(chosen);
}

void set_isa(Isa isa) { g_isa.store(static_cast<int>(checked(isa)), std::memory_order_relaxed); }

AttentionResult flash_attention(const AttentionProblem& problem, const Tensor& q, const Tensor& k,
                                const Tensor& v, bool return_lse, Isa isa) {
  AttentionResult result;
  result.out = Tensor::empty({problem.B, problem.Hq, problem.Lq, problem.Dv}, q.dtype());
  if (return_lse) result.lse = Tensor::empty({problem.B, problem.Hq, problem.Lq}, DType::f32);
  float* lse = return_lse ? result.lse.data_as<float>() : nullptr;
  switch (checked(isa)) {
    case Isa::scalar: scalar::flash_forward(problem, q, k, v, result.out, lse); break;
#if defined(__x86_64__)
    case Isa::avx2: avx2::flash_forward(problem, q, k, v, result.out, lse); break;
    case Isa::avx512: avx512::flash_forward(problem, q, k, v, result.out, lse); break;
    case Isa::avx512_bf16: avx512_bf16::flash_forward(problem, q, k, v, result.out, lse); break;
    case Isa::amx: amx::flash_forward(problem, q, k, v, result.out, lse); break;
    case Isa::amx_emulated: amx_emulated::flash_forward(problem, q, k, v, result.out, lse); break;
#else
    default: break;  // checked() already refused
#endif
  }
  return result;
}

}  // namespace qkv::detail
