// qkv::distributed — attention over a sequence split across processes (MPI).
//
// Ring attention: each of N ranks holds a shard of the sequence of q, k and v; the K/V
// shards travel around the ring of ranks (non-blocking sends and receives, overlapped with
// the local fused kernel) and every rank merges its partial outputs with the log-sum-exp
// the kernel returns. The result equals single-process qkv::attention on the whole
// sequence within float rounding, and is identical from run to run (every sum is taken in
// a fixed order, whatever the timing of the messages).
//
// Sequence layout ("zigzag"): with N ranks the sequence of length L is cut into 2N chunks
// of C = L / (2N) tokens, and rank r holds chunks r and 2N − 1 − r, in that order. Every
// rank then has the same work under a causal mask (an early chunk and a late one), and the
// same layout serves non-causal attention too, so one layout is used for every option.
// L must be divisible by 2N (qkv::Error otherwise). shard_sequence() cuts a full tensor
// this way; gather_sequence() puts the shards back together.
//
// Built without MPI (CMake QKV_MPI=OFF, or AUTO without MPI found), this API is still
// declared: available() returns false and everything that needs MPI throws qkv::Error
// saying so. shard_sequence() and unshard_sequence() need no MPI and always work.
//
// No MPI header is included here: Communicator is an opaque handle. Programs that include
// <mpi.h> before this header may wrap their own MPI_Comm with Communicator(MPI_Comm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/nn/layers.h"
#include "qkv/tensor.h"

namespace qkv::distributed {

// True when qkv was built with MPI.
bool available() noexcept;

// Initializes MPI if no one has (MPI_Init_thread, MPI_THREAD_FUNNELED: only the thread
// that made the Session calls MPI) and finalizes it on destruction if it initialized it.
// One per process, alive around every use of a Communicator.
class Session {
 public:
  Session();  // throws qkv::Error without MPI
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  bool initialized_here_ = false;
};

// A group of ranks (an MPI communicator, duplicated so qkv's messages never mix with the
// caller's). Cheap to copy (shared).
class Communicator {
 public:
  // MPI_COMM_WORLD (duplicated). MPI must be initialized (a Session, or the caller's
  // MPI_Init); throws qkv::Error otherwise or without MPI.
  static Communicator world();
#if defined(MPI_VERSION)
  // The caller's communicator (duplicated).
  explicit Communicator(MPI_Comm comm) : Communicator(&comm, sizeof(MPI_Comm)) {}
#endif

  int rank() const;
  int size() const;
  void barrier() const;
  // The largest of `value` over the ranks (MPI_Allreduce MAX), on every rank.
  double max(double value) const;
  double min(double value) const;
  // Every rank's `value`, in rank order (MPI_Allgather), on every rank.
  std::vector<double> all_gather(double value) const;
  // The sum of `value` over the ranks (MPI_Allreduce SUM), on every rank.
  double sum(double value) const;
  // Ends every process of the job (MPI_Abort with `code`): for an error on one rank while
  // the others may be waiting for it in a collective, which would otherwise never return.
  [[noreturn]] void abort(int code) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  Communicator(const void* mpi_comm, std::size_t size_of_comm);
  explicit Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

// Wall-clock time of one ring_attention or ring_attention_backward call on this rank.
struct RingTimings {
  double compute_ms = 0.0;  // in the local attention kernels and the merges
  double comm_ms = 0.0;     // inside MPI calls: the collective argument check, MPI_Testall
                            // between blocks (where shared memory moves the data) and the
                            // waits at the end of each step
  double wait_ms = 0.0;     // of comm_ms: the waits for transfers to finish (the part of the
                            // transfers the kernels did not hide)
  double total_ms = 0.0;    // the whole call
};

struct RingAttentionResult {
  Tensor out;           // (B, Hq, Ls, Dv), dtype of q: this rank's shard of the output
  Tensor lse;           // (B, Hq, Ls) f32: this rank's shard of the log-sum-exp
  RingTimings timings;
};

struct RingAttentionGradients {
  Tensor dq;  // (B, Hq, Ls, Dk) f32
  Tensor dk;  // (B, Hkv, Ls, Dk) f32
  Tensor dv;  // (B, Hkv, Ls, Dv) f32
  RingTimings timings;
};

// Ring attention on this rank's shards (zigzag layout, Ls = L / N tokens each):
//   q: (B, Hq, Ls, Dk)   k: (B, Hkv, Ls, Dk)   v: (B, Hkv, Ls, Dv)
// Collective: every rank of `comm` calls it with the same shapes, dtypes and options.
// Options keep their single-process meaning on the whole sequence of L = N·Ls tokens:
// scale, causal in both alignments, key_lengths (global, B entries in [0, L]), window,
// alibi_slopes, softcap, impl, GQA. Refused with qkv::Error (the same message on every
// rank, before any K/V moves): a mask tensor, dropout, return_probs, Lq ≠ Lk (q's shard
// length differs from k's), f64, and ranks that disagree on any shape, dtype or option —
// the message names what differs and on which ranks. lse is always returned (the backward
// needs it); options.return_lse is ignored.
RingAttentionResult ring_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const AttentionOptions& options, const Communicator& comm);

// Gradients of ring_attention: dout, out and lse are this rank's shards of ∂loss/∂out and of
// what ring_attention returned (the merged forward). dq is accumulated locally while the
// K/V shards go around the ring once more; the partial dk and dv travel with them and are
// back at their owner after N steps. The same refusals as ring_attention.
RingAttentionGradients ring_attention_backward(const Tensor& dout, const Tensor& q,
                                               const Tensor& k, const Tensor& v,
                                               const Tensor& out, const Tensor& lse,
                                               const AttentionOptions& options,
                                               const Communicator& comm);

// One ring step's transfer alone: this rank's k and v sent to the next rank and the previous
// rank's received, started together and waited for at once, with no kernel to hide them
// (after a barrier). Returns this rank's milliseconds: what ring_attention's overlap has to
// hide at each of its N − 1 transfers. Collective.
double ring_exchange_ms(const Tensor& k, const Tensor& v, const Communicator& comm);

// ---- Data-parallel training
//
// Every rank holds the whole model and trains on its share of every batch; the gradients
// are averaged across the ranks before each optimizer step, so every rank takes the same
// step and the weights stay identical. With the same global batch the result equals
// single-process training up to float rounding (the sums are taken in another order).

// Every rank's tensors become rank `root`'s (MPI_Bcast; f32 or any dtype, contiguous):
// the parameters before the first step. Collective; ranks whose lists differ in length or
// sizes all throw the same qkv::Error before anything moves.
void broadcast(const nn::ParameterList& tensors, const Communicator& comm, int root = 0);

// The rows [lo, hi) of a batch of `rows` that rank `rank` of `ranks` trains on: contiguous
// shares, the first rows mod ranks ranks one row more. No MPI needed.
struct RowShare {
  std::int64_t lo = 0, hi = 0;
};
RowShare row_share(std::int64_t rows, int rank, int ranks);

// Collective: returns when every rank passed the same `key` (e.g. its options written out),
// else throws the same qkv::Error on every rank: "<what>: the N ranks were given different
// options (...)".
void check_same_everywhere(const std::string& key, const Communicator& comm, const std::string& what);

// Where a step's gradient reduction spent its time on this rank.
struct ReductionTimings {
  int buckets = 0;              // reductions per step
  int started_early = 0;        // of them, started during the backward (by ready())
  double pack_ms = 0.0;         // copying gradients into and out of the bucket buffers
  double progress_ms = 0.0;     // in MPI_Testall during the backward
  double wait_ms = 0.0;         // in finish(): communication the backward did not hide
};

// A training run's reductions, this rank's totals over its steps.
struct ReductionTotals {
  int ranks = 1;                       // 1: not data-parallel (everything else 0)
  double wait_s = 0.0;                 // waiting for sums after the backward (not hidden)
  double progress_s = 0.0;             // in MPI_Testall during the backward
  double pack_s = 0.0;                 // copying gradients into and out of the buckets
  std::int64_t started_early = 0;      // reductions started during the backward
  std::int64_t total = 0;              // reductions in all
  void add(const ReductionTimings& step) {
    wait_s += step.wait_ms / 1e3;
    progress_s += step.progress_ms / 1e3;
    pack_s += step.pack_ms / 1e3;
    started_early += step.started_early;
    total += step.buckets;
  }
};

// Sums gradients over the ranks in buckets, started while the backward is still running
// (PyTorch DDP's scheme): the gradients (f32, contiguous) are grouped, in reverse order (the
// backward produces the last ones first), into buckets of about bucket_bytes; when every
// gradient of a bucket has been reported ready, it is copied into the bucket's buffer,
// multiplied by this rank's weight, and its MPI_Iallreduce (SUM) started. Buckets start in
// the same order on every rank (a collective's order must agree), each only after the ones
// before it. Open MPI moves the data only inside MPI calls, so every ready() also tests the
// reductions in flight (MPI_Testall); finish() starts whatever is left and waits.
//
//   GradientReducer reducer(grads.parameters(), comm);
//   reducer.begin(my_share);                      // e.g. my counted targets / all ranks'
//   model.forward_backward(batch, grads, 0.0, &reducer.hook());
//   reducer.finish();                             // grads now hold Σ_ranks weight·grad
class GradientReducer {
 public:
  explicit GradientReducer(const nn::ParameterList& grads, const Communicator& comm,
                           std::size_t bucket_bytes = 256 * 1024);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // A new step: nothing is ready; this rank's gradients count `weight` times in the sum.
  void begin(double weight = 1.0);
  // These gradients are final on this rank (nn::GradientsReady). A gradient the reducer was
  // not made with, or one reported twice in a step, is a qkv::Error.
  void ready(const nn::ParameterList& grads);
  // The hook for a backward (forward_backward's `ready`), calling ready().
  const nn::GradientsReady& hook() const { return hook_; }
  // Starts every bucket not yet started (gradients never reported count as ready now),
  // waits for all and writes the sums back into the gradients.
  ReductionTimings finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
  nn::GradientsReady hook_;
};

// Rank `rank`'s zigzag shard of `full` along dimension `dim` (2 for (B, H, L, D) and for
// lse (B, H, L)): chunks rank and 2·ranks − 1 − rank of 2·ranks, as a contiguous copy.
// Throws qkv::Error when the length is not divisible by 2·ranks. No MPI needed.
Tensor shard_sequence(const Tensor& full, int rank, int ranks, std::int64_t dim = 2);
// The inverse: shards[r] is rank r's shard; returns the full tensor (contiguous).
Tensor unshard_sequence(const std::vector<Tensor>& shards, std::int64_t dim = 2);
// Every rank's shard gathered (MPI_Allgather) and put back together, on every rank.
Tensor gather_sequence(const Tensor& shard, const Communicator& comm, std::int64_t dim = 2);

}  // namespace qkv::distributed
