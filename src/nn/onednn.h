// How src/nn runs oneDNN primitives: one CPU engine, qkv's thread count around every
// primitive, bounded primitive caches, and a plain f32 matrix product (gemm) for the
// backward passes. Private to the nn sources.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "qkv/threads.h"

namespace qkv::nn::detail {

// One CPU engine for the process. One cached primitive per shape serves every caller, from
// any thread and from several at once: that is safe because each run brings its own
// scratchpad (scratchpad_attr() and run() below).
dnnl::engine& cpu_engine();

// The attributes every primitive of src/nn starts from: its scratchpad, oneDNN's temporary
// buffer (the per-thread partial sums of a reduction split across threads, packed blocks of
// a product), is the caller's (scratchpad_mode::user), and run() passes one per run. With
// oneDNN's own (library mode), the scratchpad belongs to the primitive (Debian's oneDNN is
// built with DNNL_ENABLE_CONCURRENT_EXEC), and oneDNN documents that the same primitive then
// cannot run on two threads at once: two threads running one cached LayerNorm backward
// wrote each other's partial sums of dweight (34 of 40 runs side by side differed).
dnnl::primitive_attr scratchpad_attr();

// oneDNN (its OpenMP build) runs on OpenMP's thread count, which other libraries in the
// process change: importing PyTorch sets it to the physical cores, 1 on a 2-vCPU machine,
// and a BERT layer then ran at half speed. Within this scope, on this thread, OpenMP's
// count is qkv's (threads.h); it is restored after. A primitive fixes its split of the
// work when created, so the scope covers creation too, and the caches are keyed by the
// count.
class OmpThreadScope {
 public:
  explicit OmpThreadScope(int threads) : before_(omp_get_max_threads()) {
    if (threads != before_) omp_set_num_threads(threads);
  }
  ~OmpThreadScope() {
    if (omp_get_max_threads() != before_) omp_set_num_threads(before_);
  }
  OmpThreadScope(const OmpThreadScope&) = delete;
  OmpThreadScope& operator=(const OmpThreadScope&) = delete;

 private:
  int before_;
};

// Runs one primitive on the CPU engine and waits for it: every oneDNN call of src/nn. A
// primitive made with scratchpad_attr() that needs a scratchpad gets the calling thread's
// (thread_local, grown to the largest asked for and kept for the thread's life): a thread
// runs one primitive at a time, and two threads never share one.
void run(const dnnl::primitive& primitive, std::unordered_map<int, dnnl::memory> args);

// Copies `from` into `to`, converting layout and type.
void reorder(dnnl::memory from, dnnl::memory to);

// (key, qkv's thread count) -> a primitive, created once. oneDNN has its own primitive
// cache, but creating the descriptors still costs microseconds per call; this skips that.
// Bounded: cleared when it grows past `max_entries` (decoding changes M every step).
template <class Key, class Value>
class PrimitiveCache {
 public:
  explicit PrimitiveCache(std::size_t max_entries) : max_entries_(max_entries) {}

  template <class Make>
  Value get(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int threads = num_threads();
    const auto full_key = std::make_pair(key, threads);
    auto it = entries_.find(full_key);
    if (it != entries_.end()) return it->second;
    const OmpThreadScope scope(threads);
    Value made = make();
    if (entries_.size() >= max_entries_) entries_.clear();
    return entries_.emplace(full_key, std::move(made)).first->second;
  }

 private:
  std::size_t max_entries_;
  std::mutex mutex_;
  std::map<std::pair<Key, int>, Value> entries_;
};

// C (M, N) = [C +] op(A)·op(B), f32 row-major, through oneDNN's matmul. op(A) is (M, K):
// A stored (M, K), or (K, M) when trans_a; op(B) is (K, N): B stored (K, N), or (N, K)
// when trans_b. accumulate adds into C instead of overwriting.
void gemm(float* c, const float* a, const float* b, std::int64_t M, std::int64_t N,
          std::int64_t K, bool trans_a, bool trans_b, bool accumulate);
// The same with A and B in bf16 (std::uint16_t, the upper halves of f32s): the products of
// bf16 pairs accumulated in f32 into C (f32), oneDNN's bf16 matmul (AVX512-BF16 or AMX;
// callers check nn::check_bf16_products first).
void gemm_bf16(float* c, const std::uint16_t* a, const std::uint16_t* b, std::int64_t M,
               std::int64_t N, std::int64_t K, bool trans_a, bool trans_b, bool accumulate);

}  // namespace qkv::nn::detail
