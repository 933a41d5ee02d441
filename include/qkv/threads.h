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
#pragma once

namespace qkv {

int num_threads();              // throws qkv::Error when QKV_NUM_THREADS or QKV_BIND_THREADS is malformed
void set_num_threads(int count);  // count >= 1, else qkv::Error

}  // namespace qkv
