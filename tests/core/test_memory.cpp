// The tensor storage cache (qkv/memory.h): freed blocks come back for like sizes only,
// within the limit, oldest evicted first, and never to two owners at once.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "core/storage.h"
#include "qkv/memory.h"
#include "qkv/tensor.h"

namespace qkv {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Each test starts from an empty cache of a known limit and leaves the process's limit
// as it found it (other tests in the same process allocate through the cache too).
class StorageCache : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_limit_ = storage_cache_limit();
    set_storage_cache_limit(64 * kMiB);
    release_cached_storage();
  }
  void TearDown() override {
    release_cached_storage();
    set_storage_cache_limit(saved_limit_);
  }

 private:
  std::size_t saved_limit_ = 0;
};

TEST_F(StorageCache, AFreedBlockServesTheNextLikeRequest) {
  void* first = nullptr;
  {
    std::shared_ptr<void> block = allocate_storage(kMiB, "test");
    first = block.get();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % kTensorAlignment, 0u);
    EXPECT_EQ(cached_storage_bytes(), 0u);
  }
  EXPECT_EQ(cached_storage_bytes(), kMiB);
  std::shared_ptr<void> again = allocate_storage(kMiB - 100, "test");  // same pages
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(cached_storage_bytes(), 0u);
  // Taken: a second request cannot get the same block.
  std::shared_ptr<void> other = allocate_storage(kMiB, "test");
  EXPECT_NE(other.get(), first);
}

TEST_F(StorageCache, OnlyBlocksAtMostAQuarterLargerAreReused) {
  void* block_1mib = allocate_storage(kMiB, "test").get();  // freed at once: cached
  ASSERT_EQ(cached_storage_bytes(), kMiB);
  // 1 MiB for a 512 KiB request wastes half: a new block.
  std::shared_ptr<void> half = allocate_storage(kMiB / 2, "test");
  EXPECT_NE(half.get(), block_1mib);
  EXPECT_EQ(cached_storage_bytes(), kMiB);
  // 1 MiB for 0.8 MiB wastes a fifth: reused. The block keeps its capacity.
  std::shared_ptr<void> most = allocate_storage(kMiB * 4 / 5, "test");
  EXPECT_EQ(most.get(), block_1mib);
  most.reset();
  EXPECT_EQ(cached_storage_bytes(), kMiB);
  // Larger than the block: never.
  std::shared_ptr<void> larger = allocate_storage(kMiB + 1, "test");
  EXPECT_NE(larger.get(), block_1mib);
}

TEST_F(StorageCache, SmallBlocksAreNotCached) {
  { std::shared_ptr<void> small = allocate_storage(kCachedStorageMin - kTensorAlignment, "test"); }
  EXPECT_EQ(cached_storage_bytes(), 0u);
  { std::shared_ptr<void> large = allocate_storage(kCachedStorageMin, "test"); }
  EXPECT_EQ(cached_storage_bytes(), kCachedStorageMin);
}

TEST_F(StorageCache, TheLimitEvictsTheOldestBlocks) {
  set_storage_cache_limit(2 * kMiB);
  std::vector<std::shared_ptr<void>> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(allocate_storage(kMiB, "test"));
  void* newest = blocks[2].get();
  void* middle = blocks[1].get();
  for (std::shared_ptr<void>& block : blocks) block.reset();  // freed 0, 1, 2: 0 goes when 2 arrives
  EXPECT_EQ(cached_storage_bytes(), 2 * kMiB);
  std::set<void*> reused;
  std::vector<std::shared_ptr<void>> taken;
  for (int i = 0; i < 2; ++i) {
    taken.push_back(allocate_storage(kMiB, "test"));
    reused.insert(taken.back().get());
  }
  EXPECT_EQ(reused, (std::set<void*>{newest, middle}));
  EXPECT_EQ(cached_storage_bytes(), 0u);
  taken.clear();
  set_storage_cache_limit(kMiB);  // lowering the limit evicts down to it
  EXPECT_EQ(cached_storage_bytes(), kMiB);
  { std::shared_ptr<void> too_big = allocate_storage(2 * kMiB, "test"); }  // over the limit: freed
  EXPECT_EQ(cached_storage_bytes(), kMiB);
  set_storage_cache_limit(0);  // off
  EXPECT_EQ(cached_storage_bytes(), 0u);
  { std::shared_ptr<void> block = allocate_storage(kMiB, "test"); }
  EXPECT_EQ(cached_storage_bytes(), 0u);
}

TEST_F(StorageCache, ReleaseEmptiesIt) {
  { std::shared_ptr<void> a = allocate_storage(kMiB, "test"), b = allocate_storage(3 * kMiB, "test"); }
  EXPECT_EQ(cached_storage_bytes(), 4 * kMiB);
  release_cached_storage();
  EXPECT_EQ(cached_storage_bytes(), 0u);
}

// Tensors of the same size, allocated and freed from several threads: no block is ever
// owned twice (each owner writes its id over its block and reads it back), and the
// accounting ends within the limit.
TEST_F(StorageCache, ThreadsNeverShareABlock) {
  set_storage_cache_limit(8 * kMiB);
  constexpr int kThreads = 4, kRounds = 300;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int id = 0; id < kThreads; ++id)
    threads.emplace_back([id, &failures] {
      for (int round = 0; round < kRounds; ++round) {
        Tensor t = Tensor::empty({static_cast<std::int64_t>(kMiB / 4 + (round % 3) * 1024)}, DType::f32);
        auto* words = t.data_as<std::int32_t>();
        const std::int64_t n = t.numel();
        for (std::int64_t i = 0; i < n; i += 1024) words[i] = id;
        std::this_thread::yield();
        for (std::int64_t i = 0; i < n; i += 1024) failures[id] += words[i] != id;
      }
    });
  for (std::thread& thread : threads) thread.join();
  for (int id = 0; id < kThreads; ++id) EXPECT_EQ(failures[id], 0) << "thread " << id;
  EXPECT_LE(cached_storage_bytes(), 8 * kMiB);
  EXPECT_GT(cached_storage_bytes(), 0u);
}

// fork() while another thread allocates and frees large tensors through the cache: the
// child can still allocate one (the cache's lock is held across the fork and released in
// the child). Without that, a child forked while the other thread held the lock waits
// for it forever: SIGALRM ends it after 10 s and counts as a failure (measured with the
// handlers removed: about 64 of 300 children hung, 640 s at 10 s each). Not 2 s: on a
// 2-core machine busy with a build, a child once took longer than that to run.
// The first forks race the other thread's first allocation, which reads the memory
// limits (cgroup files) into function-local statics: forked mid-read, the child waited
// for that read forever. On a loaded 2-core machine 15 of 100 runs failed so until the
// fork handler finished those reads first (0 of 100 since).
TEST_F(StorageCache, AChildForkedWhileAnotherThreadUsesItCanAllocate) {
#if defined(__SANITIZE_ADDRESS__)
  // GCC 12's AddressSanitizer runtime (libasan.so.8) intercepts vfork but not fork, so it does
  // not hold its allocator's locks across a fork (LLVM's runtime does since release 15): a
  // child forked while the other thread is inside malloc can wait for that lock forever, in
  // the runtime, before qkv's handlers matter (seen once in the sanitized shard of a
  // fresh-clone make test, the unsanitized test passing). The unsanitized unit tests run it.
  GTEST_SKIP() << "AddressSanitizer's allocator locks are not held across fork in this runtime";
#endif
  std::atomic<bool> stop{false};
  std::thread churn([&stop] {
    while (!stop.load(std::memory_order_relaxed)) {
      Tensor t = Tensor::empty({static_cast<std::int64_t>(kMiB / 4)});
      t.data_as<float>()[0] = 1.0f;
    }
  });
  int failures = 0;
  for (int i = 0; i < 300; ++i) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      alarm(10);
      Tensor t = Tensor::empty({static_cast<std::int64_t>(kMiB / 4)});
      _exit(t.defined() ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (failures > 0) break;  // one is enough, and each costs the alarm's 10 s
  }
  stop = true;
  churn.join();
  EXPECT_EQ(failures, 0);
}

#if defined(__SANITIZE_ADDRESS__)
// A pointer kept past its tensor's life still trips AddressSanitizer: cached blocks are
// poisoned while no tensor owns them.
TEST_F(StorageCache, CachedBlocksArePoisoned) {
  float* dangling = nullptr;
  {
    Tensor t = Tensor::zeros({static_cast<std::int64_t>(kMiB / 4)});
    dangling = t.data_as<float>();
  }
  ASSERT_EQ(cached_storage_bytes(), kMiB);
  EXPECT_DEATH({ [[maybe_unused]] volatile float x = dangling[100]; }, "use-after-poison");
}
#endif

}  // namespace
}  // namespace qkv
