#include "qkv/memory.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/budget.h"
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
void finish_limit_reads();

// fork() copies only the calling thread: had another thread held the lock then, the
// child's first large tensor would wait for it forever (Python's multiprocessing forks
// by default on Linux). The lock is taken across the fork and released on both sides,
// as glibc does for malloc's own locks. The same holds for a memory limit another thread
// was reading for the first time (a function-local static half built): the child would
// wait for it forever, so the parent finishes those reads before it forks.
void lock_for_fork() {
  finish_limit_reads();
  cache().mutex_.lock();
}
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

// Built when the library loads, before any thread of its user can race it: a fork while
// another thread was inside cache()'s first call would leave the child waiting for it.
[[maybe_unused]] const bool kForkHandlersRegistered = (cache(), true);

Error out_of_memory(const char* who, std::size_t bytes) {
  return Error(std::string(who) + ": out of memory allocating " + detail::describe_bytes(bytes),
               ErrorKind::memory);
}

}  // namespace

std::shared_ptr<void> allocate_storage(std::size_t bytes, const char* who) {
  // Whole cache lines, at least one (aligned_alloc needs a multiple of the alignment);
  // whole pages for blocks the cache may keep, so that like sizes share blocks.
  if (bytes > std::numeric_limits<std::size_t>::max() / 2) throw out_of_memory(who, bytes);
  bytes = std::max<std::size_t>((bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment,
                                kTensorAlignment);
  if (bytes >= kCachedStorageMin && bytes > memory_limit())
    throw Error(std::string(who) + ": a tensor of " + detail::describe_bytes(bytes) +
                    " exceeds the memory limit of " + detail::describe_memory_limit(),
                ErrorKind::memory);
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

// ---------------------------------------------------------------------------------------
// The memory limit (qkv/memory.h).

namespace {

constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();
constexpr double kDefaultFraction = 0.8;

// The first number in `path` (a cgroup limit file), or kNoLimit when the file is missing or
// says "max".
std::size_t read_limit_file(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  if (!(file >> text) || text == "max") return kNoLimit;
  const auto value = detail::parse_memory_size(text.c_str());
  return value ? *value : kNoLimit;
}

// The least memory limit of this process's cgroup and its ancestors, kNoLimit when none
// (or not Linux). v2: memory.max in the cgroup2 hierarchy; v1: memory.limit_in_bytes in the
// hierarchy mounted with the memory controller. Containers often show only part of the
// hierarchy (the process's own cgroup directory absent): then the limits of the directories
// that are there, up to the mount point, count.
std::size_t cgroup_limit() {
  struct Mount {
    std::string root, point;
  };
  std::vector<std::pair<Mount, bool>> mounts;  // (mount, is v2)
  {
    std::ifstream info("/proc/self/mountinfo");
    std::string line;
    while (std::getline(info, line)) {
      // id parent major:minor root point options [optional...] - type source super_options
      std::istringstream in(line);
      std::string id, parent, device, root, point, options, field;
      in >> id >> parent >> device >> root >> point >> options;
      while (in >> field && field != "-") {
      }
      std::string type, source, super;
      in >> type >> source >> super;
      if (type == "cgroup2") mounts.push_back({{root, point}, true});
      if (type == "cgroup" && ("," + super + ",").find(",memory,") != std::string::npos)
        mounts.push_back({{root, point}, false});
    }
  }
  std::size_t least = kNoLimit;
  std::ifstream groups("/proc/self/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1; the controllers a comma-separated list)
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    const bool v2 = controllers.empty();
    if (!v2 && ("," + controllers + ",").find(",memory,") == std::string::npos) continue;
    for (const auto& [mount, is_v2] : mounts) {
      if (is_v2 != v2) continue;
      std::string relative = path;  // the cgroup's path below the mount's root
      if (mount.root != "/") {
        if (relative.compare(0, mount.root.size(), mount.root) != 0) continue;
        relative = relative.substr(mount.root.size());
      }
      std::string dir = mount.point + relative;
      while (!dir.empty() && dir.back() == '/') dir.pop_back();
      for (;;) {
        least = std::min(least, read_limit_file(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes")));
        if (dir.size() <= mount.point.size()) break;
        dir.erase(dir.rfind('/'));
      }
    }
  }
  return least;
}

struct DefaultLimit {
  std::size_t physical = kNoLimit, cgroup = kNoLimit, address_space = kNoLimit;
  std::size_t least() const { return std::min({physical, cgroup, address_space}); }
  std::size_t limit() const {
    const std::size_t l = least();
    return l == kNoLimit ? std::size_t{1} << 40 : static_cast<std::size_t>(static_cast<double>(l) * kDefaultFraction);
  }
};

DefaultLimit read_default_limit() {
  DefaultLimit d;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) d.physical = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
  d.cgroup = cgroup_limit();
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) d.address_space = as.rlim_cur;
  return d;
}

const DefaultLimit& default_limit() {
  static const DefaultLimit limit = read_default_limit();
  return limit;
}

// QKV_MEMORY_LIMIT, read once: unset (0), its bytes, or malformed.
struct EnvironmentLimit {
  std::size_t bytes = 0;
  bool malformed = false;
  std::string text;
};

const EnvironmentLimit& environment_limit() {
  static const EnvironmentLimit limit = [] {
    EnvironmentLimit e;
    const char* text = std::getenv("QKV_MEMORY_LIMIT");
    if (text == nullptr || *text == '\0') return e;
    e.text = text;
    const auto bytes = detail::parse_memory_size(text);
    e.malformed = !bytes;
    e.bytes = bytes.value_or(0);
    return e;
  }();
  return limit;
}

std::atomic<std::size_t> g_limit_set{0};  // set_memory_limit's value; 0: none

// Waits for (or does) the first reads of the default and environment limits. Neither
// throws: a malformed QKV_MEMORY_LIMIT is only recorded here.
void finish_limit_reads() {
  default_limit();
  environment_limit();
}

}  // namespace

std::size_t default_memory_limit() { return default_limit().limit(); }

std::size_t memory_limit() {
  if (const std::size_t set = g_limit_set.load(std::memory_order_relaxed)) return set;
  const EnvironmentLimit& e = environment_limit();
  QKV_CHECK(!e.malformed, "QKV_MEMORY_LIMIT must be a positive number of bytes, optionally with a suffix "
                          "K, M, G or T (2^10 ... 2^40), e.g. 8G or 512M; got '" << e.text << "'");
  return e.bytes != 0 ? e.bytes : default_memory_limit();
}

void set_memory_limit(std::size_t bytes) {
  QKV_CHECK(bytes >= 1, "set_memory_limit: bytes must be >= 1, got " << bytes);
  g_limit_set.store(bytes, std::memory_order_relaxed);
}

void reset_memory_limit() { g_limit_set.store(0, std::memory_order_relaxed); }

namespace detail {

std::size_t read_default_memory_limit() { return read_default_limit().limit(); }

std::optional<std::size_t> checked_product(std::initializer_list<std::int64_t> factors) {
  std::size_t product = 1;
  for (const std::int64_t f : factors) {
    if (f < 0) return std::nullopt;
    if (__builtin_mul_overflow(product, static_cast<std::size_t>(f), &product)) return std::nullopt;
  }
  return product;
}

std::string describe_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[96];
  if (unit == 0)
    std::snprintf(text, sizeof text, bytes == 1 ? "%zu byte" : "%zu bytes", bytes);
  else
    std::snprintf(text, sizeof text, "%.3g %s (%zu bytes)", value, kUnits[unit], bytes);
  return text;
}

std::string describe_memory_limit() {
  const std::size_t limit = memory_limit();  // first: a malformed QKV_MEMORY_LIMIT throws
  std::string text = describe_bytes(limit);
  if (g_limit_set.load(std::memory_order_relaxed) != 0) return text + ", set by set_memory_limit";
  if (environment_limit().bytes != 0) return text + ", set by QKV_MEMORY_LIMIT=" + environment_limit().text;
  const DefaultLimit& d = default_limit();
  if (d.least() == kNoLimit) return text + ", the default where no memory size could be read";
  const char* source = d.least() == d.address_space ? "the address-space limit (RLIMIT_AS)"
                       : d.least() == d.cgroup      ? "the cgroup's memory limit"
                                                    : "physical memory";
  return text + ", 80% of " + source + " of " + describe_bytes(d.least()) +
         "; QKV_MEMORY_LIMIT or set_memory_limit changes it";
}

std::optional<std::size_t> parse_memory_size(const char* text) {
  if (text == nullptr || *text < '0' || *text > '9') return std::nullopt;
  std::size_t value = 0;
  const char* c = text;
  for (; *c >= '0' && *c <= '9'; ++c)
    if (__builtin_mul_overflow(value, std::size_t{10}, &value) ||
        __builtin_add_overflow(value, static_cast<std::size_t>(*c - '0'), &value))
      return std::nullopt;
  int shift = 0;
  switch (*c) {
    case '\0': break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: return std::nullopt;
  }
  if (*c != '\0' && c[1] != '\0') return std::nullopt;
  if (value == 0 || value > (std::numeric_limits<std::size_t>::max() >> shift)) return std::nullopt;
  return value << shift;
}

void MemoryPlan::add(const char* what, std::initializer_list<std::int64_t> factors) noexcept {
  const auto bytes = checked_product(factors);
  if (count_ < kMaxParts) parts_[count_++] = {what, bytes.value_or(0), !bytes, 0};
  if (!bytes || __builtin_add_overflow(total_, *bytes, &total_)) {
    overflow_ = true;
    total_ = std::numeric_limits<std::size_t>::max();
  }
}

void MemoryPlan::add_per_thread(const char* what, int threads, std::int64_t bytes_each) noexcept {
  const std::size_t before = count_;
  add(what, {threads, bytes_each});
  if (count_ > before) parts_[count_ - 1].threads = threads;
}

std::string MemoryPlan::parts_text() const {
  std::string text;
  for (std::size_t i = 0; i < count_; ++i) {
    if (!parts_[i].overflow && parts_[i].bytes == 0) continue;
    text += text.empty() ? "" : "; ";
    const Part& part = parts_[i];
    text += std::string(part.what) + ": " +
            (part.overflow ? std::string("more than 2^64 bytes") : describe_bytes(part.bytes));
    if (part.threads > 0 && !part.overflow)
      text += ", " + std::to_string(part.threads) + (part.threads == 1 ? " thread" : " threads") + " × " +
              describe_bytes(part.bytes / static_cast<std::size_t>(part.threads));
  }
  return text;
}

void MemoryPlan::check() const {
  const std::size_t limit = memory_limit();
  if (!overflow_ && total_ <= limit) return;
  throw Error(std::string(who_) + ": needs " +
                  (overflow_ ? std::string("more than 2^64 bytes") : describe_bytes(total_)) + " (" +
                  parts_text() + "), more than the memory limit of " + describe_memory_limit(),
              ErrorKind::memory);
}

void MemoryPlan::throw_allocation_failed(const std::string& cause) const {
  throw Error(std::string(who_) + ": out of memory (" + cause + ") while allocating its " +
                  describe_bytes(total_) + " (" + parts_text() + ")",
              ErrorKind::memory);
}

}  // namespace detail

std::size_t cached_storage_bytes() { return cache().held(); }
void release_cached_storage() { cache().release(); }
std::size_t storage_cache_limit() { return cache().locked_limit(); }
void set_storage_cache_limit(std::size_t bytes) { cache().set_limit(bytes); }

}  // namespace qkv
