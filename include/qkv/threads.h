// The thread count used by every parallel loop in qkv (OpenMP underneath).
//
// Starts from the environment variable QKV_NUM_THREADS when set (a positive integer),
// else OMP_NUM_THREADS (its first entry), else the CPUs the process may run on; never
// from omp_get_max_threads(), which other libraries change (PyTorch does at import).
// oneDNN's products (nn::Linear, LayerNorm, reorders) run on this count too: OpenMP's
// setting is set to it around each of their calls and restored after.
// qkv's own kernels never depend on the thread count for their results: work is split so
// that every output element is computed by the same sequence of operations whichever
// thread computes it, and random numbers (dropout) are a function of the element's index
// and the seed, not of the thread. (oneDNN promises no such thing for its products.)
// Placement: when the count equals the CPUs the process may run on (the default), the
// first call from a thread (and the first after the count changes) pins the workers of its
// OpenMP team one per CPU, never the calling thread itself, and every call moves a worker
// off the CPU the caller is on; QKV_BIND_THREADS=0, or any of
// OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY, leaves placement to the scheduler or to
// OpenMP. Pinned workers start on time after idle (see src/core/threads.cpp).
// What OpenMP would actually give a region started here bounds the count: 1 on a thread
// that is already inside an active parallel region (OpenMP runs a region nested there on
// its caller alone unless OMP_MAX_ACTIVE_LEVELS allows more), and at most
// omp_get_thread_limit() (OMP_THREAD_LIMIT). Why: a oneDNN primitive splits its work for
// the thread count it was created with and, run on fewer threads, leaves parts of its output
// unwritten (LayerNorm's backward summed per-thread partial gradients of which only one had
// been computed), so the count its primitives are made for must be the count that runs them.
#pragma once

#include <atomic>

namespace qkv {

int num_threads();              // throws qkv::Error when QKV_NUM_THREADS or QKV_BIND_THREADS is malformed
void set_num_threads(int count);  // count >= 1, else qkv::Error

// Stopping a computation that is running (Ctrl-C).
//
// Every parallel loop of qkv checks an interrupt flag between its units of work (a block of
// queries of an attention kernel, a query row of the reference, a key/value head of the
// backward, a thread's share of an element-wise loop). Once the flag is set, the next check
// stops the computation, and the call throws qkv::Error of ErrorKind::interrupted on the
// thread that made it (Python: KeyboardInterrupt). What has not reached a check (a oneDNN
// product, a single-threaded copy) runs to its end first. The flag checked is the one of the
// thread that started the computation: an InterruptScope's while one is alive there, else the
// process-wide flag. The flag is never cleared by qkv: whoever set it clears it.
void request_interrupt() noexcept;  // sets the process-wide flag; async-signal-safe (a SIGINT handler may call it)
void clear_interrupt() noexcept;    // clears it
bool interrupt_requested() noexcept;  // the process-wide flag

// While alive, computations started by this thread check `flag` instead of the process-wide
// one (Python's binding gives each call its own, so Ctrl-C stops only the call it interrupts).
// Scopes nest; destroy them in reverse order on the thread that made them.
class InterruptScope {
 public:
  explicit InterruptScope(const std::atomic<bool>& flag) noexcept;
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  const std::atomic<bool>* previous_;
};

}  // namespace qkv
