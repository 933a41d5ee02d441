// How qkv's parallel regions report errors and stop early. Internal (docs/CONTRIBUTING.md).
//
// An exception that leaves an OpenMP parallel region calls std::terminate: the process dies
// with SIGABRT instead of the caller seeing a qkv::Error (a scratch buffer that could not be
// allocated in a worker thread did exactly that). So every parallel region of the library
// runs its units of work through a RegionErrors, which keeps the first exception any thread
// throws, lets the other units of the region be skipped, and throws it again on the thread
// that started the region once the region has ended:
//
//   RegionErrors errors("attention.forward");
//   #pragma omp parallel num_threads(num_threads())
//   {
//     std::optional<Scratch> w;
//     errors.run([&] { w.emplace(...); });         // a failure here skips this thread's units
//   #pragma omp for schedule(dynamic, 1)
//     for (std::int64_t i = 0; i < n; ++i)
//       errors.run([&] { work(i, *w); });           // never lets an exception out of the loop
//   }
//   errors.rethrow();
//
// Every thread still reaches every worksharing construct and barrier of the region (a thread
// that left early would leave the others waiting at the barrier), which is why the try sits
// inside the loop body and not around the loop.
//
// run() also checks, before each unit, the interrupt flag of the thread that started the
// region (qkv/threads.h): when it is set the unit throws ErrorKind::interrupted, which reaches
// the caller by the same way. std::bad_alloc becomes a qkv::Error of ErrorKind::memory.
// On the happy path run() costs two relaxed loads of flags that no thread writes, and a try
// block, which costs nothing until something throws.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>

#include <omp.h>

namespace qkv::detail {

// The interrupt flag computations started by this thread check: an InterruptScope's, else
// the process-wide one (qkv/threads.h).
const std::atomic<bool>& current_interrupt_flag() noexcept;

// Tests only: while set to a region's name, every unit that region runs throws a qkv::Error
// naming it, on whichever thread runs it (tests/core/test_parallel.cpp throws from inside
// every region of the library this way). nullptr turns it off.
void fail_region_for_test(const char* region) noexcept;

class RegionErrors {
 public:
  // `region`: a name for messages and fail_region_for_test (a string literal).
  // interruptible = false: units never stop for the interrupt flag (housekeeping that must
  // finish, such as pinning threads).
  explicit RegionErrors(const char* region, bool interruptible = true) noexcept
      : region_(region), interrupt_(interruptible ? &current_interrupt_flag() : &kNever) {}
  RegionErrors(const RegionErrors&) = delete;
  RegionErrors& operator=(const RegionErrors&) = delete;

  // Runs body() unless a unit of this region has already failed; an exception it throws
  // is kept when it is the region's first and dropped otherwise. Any thread of the region.
  template <class F>
  void run(F&& body) noexcept {
    if (failed_.load(std::memory_order_relaxed)) return;
    try {
      if (interrupt_->load(std::memory_order_relaxed) || fault_.load(std::memory_order_relaxed) != nullptr)
        [[unlikely]] stop_or_fail();
      body();
    } catch (...) {
      keep(std::current_exception());
    }
  }

  // Whether a unit has failed so far (the others are being skipped).
  bool failed() const noexcept { return failed_.load(std::memory_order_relaxed); }

  // After the region, on the thread that started it: throws the first exception a unit
  // threw, std::bad_alloc as a qkv::Error of ErrorKind::memory naming the region.
  void rethrow() const;

 private:
  [[gnu::cold]] void stop_or_fail() const;  // throws interrupted, or the test's fault
  [[gnu::cold]] void keep(std::exception_ptr error) noexcept;

  friend void fail_region_for_test(const char* region) noexcept;
  inline static std::atomic<const char*> fault_{nullptr};
  inline static const std::atomic<bool> kNever{false};  // fail_region_for_test's region, or null

  const char* region_;
  const std::atomic<bool>* interrupt_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> claimed_{false};  // a thread is storing first_
  std::exception_ptr first_;
};

// body(begin, end) over [0, n) in contiguous chunks, one per thread of a team of
// num_threads() (just the caller when `parallel` is false or n is small), as OpenMP's
// schedule(static) splits a loop; the first exception of any chunk is thrown here.
// For loops whose result does not depend on the split (element-wise ones).
template <class F>
void parallel_chunks(const char* region, std::int64_t n, bool parallel, int threads, F&& body) {
  RegionErrors errors(region);
#pragma omp parallel num_threads(threads) if (parallel && n > 1 && threads > 1)
  {
    const std::int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    const std::int64_t begin = n / T * t + std::min(t, n % T);
    const std::int64_t end = begin + n / T + (t < n % T ? 1 : 0);
    if (begin < end) errors.run([&] { body(begin, end); });
  }
  errors.rethrow();
}

// body(t, T) on every thread t of a team of `threads` (T: the team's size, which OpenMP may
// make smaller); the first exception of any thread is thrown here.
template <class F>
void parallel_team(const char* region, int threads, F&& body) {
  RegionErrors errors(region);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    errors.run([&] { body(t, T); });
  }
  errors.rethrow();
}

}  // namespace qkv::detail
