// Errors cross threads (src/core/parallel.h): an exception thrown by any thread of a parallel
// region reaches the thread that started it as a qkv::Error, never std::terminate; the
// interrupt flag (qkv/threads.h) stops a region between units of work.
#include <gtest/gtest.h>

#include <atomic>
#include <new>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "qkv/error.h"
#include "qkv/threads.h"

namespace qkv {
namespace {

// Restores the thread count and clears the process-wide interrupt flag.
struct ThreadsGuard {
  int before = num_threads();
  ~ThreadsGuard() {
    set_num_threads(before);
    clear_interrupt();
    detail::fail_region_for_test(nullptr);
  }
};

TEST(ParallelRegions, ErrorOfAWorkerArrivesOnTheCaller) {
  ThreadsGuard guard;
  set_num_threads(2);
  std::atomic<int> ran{0};
  try {
    detail::parallel_team("test.team", 2, [&](int t, int T) {
      ++ran;
      if (T < 2) throw Error("the team has one thread");  // fails the test below just as well
      // A unit that starts after another failed is skipped (RegionErrors::run), so worker 1
      // throws only once both have started: the count below is then always 2.
      while (ran.load() < 2) {
      }
      if (t == 1) throw Error("thrown by worker 1", ErrorKind::type);
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "thrown by worker 1");
    EXPECT_EQ(e.kind(), ErrorKind::type);  // the kind crosses too
  }
  EXPECT_EQ(ran.load(), 2);
}

TEST(ParallelRegions, FirstErrorWinsAndTheRestAreSkipped) {
  ThreadsGuard guard;
  detail::RegionErrors errors("test.loop");
  std::atomic<int> ran{0};
#pragma omp parallel for num_threads(2) schedule(dynamic, 1)
  for (int i = 0; i < 1000; ++i)
    errors.run([&] {
      ++ran;
      throw Error("unit " + std::to_string(i));
    });
  EXPECT_TRUE(errors.failed());
  EXPECT_LT(ran.load(), 1000);  // units after the first failure do not run
  EXPECT_THROW(errors.rethrow(), Error);
}

TEST(ParallelRegions, BadAllocBecomesAMemoryError) {
  ThreadsGuard guard;
  try {
    detail::parallel_team("test.alloc", 2, [](int t, int) {
      if (t == 0) throw std::bad_alloc();
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::memory);
    EXPECT_NE(std::string(e.what()).find("test.alloc: out of memory"), std::string::npos) << e.what();
  }
}

TEST(ParallelRegions, NoErrorNoThrow) {
  std::vector<int> seen(1000, 0);
  detail::parallel_chunks("test.chunks", 1000, true, 2, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) seen[i] += 1;
  });
  for (int s : seen) ASSERT_EQ(s, 1);  // every index exactly once
  detail::parallel_chunks("test.chunks", 0, true, 2, [&](std::int64_t, std::int64_t) { FAIL(); });
}

TEST(ParallelRegions, InterruptStopsBetweenUnits) {
  ThreadsGuard guard;
  request_interrupt();
  EXPECT_TRUE(interrupt_requested());
  try {
    detail::parallel_chunks("test.interrupt", 100, true, 2, [](std::int64_t, std::int64_t) {
      FAIL() << "a unit ran while interrupted";
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::interrupted);
  }
  clear_interrupt();
  EXPECT_NO_THROW(detail::parallel_chunks("test.interrupt", 100, true, 2, [](std::int64_t, std::int64_t) {}));
  // Not interruptible: housekeeping that must finish.
  request_interrupt();
  detail::RegionErrors errors("test.housekeeping", /*interruptible=*/false);
  int ran = 0;
  errors.run([&] { ++ran; });
  EXPECT_EQ(ran, 1);
  EXPECT_NO_THROW(errors.rethrow());
}

TEST(ParallelRegions, InterruptScopeIsPerThread) {
  ThreadsGuard guard;
  std::atomic<bool> mine{false};
  {
    const InterruptScope scope(mine);
    request_interrupt();  // the process-wide flag: not the one this thread checks now
    EXPECT_NO_THROW(detail::parallel_chunks("test.scope", 10, true, 2, [](std::int64_t, std::int64_t) {}));
    mine = true;
    EXPECT_THROW(detail::parallel_chunks("test.scope", 10, true, 2, [](std::int64_t, std::int64_t) {}), Error);
    clear_interrupt();
  }
  // The scope is gone: the process-wide flag (clear) again.
  EXPECT_NO_THROW(detail::parallel_chunks("test.scope", 10, true, 2, [](std::int64_t, std::int64_t) {}));
}

TEST(ParallelRegions, FaultHookNamesTheRegion) {
  ThreadsGuard guard;
  detail::fail_region_for_test("test.hooked");
  EXPECT_NO_THROW(detail::parallel_chunks("test.other", 10, true, 2, [](std::int64_t, std::int64_t) {}));
  try {
    detail::parallel_chunks("test.hooked", 10, true, 2, [](std::int64_t, std::int64_t) {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.hooked: fault injected"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qkv
