// The CUDA backend's device queries and the argument checks of the device form. Needs only
// the CUDA runtime and qkv's headers, so the C ABI library (capi.cpp) builds from
// forward.cu, this file and capi.cpp alone (scripts/cuda/device_check.sh).
#include <cmath>
#include <cstdint>
#include <string>

#include "attention/cuda/check.h"

namespace qkv::cuda {
namespace {

// Asked once: the answer does not change while the process runs.
const std::string& reason() {
  static const std::string text = [] {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
    if (count == 0) return std::string("no CUDA device: the driver reports none");
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major < 9) {
      return std::string("the CUDA device ") + prop.name + " has compute capability " +
             std::to_string(prop.major) + "." + std::to_string(prop.minor) +
             "; qkv's kernels are built for Hopper (sm_90a)";
    }
    return std::string();
  }();
  return text;
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

void check_strides(const Strides& s, const char* name) {
  QKV_CHECK(s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0,
            "qkv::cuda::attention_forward: " << name << "'s strides (batch " << s.batch << ", head "
            << s.head << ", row " << s.row << ") must be multiples of 8 elements (16 bytes)");
}

}  // namespace

bool available() { return reason().empty(); }
std::string unavailable_reason() { return reason(); }

std::string device_name() {
  QKV_CHECK(available(), "qkv::cuda::device_name: " << reason());
  int device = 0;
  detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp prop{};
  detail::check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return prop.name;
}

namespace detail {

void check_arguments(const DeviceAttention& a) {
  const char* f = "qkv::cuda::attention_forward: ";
  QKV_CHECK(available(), f << reason());
  QKV_CHECK(a.dtype == ElementType::bf16 || a.dtype == ElementType::f16, f << "dtype must be bf16 or f16");
  QKV_CHECK(a.D == 64 || a.D == 128 || a.D == 256,
            f << "head dim D must be 64, 128 or 256, got " << a.D);
  QKV_CHECK(a.B >= 0 && a.Hq >= 0 && a.Hkv >= 1 && a.Lq >= 0 && a.Lk >= 0,
            f << "sizes must be non-negative (Hkv positive), got B " << a.B << ", Hq " << a.Hq
              << ", Hkv " << a.Hkv << ", Lq " << a.Lq << ", Lk " << a.Lk);
  QKV_CHECK(a.Hq % a.Hkv == 0, f << "Hq = " << a.Hq << " must be a multiple of Hkv = " << a.Hkv);
  QKV_CHECK(a.Lq < (std::int64_t{1} << 30) && a.Lk < (std::int64_t{1} << 30),
            f << "Lq and Lk must be below 2^30, got " << a.Lq << " and " << a.Lk);
  QKV_CHECK(a.B <= 65535 && a.Hq <= 65535, f << "B and Hq must be at most 65535 (grid), got "
                                              << a.B << " and " << a.Hq);
  QKV_CHECK(std::isfinite(a.scale), f << "scale must be finite, got " << a.scale);
  QKV_CHECK(std::isfinite(a.softcap) && a.softcap >= 0.0f,
            f << "softcap must be 0 (none) or positive, got " << a.softcap);
  QKV_CHECK(a.window_left >= -1 && a.window_right >= -1,
            f << "window sides must be -1 (unbounded) or >= 0, got (" << a.window_left << ", "
              << a.window_right << ")");
  if (a.B == 0 || a.Hq == 0 || a.Lq == 0) return;
  QKV_CHECK(a.q != nullptr && a.out != nullptr, f << "q and out must not be null");
  QKV_CHECK(a.Lk == 0 || (a.k != nullptr && a.v != nullptr), f << "k and v must not be null");
  QKV_CHECK(aligned16(a.q) && aligned16(a.k) && aligned16(a.v) && aligned16(a.out),
            f << "q, k, v and out must be 16-byte aligned");
  QKV_CHECK(reinterpret_cast<std::uintptr_t>(a.lse) % 4 == 0, f << "lse must be 4-byte aligned");
  check_strides(a.q_strides, "q");
  check_strides(a.k_strides, "k");
  check_strides(a.v_strides, "v");
  check_strides(a.out_strides, "out");
}

}  // namespace detail
}  // namespace qkv::cuda
