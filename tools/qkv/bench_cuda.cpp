// qkv bench --device cuda — times qkv::cuda::attention_forward on device memory.
//
// Random N(0, 1) inputs made on the host and copied once; CUDA events around each run,
// warm-up runs discarded, the median reported (the minimum beside it); FLOPs counted as
// bench.cpp counts them. Built only with the CUDA backend (QKV_HAS_CUDA); without it the
// option is a usage error saying why.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "commands.h"
#include "print.h"
#include "qkv/qkv.h"
#include "qkv/cuda.h"

#ifdef QKV_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace qkv::cli {

#ifdef QKV_HAS_CUDA
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw qkv::Error(std::string("cuda: ") + what + ": " + cudaGetErrorString(status));
}

// cudaMalloc'd memory freed on scope exit.
struct DeviceMemory {
  void* p = nullptr;
  explicit DeviceMemory(std::size_t bytes) { check(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~DeviceMemory() { cudaFree(p); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

// A device copy of a host tensor of `shape` with N(0, 1) entries in `dtype`.
void fill_random(DeviceMemory& dst, const qkv::Shape& shape, qkv::DType dtype, qkv::Rng& rng) {
  qkv::Tensor t = qkv::Tensor::empty(shape, dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) qkv::store_from_f32(t.data(), i, dtype, static_cast<float>(rng.normal()));
  check(cudaMemcpy(dst.p, t.data(), t.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
}

}  // namespace

int run_bench_cuda(const BenchOptions& o, std::ostream& out) {
  if (!qkv::cuda::available()) throw UsageError("--device", "cuda: " + qkv::cuda::unavailable_reason());
  if (o.dtype != "bf16" && o.dtype != "f16") {
    throw UsageError("--dtype", "must be bf16 or f16 with --device cuda, got " + o.dtype);
  }
  const std::int64_t B = o.batch, Hq = o.heads, Lq = o.seq, D = o.dim;
  const std::int64_t Hkv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  const std::int64_t Lk = o.kv_seq > 0 ? o.kv_seq : o.seq;
  if (o.dim_v > 0 && o.dim_v != D) throw UsageError("--dim-v", "must equal --dim with --device cuda");
  if (Hq % Hkv != 0) throw UsageError("--kv-heads", "must divide --heads");
  const qkv::DType dtype = qkv::parse_dtype(o.dtype);
  const std::size_t e = qkv::dtype_size(dtype);
  DeviceMemory q(B * Hq * Lq * D * e), k(B * Hkv * Lk * D * e), v(B * Hkv * Lk * D * e), o_(B * Hq * Lq * D * e);
  qkv::Rng rng(o.seed);
  fill_random(q, {B, Hq, Lq, D}, dtype, rng);   // (B, Hq, Lq, D)
  fill_random(k, {B, Hkv, Lk, D}, dtype, rng);  // (B, Hkv, Lk, D)
  fill_random(v, {B, Hkv, Lk, D}, dtype, rng);  // (B, Hkv, Lk, D)

  qkv::cuda::DeviceAttention a;
  a.dtype = dtype == qkv::DType::bf16 ? qkv::cuda::ElementType::bf16 : qkv::cuda::ElementType::f16;
  a.q = q.p, a.k = k.p, a.v = v.p, a.out = o_.p;
  a.q_strides = a.out_strides = {Hq * Lq * D, Lq * D, D};
  a.k_strides = a.v_strides = {Hkv * Lk * D, Lk * D, D};
  a.B = B, a.Hq = Hq, a.Hkv = Hkv, a.Lq = Lq, a.Lk = Lk, a.D = D;
  a.scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.causal = o.causal;

  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < o.warmup; ++i) qkv::cuda::attention_forward(a);
  std::vector<double> ms;
  for (int i = 0; i < o.repeats; ++i) {
    check(cudaEventRecord(start), "cudaEventRecord");
    qkv::cuda::attention_forward(a);
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double median = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  double flops = 4.0 * static_cast<double>(B) * Hq * static_cast<double>(Lq) * Lk * D;
  if (o.causal && Lq == Lk) flops *= 0.5;
  out << format("sdpa forward  B=%lld Hq=%lld Hkv=%lld Lq=%lld Lk=%lld D=%lld%s\n", static_cast<long long>(B),
                static_cast<long long>(Hq), static_cast<long long>(Hkv), static_cast<long long>(Lq),
                static_cast<long long>(Lk), static_cast<long long>(D), o.causal ? " causal" : "");
  out << format("  device cuda (%s)  dtype %s  median %.4f ms  min %.4f ms  %.1f TFLOP/s  (%d runs after %d warm-up)\n",
                qkv::cuda::device_name().c_str(), o.dtype.c_str(), median, sorted.front(),
                median > 0 ? flops / (median * 1e9) : 0.0, o.repeats, o.warmup);
  return 0;
}

#else

int run_bench_cuda(const BenchOptions&, std::ostream&) {
  throw UsageError("--device", "cuda: " + qkv::cuda::unavailable_reason());
}

#endif

}  // namespace qkv::cli
