// qkv version — what was built, with what, and what it runs on.
#include <string>
#include <string_view>

#include "commands.h"
#include "qkv/qkv.h"

#ifndef QKV_BUILD_TYPE
#define QKV_BUILD_TYPE ""
#endif

namespace qkv::cli {
namespace {

const char* compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "g++ " __VERSION__;
#else
  return "unknown compiler";
#endif
}

}  // namespace

int run_version(std::ostream& out) {
  // Everything that can throw (a malformed QKV_NUM_THREADS) before anything is printed.
  const std::string cpu = qkv::cpu_summary();
  const int threads = qkv::num_threads();
  const std::string kernel_isa = qkv::fast_kernel_isa();  // throws on a bad QKV_ISA
  const std::string_view build_type = QKV_BUILD_TYPE;  // CMake's configuration, if any
  out << "qkv " << qkv::kVersion << '\n';
  out << "compiler: " << compiler() << " (C++" << __cplusplus / 100 % 100;
  if (!build_type.empty()) out << ", " << build_type << " build";
  out << ")\n";
  out << "cpu:      " << cpu << '\n';
  out << "threads:  " << threads << '\n';
  out << "impls:    auto, reference, fast\n";
  out << "kernel:   " << kernel_isa << " (override with QKV_ISA=simd128|avx2|avx512|avx512_bf16|amx|amx_emulated)\n";
  return 0;
}

}  // namespace qkv::cli
