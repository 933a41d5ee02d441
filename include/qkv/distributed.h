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
#include <vector>

#include "qkv/attention.h"
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

// Rank `rank`'s zigzag shard of `full` along dimension `dim` (2 for (B, H, L, D) and for
// lse (B, H, L)): chunks rank and 2·ranks − 1 − rank of 2·ranks, as a contiguous copy.
// Throws qkv::Error when the length is not divisible by 2·ranks. No MPI needed.
Tensor shard_sequence(const Tensor& full, int rank, int ranks, std::int64_t dim = 2);
// The inverse: shards[r] is rank r's shard; returns the full tensor (contiguous).
Tensor unshard_sequence(const std::vector<Tensor>& shards, std::int64_t dim = 2);
// Every rank's shard gathered (MPI_Allgather) and put back together, on every rank.
Tensor gather_sequence(const Tensor& shard, const Communicator& comm, std::int64_t dim = 2);

}  // namespace qkv::distributed
