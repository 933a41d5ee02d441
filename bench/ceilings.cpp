// qkv_ceilings — the machine's own ceilings, measured, so that attention figures can be
// reported as a fraction of what this CPU can do, on this machine and at this moment,
// rather than against a vendor's nominal peak:
//
//   f32 FMA peak     GFLOP/s of an FMA-bound loop, on the widest ISA and on AVX2 alone
//                    (and the widest on one thread, to show how the threads scale)
//   AVX512-BF16      GFLOP/s of vdpbf16ps (when the CPU has avx512_bf16)
//   AMX bf16         GFLOP/s of tdpbf16ps (when the CPU has amx_bf16 and Linux granted
//                    the tile state); null with the reason otherwise
//   memory read      GB/s of a streaming sum over a buffer much larger than the LLC
//
// Usage: qkv_ceilings [--threads N] [--repeats R] [--mem-mib M] [--seconds S]
// Prints one JSON object on stdout.
//
// This is a benchmark, not part of the library: the SIMD code lives here, each variant in
// a function compiled for its ISA with __attribute__((target(...))) and called only when
// qkv::cpu_features() says the CPU (and the OS) can run it.
//
// Statistics. Every ceiling is run `repeats` times (default 7) and reported as the BEST
// run, with the median beside it. A ceiling is the most the hardware can do; on a shared,
// noisy machine the noise (other tenants, frequency dips, page faults) can only make a
// run slower, never faster, so the best run is the closest estimate of the ceiling, and
// the median says how far a typical run falls below it. (Attention timings, by contrast,
// are medians: those are claims about typical speed.)
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/amx_tile_config.h"
#include "qkv/cpu.h"
#include "qkv/threads.h"
#include "qkv/version.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Results are folded into this so the compiler cannot drop the loops.
volatile double g_sink = 0.0;

// ---------------------------------------------------------------------------------------
// FMA-bound kernels. Each runs `iters` iterations of `kChains` independent FMA chains
// acc_j = acc_j * a + b. An FMA has a latency of about 4 cycles and current cores issue
// two per cycle, so at least 8 chains in flight are needed to keep both pipes busy; we
// use 16 zmm chains (32 zmm registers exist) and 12 ymm chains (16 ymm registers exist
// without AVX-512: 12 accumulators + 2 operands leave room). a < 1 and b > 0 keep the
// values bounded (they converge to b / (1 - a)), so no overflow or denormal slows a run.
// Returns the sum of the accumulators (for g_sink).

// Sum of the 16 lanes. (Not _mm512_reduce_add_ps: GCC 12 warns inside it, a false
// -Wuninitialized from _mm256_undefined_pd.)
__attribute__((target("avx512f"))) double hsum512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  double total = 0;
  for (float x : lanes) total += x;
  return total;
}

constexpr int kChains512 = 16;
constexpr int kChains256 = 12;

__attribute__((target("avx512f"))) double fma_avx512(std::int64_t iters) {
  const __m512 a = _mm512_set1_ps(0.999999f);
  const __m512 b = _mm512_set1_ps(1e-6f);
  __m512 acc[kChains512];
  for (int j = 0; j < kChains512; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains512; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kChains512; ++j) s = _mm512_add_ps(s, acc[j]);
  return hsum512(s);
}
constexpr double kFlopsPerIter512 = kChains512 * 16 * 2.0;  // 16 lanes, FMA = 2 FLOPs

__attribute__((target("avx2,fma"))) double fma_avx2(std::int64_t iters) {
  const __m256 a = _mm256_set1_ps(0.999999f);
  const __m256 b = _mm256_set1_ps(1e-6f);
  __m256 acc[kChains256];
  for (int j = 0; j < kChains256; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains256; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 s = acc[0];
  for (int j = 1; j < kChains256; ++j) s = _mm256_add_ps(s, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  double total = 0;
  for (float x : lanes) total += x;
  return total;
}
constexpr double kFlopsPerIter256 = kChains256 * 8 * 2.0;  // 8 lanes

// vdpbf16ps: each of the 16 f32 lanes gets acc += a0*b0 + a1*b1 from bf16 pairs, i.e.
// 2 multiplies and 2 adds: 64 FLOPs per instruction (the usual way bf16 dot-product
// peaks are counted). Same chain structure as fma_avx512.
__attribute__((target("avx512f,avx512bf16"))) double dpbf16_avx512(std::int64_t iters) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3380);  // bf16 ~6e-8
  __m512 acc[kChains512];
  for (int j = 0; j < kChains512; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  for (std::int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kChains512; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  }
  __m512 s = acc[0];
  for (int j = 1; j < kChains512; ++j) s = _mm512_add_ps(s, acc[j]);
  return hsum512(s);
}
constexpr double kFlopsPerIterBf16 = kChains512 * 16 * 4.0;

// AMX: tdpbf16ps C[16x16 f32] += A[16x32 bf16] · B[16x(16·2) bf16 pairs] does
// 2·16·16·32 = 16384 FLOPs. Four accumulator tiles (tmm0..3) in a 2x2 block over two A
// tiles (tmm4, tmm5) and two B tiles (tmm6, tmm7), the standard register blocking, so
// consecutive tdpbf16ps are independent. Operands are loaded once (the loop measures
// the tile unit, not the loads). UNTESTED on the machines this was written on (AMD EPYC,
// no AMX): the path is guarded by cpu_features().amx_bf16, which is true only when the
// CPU has AMX and Linux granted the tile state (arch_prctl, done by qkv's detection).
__attribute__((target("amx-tile,amx-bf16"))) double amx_bf16(std::int64_t iters) {
  // Constant, in read-only memory: the intrinsic declares only 8 bytes of it as read.
  static constexpr qkv::AmxTileConfig kConfig = qkv::amx_uniform_tile_config(16, 64);  // 16 f32 or 32 bf16 per row
  alignas(64) static thread_local std::uint16_t ab[16 * 32];
  alignas(64) static thread_local float c[16 * 16];
  for (auto& x : ab) x = 0x3c00;  // bf16 ~0.0078: bounded sums
  std::fill(std::begin(c), std::end(c), 0.0f);
  // GCC's tile intrinsics are asm statements that take only a pointer: a memory
  // barrier makes sure the stores above are done before the tiles read them.
  __asm__ volatile("" ::: "memory");
  _tile_loadconfig(&kConfig);
  _tile_loadd(0, c, 64);
  _tile_loadd(1, c, 64);
  _tile_loadd(2, c, 64);
  _tile_loadd(3, c, 64);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (std::int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  __asm__ volatile("" ::: "memory");
  double total = c[0];
  _tile_stored(3, c, 64);
  __asm__ volatile("" ::: "memory");
  total += c[255];
  _tile_release();
  return total;
}
constexpr double kFlopsPerIterAmx = 4 * 2.0 * 16 * 16 * 32;

// ---------------------------------------------------------------------------------------
// Memory read: each thread sums its own contiguous slice of a buffer far larger than the
// last-level cache (default 1 GiB against a few tens of MiB). Several independent
// accumulators so that the adds never limit the loads; the slices were first touched by
// the same thread (same static split), so on a multi-socket machine each thread reads its
// own node's memory.

__attribute__((target("avx512f"))) double sum_avx512(const float* p, std::size_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  std::size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
    s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
    s4 = _mm512_add_ps(s4, _mm512_load_ps(p + i + 64));
    s5 = _mm512_add_ps(s5, _mm512_load_ps(p + i + 80));
    s6 = _mm512_add_ps(s6, _mm512_load_ps(p + i + 96));
    s7 = _mm512_add_ps(s7, _mm512_load_ps(p + i + 112));
  }
  double total = hsum512(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)),
                                                    _mm512_add_ps(_mm512_add_ps(s4, s5), _mm512_add_ps(s6, s7))));
  for (; i < n; ++i) total += p[i];
  return total;
}

__attribute__((target("avx2"))) double sum_avx2(const float* p, std::size_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
    s4 = _mm256_add_ps(s4, _mm256_load_ps(p + i + 32));
    s5 = _mm256_add_ps(s5, _mm256_load_ps(p + i + 40));
    s6 = _mm256_add_ps(s6, _mm256_load_ps(p + i + 48));
    s7 = _mm256_add_ps(s7, _mm256_load_ps(p + i + 56));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)),
                                 _mm256_add_ps(_mm256_add_ps(s4, s5), _mm256_add_ps(s6, s7)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  double total = 0;
  for (float x : lanes) total += x;
  for (; i < n; ++i) total += p[i];
  return total;
}

double sum_scalar(const float* p, std::size_t n) {
  float s[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  double total = 0;
  for (float x : s) total += x;
  for (; i < n; ++i) total += p[i];
  return total;
}

// ---------------------------------------------------------------------------------------

struct Options {
  int threads = 0;
  int repeats = 7;
  std::int64_t mem_mib = 1024;
  double seconds = 0.25;  // target length of one compute run (calibrated)
  std::set<std::string> only;  // the ceilings asked for (--only); empty: all of them
  bool wants(const char* ceiling) const { return only.empty() || only.count(ceiling) > 0; }
};

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n % 2 == 1 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// Runs kernel(iters) on every thread at once; returns the wall time in seconds of the
// slowest thread's share (the whole parallel region, after all threads are in).
double time_parallel(int threads, const std::function<double(std::int64_t)>& kernel,
                     std::int64_t iters) {
  double seconds = 0;
  double sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
#pragma omp barrier
    Clock::time_point start;
#pragma omp master
    start = Clock::now();
    sink += kernel(iters);
#pragma omp barrier
#pragma omp master
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  g_sink = g_sink + sink;
  return seconds;
}

// A compute ceiling: calibrate the iteration count so one run takes about o.seconds,
// then o.repeats runs; rate = flops / time in GFLOP/s. Best and median (see the top).
Json compute_ceiling(const Options& o, const std::function<double(std::int64_t)>& kernel,
                     double flops_per_iter, const char* isa, const char* instruction) {
  std::int64_t iters = 1 << 16;
  for (;;) {  // also the warm-up: brings the clock up and the threads in
    const double t = time_parallel(o.threads, kernel, iters);
    if (t >= 0.05 || iters > (std::int64_t{1} << 40)) {
      iters = std::max<std::int64_t>(1, static_cast<std::int64_t>(iters * o.seconds / std::max(t, 1e-9)));
      break;
    }
    iters *= 4;
  }
  std::vector<double> rates;
  for (int r = 0; r < o.repeats; ++r) {
    const double t = time_parallel(o.threads, kernel, iters);
    rates.push_back(flops_per_iter * static_cast<double>(iters) * o.threads / t / 1e9);
  }
  Json j;
  j["isa"] = isa;
  j["instruction"] = instruction;
  j["gflops"] = *std::max_element(rates.begin(), rates.end());
  j["gflops_median"] = median(rates);
  j["gflops_runs"] = rates;
  j["gflops_per_thread"] = j["gflops"].get<double>() / o.threads;
  j["iterations_per_thread"] = iters;
  return j;
}

Json memory_ceiling(const Options& o) {
  const qkv::CpuFeatures& f = qkv::cpu_features();
  double (*sum)(const float*, std::size_t) = f.avx512f ? sum_avx512 : f.avx2 ? sum_avx2 : sum_scalar;
  const char* isa = f.avx512f ? "avx512" : f.avx2 ? "avx2" : "scalar";
  const std::size_t bytes = static_cast<std::size_t>(o.mem_mib) << 20;
  const std::size_t n = bytes / sizeof(float);
  // 2 MiB alignment lets transparent huge pages back the buffer where the kernel allows
  // (fewer TLB misses; what a large tensor allocation gets too).
  float* p = static_cast<float*>(std::aligned_alloc(std::size_t{2} << 20, bytes));
  if (p == nullptr) return Json();
  madvise(p, bytes, MADV_HUGEPAGE);
  const int threads = o.threads;
  // Slice boundaries on 128-float (512-byte) multiples so every slice stays aligned.
  auto slice = [&](int t) {
    const std::size_t blocks = n / 128;
    return std::pair<std::size_t, std::size_t>(blocks * t / threads * 128, blocks * (t + 1) / threads * 128);
  };
#pragma omp parallel num_threads(threads)
  {
    const auto [lo, hi] = slice(omp_get_thread_num());
    for (std::size_t i = lo; i < hi; ++i) p[i] = static_cast<float>(i & 1023) * 1e-3f;
  }
  std::vector<double> rates;
  for (int r = 0; r < o.repeats + 1; ++r) {  // run 0 is a warm-up, dropped
    double seconds = 0, sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const auto [lo, hi] = slice(omp_get_thread_num());
#pragma omp barrier
      Clock::time_point start;
#pragma omp master
      start = Clock::now();
      sink += sum(p + lo, hi - lo);
#pragma omp barrier
#pragma omp master
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
    g_sink = g_sink + sink;
    if (r > 0) rates.push_back(static_cast<double>(n / 128 * 128) * sizeof(float) / seconds / 1e9);
  }
  std::free(p);
  Json j;
  j["isa"] = isa;
  j["buffer_mib"] = o.mem_mib;
  j["gb_per_s"] = *std::max_element(rates.begin(), rates.end());
  j["gb_per_s_median"] = median(rates);
  j["gb_per_s_runs"] = rates;
  return j;
}

[[noreturn]] void usage(const char* message) {
  if (message != nullptr) std::fprintf(stderr, "qkv_ceilings: %s\n", message);
  std::fprintf(message ? stderr : stdout,
               "usage: qkv_ceilings [--threads N] [--repeats R] [--mem-mib M] [--seconds S] [--only LIST]\n"
               "  Measures the f32 FMA peak (widest ISA and AVX2), the AVX512-BF16 and AMX bf16\n"
               "  peaks where present, and the memory read bandwidth; prints JSON.\n"
               "  --threads N   threads (default: qkv::num_threads(), QKV_NUM_THREADS)\n"
               "  --repeats R   timed runs per ceiling, best and median reported (default 7)\n"
               "  --mem-mib M   buffer for the bandwidth run, MiB (default 1024)\n"
               "  --seconds S   length of one compute run (default 0.25)\n"
               "  --only LIST   some of fma,bf16,amx,mem (comma-separated): only those, as a\n"
               "                benchmark samples a ceiling beside its runs (fma: the widest ISA\n"
               "                on --threads only)\n");
  std::exit(message ? 2 : 0);
}

long parse_positive(const char* flag, const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1) {
    const std::string m = std::string(flag) + " must be a positive integer, got '" + text + "'";
    usage(m.c_str());
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") usage(nullptr);
    if (i + 1 >= argc) usage(("missing value for " + arg).c_str());
    if (arg == "--threads") {
      o.threads = static_cast<int>(parse_positive("--threads", argv[++i]));
    } else if (arg == "--repeats") {
      o.repeats = static_cast<int>(parse_positive("--repeats", argv[++i]));
    } else if (arg == "--mem-mib") {
      o.mem_mib = parse_positive("--mem-mib", argv[++i]);
    } else if (arg == "--seconds") {
      o.seconds = std::atof(argv[++i]);
      if (!(o.seconds > 0)) usage("--seconds must be positive");
    } else if (arg == "--only") {
      const std::string list = argv[++i];
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        const std::string name = list.substr(at, comma - at);
        if (name != "fma" && name != "bf16" && name != "amx" && name != "mem")
          usage(("--only takes fma, bf16, amx, mem; got '" + name + "'").c_str());
        o.only.insert(name);
        at = comma + 1;
      }
    } else {
      usage(("unknown option " + arg).c_str());
    }
  }
  try {
    if (o.threads == 0) o.threads = qkv::num_threads();
  } catch (const std::exception& e) {
    usage(e.what());
  }

  const qkv::CpuFeatures& f = qkv::cpu_features();
  Json out;
  out["qkv_version"] = qkv::kVersion;
  out["cpu"] = qkv::cpu_summary();
  out["threads"] = o.threads;
  out["repeats"] = o.repeats;
  out["statistic"] = "best of repeats (median beside it)";

  std::optional<Json> avx512, avx2;
  if (f.avx512f && o.wants("fma"))
    avx512 = compute_ceiling(o, fma_avx512, kFlopsPerIter512, "avx512", "vfmadd (zmm), 16 chains");
  if (f.avx2 && f.fma && (o.only.empty() || (!f.avx512f && o.wants("fma"))))
    avx2 = compute_ceiling(o, fma_avx2, kFlopsPerIter256, "avx2", "vfmadd (ymm), 12 chains");
  out["f32_fma_avx512"] = avx512 ? *avx512 : Json();
  if (!avx512) out["f32_fma_avx512_reason"] = !f.avx512f ? "CPU or OS lacks AVX-512F" : "not asked for (--only)";
  out["f32_fma_avx2"] = avx2 ? *avx2 : Json();
  if (!avx2) out["f32_fma_avx2_reason"] = !(f.avx2 && f.fma) ? "CPU or OS lacks AVX2+FMA" : "not asked for (--only)";
  // The f32 peak: the widest ISA the CPU runs (what the fast kernel dispatches to).
  out["f32_fma"] = avx512 ? *avx512 : avx2 ? *avx2 : Json();
  if (!avx512 && !avx2)
    out["f32_fma_reason"] = o.wants("fma") ? "no AVX2+FMA: no vector FMA peak measured" : "not asked for (--only)";
  // The same loop on one thread: says whether the threads really add FMA units (on a VM
  // two vCPUs may be SMT siblings of one core and share them).
  if (o.threads > 1 && (avx512 || avx2) && o.only.empty()) {
    Options one = o;
    one.threads = 1;
    out["f32_fma_1_thread"] = avx512 ? compute_ceiling(one, fma_avx512, kFlopsPerIter512, "avx512", "vfmadd (zmm), 16 chains")
                                     : compute_ceiling(one, fma_avx2, kFlopsPerIter256, "avx2", "vfmadd (ymm), 12 chains");
  } else {
    out["f32_fma_1_thread"] = out["f32_fma"];
  }

  if (!o.wants("bf16")) {
    out["bf16_avx512_dpbf16ps"] = Json();
    out["bf16_avx512_dpbf16ps_reason"] = "not asked for (--only)";
  } else if (f.avx512_bf16 && f.avx512f) {
    out["bf16_avx512_dpbf16ps"] = compute_ceiling(o, dpbf16_avx512, kFlopsPerIterBf16, "avx512_bf16",
                                                  "vdpbf16ps (zmm), 16 chains, 4 FLOPs per f32 lane");
  } else {
    out["bf16_avx512_dpbf16ps"] = Json();
    out["bf16_avx512_dpbf16ps_reason"] = "CPU or OS lacks AVX512-BF16";
  }
  if (!o.wants("amx")) {
    out["bf16_amx"] = Json();
    out["bf16_amx_reason"] = "not asked for (--only)";
  } else if (f.amx_bf16) {
    out["bf16_amx"] = compute_ceiling(o, amx_bf16, kFlopsPerIterAmx, "amx_bf16",
                                      "tdpbf16ps, 2x2 blocked 16x16 f32 tiles");
    out["bf16_amx"]["note"] = "path written without AMX hardware to test it on";
  } else {
    out["bf16_amx"] = Json();
    out["bf16_amx_reason"] = f.amx_tile ? "CPU has AMX tiles but not AMX-BF16"
                                        : "CPU has no AMX (or Linux did not grant the AMX tile state)";
  }
  Json mem = o.wants("mem") ? memory_ceiling(o) : Json();
  out["mem_read"] = mem;
  if (mem.is_null()) out["mem_read_reason"] = o.wants("mem") ? "could not allocate the buffer" : "not asked for (--only)";
  out["checksum"] = static_cast<double>(g_sink);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
