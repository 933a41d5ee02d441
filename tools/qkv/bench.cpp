// qkv bench — times the forward pass of qkv::scaled_dot_product_attention (with
// --backward: qkv::attention with its log-sum-exp, then qkv::attention_backward).
//
// Random inputs (seeded), warm-up runs discarded, the median of the timed runs
// reported (the minimum beside it), in ms and GFLOP/s. FLOPs count the two matrix
// products, as FlashAttention's and PyTorch's benchmarks do:
//   2·B·Hq·Lq·Lk·Dk (q·kᵀ) + 2·B·Hq·Lq·Lk·Dv (p·v),
// halved for a causal problem with Lq == Lk (half the score matrix is masked; the
// exact fraction is (L+1)/2L, which the convention rounds to 1/2); times 3.5 with
// --backward (the backward counted as 2.5 forwards, as FlashAttention-2's benchmarks do).
//
// --json also reports memory, in MiB (2^20 bytes): baseline_rss_mib, the resident set
// right before the inputs are allocated (/proc/self/statm); peak_rss_mib, the process's
// peak resident set at the end (VmHWM in /proc/self/status; getrusage's ru_maxrss only
// where /proc is missing, see peak_resident_mib); io_mib, the bytes of q, k, v and the
// output. peak - baseline - io is what the computation needed beyond its inputs and
// output (workspace, thread stacks, allocator slack).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numbers>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "print.h"
#include "qkv/qkv.h"

namespace qkv::cli {
namespace {

// A tensor of `shape` with entries uniform in [−√3, √3) (mean 0, variance 1, as N(0, 1);
// the kernels' speed does not depend on the distribution), rounded to `dtype`. Filled in
// blocks of 2^16 elements, each from its own generator seeded by (`rng`'s next draw,
// block), in parallel, so the values do not depend on the thread count: Box–Muller normals
// from one generator took 13 s of the 15 s that bench ran for a head dimension of 2^27.
qkv::Tensor random_tensor(const qkv::Shape& shape, qkv::DType dtype, qkv::Rng& rng) {
  qkv::Tensor t = qkv::Tensor::empty(shape, dtype);
  const std::int64_t n = t.numel();
  constexpr std::int64_t kBlock = std::int64_t{1} << 16;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  const std::uint64_t seed = rng.next_u64();
  const double width = 2.0 * std::numbers::sqrt3;
  void* data = t.data();
#pragma omp parallel for schedule(static) num_threads(qkv::num_threads())
  for (std::int64_t block = 0; block < blocks; ++block) {
    qkv::Rng block_rng(qkv::mix64(seed ^ static_cast<std::uint64_t>(block)));
    const std::int64_t end = std::min(n, (block + 1) * kBlock);
    for (std::int64_t i = block * kBlock; i < end; ++i) {
      const auto x = static_cast<float>((block_rng.uniform() - 0.5) * width);
      qkv::store_from_f32(data, i, dtype, x);
    }
  }
  return t;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n % 2 == 1 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// The resident set now, in MiB (second field of /proc/self/statm, in pages); 0 where
// /proc is not there.
double resident_mib() {
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return 0.0;
  unsigned long long size = 0, resident = 0;
  const int fields = std::fscanf(file, "%llu %llu", &size, &resident);
  std::fclose(file);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (fields != 2 || page_size <= 0) return 0.0;
  return static_cast<double>(resident) * static_cast<double>(page_size) / 0x1p20;
}

// `digits` significant digits, never in exponent form: 208.0, 12.35, 0.003400.
std::string significant(double x, int digits) {
  const int magnitude = x > 0 ? static_cast<int>(std::floor(std::log10(x))) : 0;
  return format("%.*f", std::max(0, digits - 1 - magnitude), x);
}

}  // namespace

// The peak resident set of this program so far, in MiB: VmHWM from /proc/self/status
// (kB), the high-water mark of this process image. Not getrusage's ru_maxrss first:
// Linux carries ru_maxrss over exec, so a qkv started from a large process (a Python
// benchmark holding torch and its arrays, through fork or vfork + exec) would report
// that parent's resident set as its own peak. ru_maxrss (KiB) is the fallback where
// /proc is missing.
double peak_resident_mib() {
  if (std::FILE* file = std::fopen("/proc/self/status", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, file) != nullptr) {
      found = std::sscanf(line, "VmHWM: %llu kB", &kib) == 1;
    }
    std::fclose(file);
    if (found) return static_cast<double>(kib) / 1024.0;
  }
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

int run_bench(const BenchOptions& o, std::ostream& out) {
  const std::int64_t B = o.batch, Hq = o.heads, Lq = o.seq, Dk = o.dim;
  const std::int64_t Hkv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  const std::int64_t Lk = o.kv_seq > 0 ? o.kv_seq : o.seq;
  const std::int64_t Dv = o.dim_v > 0 ? o.dim_v : o.dim;

  // Usage errors first, before anything is allocated.
  if (Hq % Hkv != 0) {
    throw UsageError("--kv-heads", format("must divide --heads = %lld, got %lld",
                                          static_cast<long long>(Hq), static_cast<long long>(Hkv)));
  }
  const qkv::DType dtype = qkv::parse_dtype(o.dtype);  // validated by CLI11 already
  // In double, every operand converted first, so that absurd sizes cannot overflow before
  // they are refused (Dk + Dv in int64 would, for --dim-v 2^63 - 1).
  const auto d = [](std::int64_t x) { return static_cast<double>(x); };
  const double elements =
      d(B) * (d(Hq) * d(Lq) * d(Dk) + d(Hkv) * d(Lk) * (d(Dk) + d(Dv)) + d(Hq) * d(Lq) * d(Dv));
  const double bytes = elements * static_cast<double>(qkv::dtype_size(dtype));
  // The library's memory limit (qkv/memory.h): each call checks its own output and scratch
  // against it; the inputs made here are checked the same way first.
  const double max_bytes = static_cast<double>(qkv::memory_limit());
  if (bytes > max_bytes) {
    throw UsageError("--batch/--heads/--kv-heads/--seq/--kv-seq/--dim/--dim-v",
                     format("q, k, v and the output would need %.3g GiB, more than the memory limit "
                            "of %.3g GiB (QKV_MEMORY_LIMIT; default 80%% of the least of physical "
                            "memory, the cgroup's limit and ulimit -v); choose smaller sizes",
                            bytes / 0x1p30, max_bytes / 0x1p30));
  }

  qkv::AttentionOptions options;
  options.causal = o.causal;
  if (o.impl == "reference") {
    options.impl = qkv::AttentionImpl::reference;
  } else if (o.impl == "fast") {
    options.impl = qkv::AttentionImpl::fast;
  } else {
    options.impl = qkv::AttentionImpl::automatic;  // "auto", the only other choice CLI11 lets in
  }
  if (o.threads > 0) {
    try {
      qkv::set_num_threads(o.threads);
    } catch (const qkv::Error& e) {  // beyond the library's limit: the option was wrong
      throw UsageError("--threads", e.what());
    }
  }
  const int threads = qkv::num_threads();

  const double baseline_rss_mib = resident_mib();
  qkv::Rng rng(o.seed);
  const qkv::Tensor q = random_tensor({B, Hq, Lq, Dk}, dtype, rng);   // (B, Hq, Lq, Dk)
  const qkv::Tensor k = random_tensor({B, Hkv, Lk, Dk}, dtype, rng);  // (B, Hkv, Lk, Dk)
  const qkv::Tensor v = random_tensor({B, Hkv, Lk, Dv}, dtype, rng);  // (B, Hkv, Lk, Dv)
  qkv::validate_attention(q, k, v, options);

  // --backward: the forward with its log-sum-exp, then attention_backward of a random dout.
  const qkv::Tensor dout = o.backward ? random_tensor({B, Hq, Lq, Dv}, dtype, rng) : qkv::Tensor();  // (B, Hq, Lq, Dv)
  const auto call = [&] {
    if (!o.backward) return (void)qkv::scaled_dot_product_attention(q, k, v, options);
    qkv::AttentionOptions with_lse = options;
    with_lse.return_lse = true;
    const qkv::AttentionResult f = qkv::attention(q, k, v, with_lse);
    (void)qkv::attention_backward(dout, q, k, v, f.out, f.lse, with_lse);
  };
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < o.warmup; ++i) call();
  std::vector<double> ms;
  for (int i = 0; i < o.repeats; ++i) {
    const auto start = clock::now();
    call();
    const auto stop = clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
  }
  const double peak_rss_mib = peak_resident_mib();
  const double ms_median = median(ms);
  const double ms_min = *std::min_element(ms.begin(), ms.end());

  const double pairs = static_cast<double>(B) * static_cast<double>(Hq) * static_cast<double>(Lq) *
                       static_cast<double>(Lk);
  double flops = 2.0 * pairs * static_cast<double>(Dk) + 2.0 * pairs * static_cast<double>(Dv);
  if (o.causal && Lq == Lk) flops *= 0.5;
  // The backward as FlashAttention-2's benchmarks count it: 2.5 forwards (five products
  // of the forward's size: S again, dV, dP, dQ, dK).
  if (o.backward) flops *= 3.5;
  // ms is never exactly 0 on a steady clock with ns ticks for a real call, but a tiny
  // problem may take less than one tick: report 0 GFLOP/s rather than infinity.
  const double gflops = ms_median > 0 ? flops / (ms_median * 1e6) : 0.0;

  if (o.json) {
    nlohmann::json j;
    j["version"] = qkv::kVersion;
    j["op"] = o.backward ? "attention+backward" : "scaled_dot_product_attention";
    j["impl"] = o.impl;
    j["isa"] = o.impl == "reference" ? "none" : qkv::fast_kernel_isa();
    j["dtype"] = qkv::dtype_name(dtype);
    j["threads"] = threads;
    j["batch"] = B;
    j["heads"] = Hq;
    j["kv_heads"] = Hkv;
    j["seq_q"] = Lq;
    j["seq_k"] = Lk;
    j["dim"] = Dk;
    j["dim_v"] = Dv;
    j["causal"] = o.causal;
    j["warmup"] = o.warmup;
    j["repeats"] = o.repeats;
    j["seed"] = o.seed;
    j["flops"] = flops;
    j["ms"] = ms_median;
    j["ms_min"] = ms_min;
    j["ms_all"] = ms;
    j["gflops"] = gflops;
    j["baseline_rss_mib"] = baseline_rss_mib;
    j["peak_rss_mib"] = peak_rss_mib;
    j["io_mib"] = bytes / 0x1p20;
    out << j.dump() << '\n';
    return 0;
  }
  out << (o.backward ? "sdpa forward+backward" : "sdpa forward");
  out << format("  B=%lld Hq=%lld Hkv=%lld Lq=%lld Lk=%lld Dk=%lld Dv=%lld%s\n",
                static_cast<long long>(B), static_cast<long long>(Hq), static_cast<long long>(Hkv),
                static_cast<long long>(Lq), static_cast<long long>(Lk), static_cast<long long>(Dk),
                static_cast<long long>(Dv), o.causal ? " causal" : "");
  out << format(
      "  impl %s%s  dtype %s  threads %d  median %s ms  min %s ms  %s GFLOP/s"
      "  (%d runs after %d warm-up)\n",
      o.impl.c_str(), o.impl == "reference" ? "" : (std::string(" (") + qkv::fast_kernel_isa() + ")").c_str(),
      qkv::dtype_name(dtype), threads, significant(ms_median, 4).c_str(),
      significant(ms_min, 4).c_str(), significant(gflops, 3).c_str(), o.repeats, o.warmup);
  return 0;
}

}  // namespace qkv::cli
