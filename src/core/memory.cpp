#include "qkv/memory.h"

#include <malloc.h>
#include <pthread.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/storage.h"
#include "qkv/error.h"
#include "qkv/tensor.h"

// A cached block is poisoned for AddressSanitizer while no tensor owns it, so that a
// pointer kept past its tensor's life still reports a use after free (as use-after-poison)
// in the sanitized tests, as it would without the cache.
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define QKV_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define QKV_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define QKV_POISON(p, n) ((void)(p), (void)(n))
#define QKV_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace qkv {

void retain_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kMaxBlocks = 64;  // a linear search stays trivial next to a fault

// QKV_STORAGE_CACHE_MB when set (a non-negative integer of MiB), else 256 MiB.
std::size_t limit_from_environment() {
  const char* text = std::getenv("QKV_STORAGE_CACHE_MB");
  if (text == nullptr || *text == '\0') return std::size_t{256} << 20;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  QKV_CHECK(*end == '\0' && value >= 0 && value <= (1LL << 30),
            "QKV_STORAGE_CACHE_MB must be a non-negative integer of MiB (at most 2^30), got '" << text << "'");
  return static_cast<std::size_t>(value) << 20;
}

struct Block {
  void* memory;
  std::size_t bytes;  // its capacity
};

class StorageCache {
 public:
  // The smallest cached block of capacity in [bytes, bytes·5/4], taken out of the cache;
  // {nullptr, 0} when none fits.
  // Reads the limit first, so that a bad QKV_STORAGE_CACHE_MB throws here, in an
  // allocation, never in give() (a deleter, which must not throw).
  Block take(std::size_t bytes) {
    const std::lock_guard lock(mutex_);
    if (limit() == 0) return {nullptr, 0};
    std::size_t best = blocks_.size();
    for (std::size_t i = 0; i < blocks_.size(); ++i)
      if (blocks_[i].bytes >= bytes && blocks_[i].bytes - bytes <= bytes / 4 &&
          (best == blocks_.size() || blocks_[i].bytes < blocks_[best].bytes))
        best = i;
    if (best == blocks_.size()) return {nullptr, 0};
    const Block block = blocks_[best];
    held_ -= block.bytes;
    blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(best));
    QKV_UNPOISON(block.memory, block.bytes);
    return block;
  }

  // Keeps the block (evicting the oldest ones to stay within the limit) or frees it.
  void give(void* memory, std::size_t bytes) {
    std::vector<Block> evicted;
    {
      const std::lock_guard lock(mutex_);
      const std::size_t limit = limit_known_ ? limit_ : 0;  // known: take() came first
      if (bytes > limit) {
        evicted.push_back({memory, bytes});
      } else {
        evict_to(limit - bytes, kMaxBlocks - 1, evicted);
        QKV_POISON(memory, bytes);
        blocks_.push_back({memory, bytes});
        held_ += bytes;
      }
    }
    free_all(evicted);  // outside the lock: unmapping takes a while
  }

  std::size_t held() {
    const std::lock_guard lock(mutex_);
    return held_;
  }

  std::size_t limit() {  // callers hold the lock
    if (!limit_known_) {
      limit_ = limit_from_environment();
      limit_known_ = true;
    }
    return limit_;
  }

  std::size_t locked_limit() {
    const std::lock_guard lock(mutex_);
    return limit();
  }

  void set_limit(std::size_t bytes) {
    std::vector<Block> evicted;
    {
      const std::lock_guard lock(mutex_);
      limit_ = bytes;
      limit_known_ = true;
      evict_to(bytes, kMaxBlocks, evicted);
    }
    free_all(evicted);
  }

  void release() {
    std::vector<Block> evicted;
    {
      const std::lock_guard lock(mutex_);
      evict_to(0, 0, evicted);
    }
    free_all(evicted);
  }

 private:
  // Removes the oldest blocks until at most `bytes` and `count` remain held.
  void evict_to(std::size_t bytes, std::size_t count, std::vector<Block>& evicted) {
    std::size_t drop = 0;
    for (std::size_t held = held_; drop < blocks_.size() && (held > bytes || blocks_.size() - drop > count); ++drop) {
      held -= blocks_[drop].bytes;
      evicted.push_back(blocks_[drop]);
    }
    for (std::size_t i = 0; i < drop; ++i) held_ -= blocks_[i].bytes;
    blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(drop));
  }

  static void free_all(const std::vector<Block>& blocks) {
    for (const Block& block : blocks) {
      QKV_UNPOISON(block.memory, block.bytes);  // back to the allocator as it gave it
      std::free(block.memory);
    }
  }

  friend void lock_for_fork();
  friend void unlock_after_fork();

  std::mutex mutex_;
  std::vector<Block> blocks_;  // oldest first
  std::size_t held_ = 0;
  std::size_t limit_ = 0;
  bool limit_known_ = false;
};

StorageCache& cache();

// fork() copies only the calling thread: had another thread held the lock then, the
// child's first large tensor would wait for it forever (Python's multiprocessing forks
// by default on Linux). The lock is taken across the fork and released on both sides,
// as glibc does for malloc's own locks.
void lock_for_fork() { cache().mutex_.lock(); }
void unlock_after_fork() { cache().mutex_.unlock(); }

// Never destroyed: tensors in static storage may be freed after any static destructor.
StorageCache& cache() {
  static StorageCache* const instance = [] {
    auto* created = new StorageCache;
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
    return created;
  }();
  return *instance;
}

Error out_of_memory(const char* who, std::size_t bytes) {
  return Error(std::string(who) + ": out of memory allocating " + std::to_string(bytes) + " bytes");
}

}  // namespace

std::shared_ptr<void> allocate_storage(std::size_t bytes, const char* who) {
  // Whole cache lines, at least one (aligned_alloc needs a multiple of the alignment);
  // whole pages for blocks the cache may keep, so that like sizes share blocks.
  bytes = std::max<std::size_t>((bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment,
                                kTensorAlignment);
  if (bytes < kCachedStorageMin) {
    void* memory = std::aligned_alloc(kTensorAlignment, bytes);
    if (memory == nullptr) throw out_of_memory(who, bytes);
    return std::shared_ptr<void>(memory, [](void* p) { std::free(p); });
  }
  bytes = (bytes + kPage - 1) / kPage * kPage;
  Block block = cache().take(bytes);
  if (block.memory == nullptr) block = {std::aligned_alloc(kTensorAlignment, bytes), bytes};
  if (block.memory == nullptr) throw out_of_memory(who, bytes);
  return std::shared_ptr<void>(block.memory, [capacity = block.bytes](void* p) { cache().give(p, capacity); });
}

std::size_t cached_storage_bytes() { return cache().held(); }
void release_cached_storage() { cache().release(); }
std::size_t storage_cache_limit() { return cache().locked_limit(); }
void set_storage_cache_limit(std::size_t bytes) { cache().set_limit(bytes); }

}  // namespace qkv
