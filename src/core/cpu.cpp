#include "qkv/cpu.h"

#include <cstring>
#include <sstream>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define QKV_X86_64 1
#endif

namespace qkv {
namespace {

#if QKV_X86_64
std::uint64_t read_xcr0() {
  std::uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<std::uint64_t>(edx) << 32) | eax;
}

// Linux keeps AMX tile state off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM,
// kernel >= 5.16); using tiles without permission raises SIGILL.
bool request_amx_permission() {
#if defined(__linux__)
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  __get_cpuid(1, &a, &b, &c, &d);
  const bool osxsave = c & (1u << 27);
  const bool fma = c & (1u << 12);
  const bool f16c = c & (1u << 29);
  const std::uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;             // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;        // plus opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;     // XTILECFG and XTILEDATA
  f.fma = os_avx && fma;
  f.f16c = os_avx && f16c;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = os_avx && (b & (1u << 5));
    f.avx512f = os_avx512 && (b & (1u << 16));
    f.avx512bw = os_avx512 && (b & (1u << 30));
    f.avx512vl = os_avx512 && (b & (1u << 31));
    f.avx512dq = os_avx512 && (b & (1u << 17));
    f.avx512_fp16 = os_avx512 && (d & (1u << 23));
    const bool amx_bf16 = d & (1u << 22);
    const bool amx_tile = d & (1u << 24);
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = os_avx512 && (a & (1u << 5));
    if (os_amx && amx_tile && request_amx_permission()) {
      f.amx_tile = true;
      f.amx_bf16 = amx_bf16;
    }
  }
  unsigned brand[12] = {};
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000004u) {
    for (unsigned leaf = 0; leaf < 3; ++leaf)
      __get_cpuid(0x80000002u + leaf, &brand[4 * leaf], &brand[4 * leaf + 1],
                  &brand[4 * leaf + 2], &brand[4 * leaf + 3]);
    char text[49] = {};
    std::memcpy(text, brand, 48);
    f.brand = text;
    const auto first = f.brand.find_first_not_of(' ');
    const auto last = f.brand.find_last_not_of(' ');
    f.brand = first == std::string::npos ? "" : f.brand.substr(first, last - first + 1);
  }
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string cpu_summary() {
  const CpuFeatures& f = cpu_features();
  std::ostringstream out;
  out << (f.brand.empty() ? "unknown CPU" : f.brand) << ':';
  const std::pair<bool, const char*> names[] = {
      {f.avx2, "avx2"},         {f.fma, "fma"},           {f.f16c, "f16c"},
      {f.avx512f, "avx512f"},   {f.avx512bw, "avx512bw"}, {f.avx512vl, "avx512vl"}, {f.avx512dq, "avx512dq"},
      {f.avx512_bf16, "avx512_bf16"}, {f.avx512_fp16, "avx512_fp16"},
      {f.amx_tile, "amx_tile"}, {f.amx_bf16, "amx_bf16"}};
  bool any = false;
  for (const auto& [present, name] : names) {
    if (present) {
      out << ' ' << name;
      any = true;
    }
  }
  if (!any) out << " (no SIMD extensions detected)";
  return out.str();
}

}  // namespace qkv
