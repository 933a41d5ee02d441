// What this CPU can do, detected once at run time (cpuid + xgetbv; AMX also asks
// Linux for permission to use the tile state). Kernels are chosen from this, never
// from compile-time flags, so one binary runs on every x86-64 machine.
#pragma once

#include <string>

namespace qkv {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;  // 64-bit lane multiplies (vpmullq): dropout's counter hash
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx_tile = false;  // tiles usable: cpuid bit and OS permission granted
  bool amx_bf16 = false;
  std::string brand;  // e.g. "AMD EPYC 9R14" (empty where cpuid has none)
};

const CpuFeatures& cpu_features();
// One line: the brand and the feature names that are present.
std::string cpu_summary();

}  // namespace qkv
