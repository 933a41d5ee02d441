// qkv bench --ring — times ring attention (qkv::distributed) across the ranks of mpirun:
//   mpirun -np 4 qkv bench --ring --batch 1 --heads 8 --seq 4096 --dim 64 --causal
// Every rank makes the same full q, k and v from the seed and keeps its zigzag shard; each
// timed run starts after a barrier and lasts as long as its slowest rank (MPI max of the
// ranks' wall times). Per rank, the median over the runs of its compute time (local kernels
// and merges) and its communication time (waiting for messages, the argument check
// included). Then rank 0 runs the same problem in one process (qkv::attention, and
// attention_backward with --backward) and reports the largest absolute difference from the
// gathered ring results. Only rank 0 prints. One thread per rank unless --threads says
// otherwise (the ranks share the machine's cores).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "print.h"
#include "qkv/distributed.h"
#include "qkv/qkv.h"

namespace qkv::cli {
namespace {

double median_of(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n % 2 == 1 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double max_abs_diff(const qkv::Tensor& a, const qkv::Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i]) continue;  // equal infinities (a fully masked row's lse) too
    const double d = std::abs(static_cast<double>(x[i]) - static_cast<double>(y[i]));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

// Uniform in [−√3, √3) (unit variance), the same on every rank for one seed.
qkv::Tensor random_tensor(const qkv::Shape& shape, qkv::DType dtype, qkv::Rng& rng) {
  qkv::Tensor t = qkv::Tensor::empty(shape, DType::f32);
  float* p = t.data_as<float>();
  const double width = 2.0 * std::sqrt(3.0);
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>((rng.uniform() - 0.5) * width);
  return dtype == DType::f32 ? t : t.to(dtype);
}

}  // namespace

int run_bench_ring(const BenchOptions& o, std::ostream& out) {
  if (o.device != "cpu") throw UsageError("--ring", "runs on the CPU only (--device cpu)");
  if (o.kv_seq > 0 && o.kv_seq != o.seq)
    throw UsageError("--kv-seq", "ring attention needs Lk = Lq (one sequence split across the ranks)");
  if (!qkv::distributed::available())
    throw qkv::Error("qkv bench --ring: qkv was built without MPI (configure with -DQKV_MPI=ON and an MPI "
                     "installed, e.g. Debian's libopenmpi-dev)");
  const std::int64_t B = o.batch, Hq = o.heads, L = o.seq, Dk = o.dim;
  const std::int64_t Hkv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  const std::int64_t Dv = o.dim_v > 0 ? o.dim_v : o.dim;
  if (Hq % Hkv != 0)
    throw UsageError("--kv-heads", format("must divide --heads = %lld, got %lld", static_cast<long long>(Hq),
                                          static_cast<long long>(Hkv)));
  const qkv::DType dtype = qkv::parse_dtype(o.dtype);

  qkv::distributed::Session session;
  const qkv::distributed::Communicator comm = qkv::distributed::Communicator::world();
  const int N = comm.size(), r = comm.rank();
  if (L % (2 * N) != 0)
    throw UsageError("--seq", format("must be divisible by 2 x ranks = %d (the zigzag layout's chunks), got %lld",
                                     2 * N, static_cast<long long>(L)));
  try {
    qkv::set_num_threads(o.threads > 0 ? o.threads : 1);
  } catch (const qkv::Error& e) {
    throw UsageError("--threads", e.what());
  }

  qkv::AttentionOptions options;
  options.causal = o.causal;
  options.impl = o.impl == "reference" ? qkv::AttentionImpl::reference
                 : o.impl == "fast"    ? qkv::AttentionImpl::fast
                                       : qkv::AttentionImpl::automatic;

  // The whole problem on every rank, each keeping its zigzag shard (so rank 0 can compare
  // with one process); with --no-check only this rank's shards, drawn from a seed of its own.
  qkv::Rng rng(o.no_check ? o.seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(r + 1) : o.seed);
  const std::int64_t Lr = o.no_check ? L / N : L;
  const qkv::Tensor q = random_tensor({B, Hq, Lr, Dk}, dtype, rng);      // (B, Hq, L or L/N, Dk)
  const qkv::Tensor k = random_tensor({B, Hkv, Lr, Dk}, dtype, rng);     // (B, Hkv, L or L/N, Dk)
  const qkv::Tensor v = random_tensor({B, Hkv, Lr, Dv}, dtype, rng);     // (B, Hkv, L or L/N, Dv)
  const qkv::Tensor dout = random_tensor({B, Hq, Lr, Dv}, dtype, rng);   // (B, Hq, L or L/N, Dv)
  const qkv::Tensor qs = o.no_check ? q : qkv::distributed::shard_sequence(q, r, N);  // (B, Hq, L/N, Dk)
  const qkv::Tensor ks = o.no_check ? k : qkv::distributed::shard_sequence(k, r, N);
  const qkv::Tensor vs = o.no_check ? v : qkv::distributed::shard_sequence(v, r, N);
  const qkv::Tensor douts = o.no_check ? dout : qkv::distributed::shard_sequence(dout, r, N);

  qkv::distributed::RingAttentionResult fwd;
  qkv::distributed::RingAttentionGradients grads;
  std::vector<double> ms, compute, comm_ms, wait_ms;
  for (int run = 0; run < o.warmup + o.repeats; ++run) {
    comm.barrier();
    fwd = qkv::distributed::ring_attention(qs, ks, vs, options, comm);
    qkv::distributed::RingTimings t = fwd.timings;
    if (o.backward) {
      grads = qkv::distributed::ring_attention_backward(douts, qs, ks, vs, fwd.out, fwd.lse, options, comm);
      t.compute_ms += grads.timings.compute_ms;
      t.comm_ms += grads.timings.comm_ms;
      t.wait_ms += grads.timings.wait_ms;
      t.total_ms += grads.timings.total_ms;
    }
    const double slowest = comm.max(t.total_ms);
    if (run < o.warmup) continue;
    ms.push_back(slowest);
    compute.push_back(t.compute_ms);
    comm_ms.push_back(t.comm_ms);
    wait_ms.push_back(t.wait_ms);
  }
  const std::vector<double> compute_ranks = comm.all_gather(median_of(compute));
  const std::vector<double> comm_ranks = comm.all_gather(median_of(comm_ms));
  const std::vector<double> wait_ranks = comm.all_gather(median_of(wait_ms));
  const std::vector<double> peak_mib = comm.all_gather(peak_resident_mib());
  // The same step's transfer with nothing to hide it behind: the slowest rank's, median of 3.
  std::vector<double> exchange;
  for (int i = 0; i < 3; ++i) exchange.push_back(comm.max(qkv::distributed::ring_exchange_ms(ks, vs, comm)));
  const double transfer_ms = median_of(exchange);

  // The single-process run of the same problem, on rank 0, against the gathered shards
  // (the gathers are collective; then only rank 0 goes on).
  double diff_out = 0, diff_dq = 0, diff_dk = 0, diff_dv = 0;
  if (!o.no_check) {
    const qkv::Tensor ring_out = qkv::distributed::gather_sequence(fwd.out, comm);
    qkv::Tensor ring_dq, ring_dk, ring_dv;
    if (o.backward) {
      ring_dq = qkv::distributed::gather_sequence(grads.dq, comm);
      ring_dk = qkv::distributed::gather_sequence(grads.dk, comm);
      ring_dv = qkv::distributed::gather_sequence(grads.dv, comm);
    }
    if (r == 0) {
      qkv::AttentionOptions single = options;
      single.return_lse = true;
      const qkv::AttentionResult want = qkv::attention(q, k, v, single);
      diff_out = max_abs_diff(ring_out, want.out);
      if (o.backward) {
        const qkv::AttentionGradients g = qkv::attention_backward(dout, q, k, v, want.out, want.lse, single);
        diff_dq = max_abs_diff(ring_dq, g.dq);
        diff_dk = max_abs_diff(ring_dk, g.dk);
        diff_dv = max_abs_diff(ring_dv, g.dv);
      }
    }
  }
  if (r != 0) return 0;
  const double diff = std::max({diff_out, diff_dq, diff_dk, diff_dv});
  const double ms_median = median_of(ms), ms_min = *std::min_element(ms.begin(), ms.end());
  const auto [compute_lo, compute_hi] = std::minmax_element(compute_ranks.begin(), compute_ranks.end());
  const auto [comm_lo, comm_hi] = std::minmax_element(comm_ranks.begin(), comm_ranks.end());

  if (o.json) {
    nlohmann::json j;
    j["version"] = qkv::kVersion;
    j["op"] = o.backward ? "ring_attention+backward" : "ring_attention";
    j["ranks"] = N;
    j["impl"] = o.impl;
    j["isa"] = o.impl == "reference" ? "none" : qkv::fast_kernel_isa();
    j["dtype"] = qkv::dtype_name(dtype);
    j["threads_per_rank"] = qkv::num_threads();
    j["batch"] = B;
    j["heads"] = Hq;
    j["kv_heads"] = Hkv;
    j["seq"] = L;
    j["dim"] = Dk;
    j["dim_v"] = Dv;
    j["causal"] = o.causal;
    j["backward"] = o.backward;
    j["warmup"] = o.warmup;
    j["repeats"] = o.repeats;
    j["seed"] = o.seed;
    j["ms"] = ms_median;
    j["ms_min"] = ms_min;
    j["ms_all"] = ms;
    j["compute_ms"] = compute_ranks;
    j["comm_ms"] = comm_ranks;
    j["compute_ms_max"] = *compute_hi;
    j["compute_ms_min"] = *compute_lo;
    j["comm_ms_max"] = *comm_hi;
    j["comm_ms_min"] = *comm_lo;
    j["peak_rss_mib"] = peak_mib;  // each rank's peak resident set
    // One step's K/V transfer alone (not overlapped), and the N − 1 a forward makes
    // (forward + backward: twice that, plus the dK/dV ring's): what the overlap must hide.
    j["transfer_ms_per_step"] = transfer_ms;
    j["wait_ms"] = wait_ranks;  // per rank, of comm_ms: the transfers the kernels did not hide
    j["checked"] = !o.no_check;
    if (o.no_check) {
      j["max_abs_diff"] = nullptr;
    } else {
      j["max_abs_diff"] = diff;
      j["max_abs_diff_out"] = diff_out;
      if (o.backward) {
        j["max_abs_diff_dq"] = diff_dq;
        j["max_abs_diff_dk"] = diff_dk;
        j["max_abs_diff_dv"] = diff_dv;
      }
    }
    out << j.dump() << '\n';
    return 0;
  }
  out << format("ring attention %s  ranks %d  B=%lld Hq=%lld Hkv=%lld L=%lld Dk=%lld Dv=%lld%s\n",
                o.backward ? "forward+backward" : "forward", N, static_cast<long long>(B),
                static_cast<long long>(Hq), static_cast<long long>(Hkv), static_cast<long long>(L),
                static_cast<long long>(Dk), static_cast<long long>(Dv), o.causal ? " causal" : "");
  out << format("  dtype %s  threads per rank %d  median %.4g ms  min %.4g ms  (%d runs after %d warm-up)\n",
                qkv::dtype_name(dtype), qkv::num_threads(), ms_median, ms_min, o.repeats, o.warmup);
  for (int i = 0; i < N; ++i)
    out << format("  rank %d: compute %.4g ms  communication %.4g ms (waiting for transfers %.4g)  peak memory %.1f MiB\n",
                  i, compute_ranks[static_cast<std::size_t>(i)], comm_ranks[static_cast<std::size_t>(i)],
                  wait_ranks[static_cast<std::size_t>(i)], peak_mib[static_cast<std::size_t>(i)]);
  out << format("  one step's K/V transfer alone (not overlapped): %.4g ms; a forward makes %d\n", transfer_ms, N - 1);
  if (o.no_check) {
    out << "  (--no-check: not compared with one process)\n";
    return 0;
  }
  out << format("  largest |ring - single process|: out %.3g", diff_out);
  if (o.backward) out << format("  dq %.3g  dk %.3g  dv %.3g", diff_dq, diff_dk, diff_dv);
  out << "\n";
  return 0;
}

}  // namespace qkv::cli
