#include "qkv/threads.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "qkv/error.h"

namespace qkv {
namespace {

// 0 = not yet decided; read from the environment on first use (threads_from_environment).
std::atomic<int> g_threads{0};

// OMP_NUM_THREADS's first entry ("4" or "4,2") when it is a positive integer, else 0.
int omp_num_threads_variable() {
  const char* text = std::getenv("OMP_NUM_THREADS");
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return end != text && (*end == '\0' || *end == ',') && value >= 1 && value <= 4096 ? static_cast<int>(value) : 0;
}

// The CPUs this process may run on (its affinity mask, as taskset or a container sets it),
// ascending; empty where the mask cannot be read.
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
#endif
  return cpus;
}

// How many CPUs this process may run on (allowed_cpus), else the hardware's count.
int available_cpus() {
  const auto allowed = static_cast<int>(allowed_cpus().size());
  return allowed > 0 ? allowed : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Not omp_get_max_threads(): other libraries in the process set it their own way. Debian's
// PyTorch 1.13 sets it at import to its count of physical cores, which is 1 on the 2-vCPU
// machines here, and qkv imported after torch then ran on one thread.
int threads_from_environment() {
  const char* text = std::getenv("QKV_NUM_THREADS");
  if (text == nullptr || *text == '\0') {
    const int omp = omp_num_threads_variable();
    return omp > 0 ? omp : available_cpus();
  }
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  QKV_CHECK(*end == '\0' && value >= 1 && value <= 4096,
            "QKV_NUM_THREADS must be a positive integer (at most 4096), got '" << text << "'");
  return static_cast<int>(value);
}

// libgomp's thread pool does not survive fork(): a child of a process that had run a
// parallel region hangs in its first region of more than one thread (seen with Python's
// multiprocessing, which forks by default on Linux). A forked child therefore runs qkv on
// one thread, as PyTorch's does; set_num_threads there would bring the hang back.
void one_thread_after_fork() { g_threads.store(1, std::memory_order_relaxed); }
[[maybe_unused]] const bool g_fork_handler_registered = [] {
  return pthread_atfork(nullptr, nullptr, one_thread_after_fork) == 0;
}();

// Whether qkv pins OpenMP's worker threads (bind_workers): QKV_BIND_THREADS = 0 turns it
// off, and so does any OpenMP binding variable, which hands placement to the user's
// setting (OMP_PROC_BIND=false included).
bool binding_wanted() {
  static const bool wanted = [] {
    const char* text = std::getenv("QKV_BIND_THREADS");
    QKV_CHECK(text == nullptr || *text == '\0' || std::strcmp(text, "0") == 0 || std::strcmp(text, "1") == 0,
              "QKV_BIND_THREADS must be 0 or 1, got '" << text << "'");
    if (text != nullptr && std::strcmp(text, "0") == 0) return false;
    for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"})
      if (std::getenv(name) != nullptr) return false;
    return true;
  }();
  return wanted;
}

// Where the calling thread's OpenMP workers are pinned (bind_workers). libgomp keeps one
// pool of workers per calling thread and reuses it for teams of the same size, so this is
// per calling thread too.
struct Placement {
  int team = 0;               // the team size placed for; 0: none yet
  std::vector<int> cpus;      // the CPUs the process may run on (allowed_cpus)
  std::vector<pid_t> worker;  // worker t's thread id, t ≥ 1 (0: none); empty: nothing pinned
  std::vector<int> cpu_of;    // the CPU worker t is pinned to
};
thread_local Placement t_placement;

void pin(pid_t thread, int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(thread, sizeof one, &one);  // a failure leaves it where it was
}

// When the team has one thread per CPU the process may run on, pins its workers one per
// CPU and leaves the calling thread free (it is the application's), as ONNX Runtime does
// with its default intra-op pool; then, on every call, moves a worker off the CPU the
// calling thread is on. Why: on the 2-vCPU VMs here a worker woken after ~50 ms idle was
// often queued on the caller's CPU, behind the caller's own share of the work and its spin
// at the region's end, until the scheduler moved one of them. Lq = Lk = 512, H = 12, D = 64,
// f32, calls 50 ms apart, median 4.2-10 ms (2.5 ms back to back). Workers pinned once:
// 2.8-3.1 ms, except calls the caller began on a worker's CPU (after starting a process,
// say): 9-19 ms each, and ~3 ms once the worker moves away. Workers created later (a larger
// team) stay unpinned.
void bind_workers(int n) {
  if (omp_in_parallel()) return;
  Placement& placed = t_placement;
  if (n != placed.team) {
    const bool wanted = binding_wanted();  // first: a malformed QKV_BIND_THREADS throws on every call
    placed = Placement{};
    placed.team = n;
#if defined(__linux__)
    if (n < 2 || !wanted) return;
    placed.cpus = allowed_cpus();
    if (static_cast<int>(placed.cpus.size()) != n) return;
    placed.worker.assign(n, 0);
    placed.cpu_of.assign(n, -1);
    Placement* shared = &placed;  // the workers' own t_placement is another object
    // Never interrupted: a half-pinned team would stay so.
    detail::RegionErrors errors("threads.pin", /*interruptible=*/false);
#pragma omp parallel num_threads(n)
    errors.run([&] {
      const int t = omp_get_thread_num();
      if (t > 0) {
        shared->worker[t] = gettid();
        shared->cpu_of[t] = shared->cpus[t];
        pin(0, shared->cpus[t]);
      }
    });
    // A placement that failed part way is forgotten, so the next call places the team
    // again: kept, it would claim workers it never recorded (worker[t] == 0), whose pins
    // from an earlier placement the move below could then never undo.
    if (errors.failed()) placed = Placement{};
    errors.rethrow();
#else
    (void)wanted;
#endif
  }
#if defined(__linux__)
  if (placed.worker.empty()) return;
  const int here = sched_getcpu();
  for (int t = 1; t < n; ++t) {
    if (placed.cpu_of[t] != here || placed.worker[t] == 0) continue;
    // The CPU no worker is pinned to: there is one, as the team has a thread per CPU.
    for (int cpu : placed.cpus)
      if (std::find(placed.cpu_of.begin(), placed.cpu_of.end(), cpu) == placed.cpu_of.end()) {
        pin(placed.worker[t], cpu);
        placed.cpu_of[t] = cpu;
        break;
      }
    break;
  }
#endif
}

// The stack libgomp gives each worker: OMP_STACKSIZE (or GOMP_STACKSIZE) when set (a
// number, K by default, or with B, K, M or G), else the default of pthread_create (glibc
// takes RLIMIT_STACK, 8 MiB on most systems).
std::size_t omp_stack_bytes() {
  for (const char* name : {"OMP_STACKSIZE", "GOMP_STACKSIZE"}) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (end == text) continue;
    while (*end == ' ') ++end;
    std::size_t unit = 1024;
    switch (*end) {
      case 'b': case 'B': unit = 1; break;
      case 'm': case 'M': unit = std::size_t{1} << 20; break;
      case 'g': case 'G': unit = std::size_t{1} << 30; break;
      default: break;
    }
    if (value > 0) return static_cast<std::size_t>(value) * unit;
  }
  std::size_t bytes = 0;
  pthread_attr_t attr;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &bytes);
    pthread_attr_destroy(&attr);
  }
  return bytes > 0 ? bytes : std::size_t{8} << 20;
}

// The address space the process maps now (/proc/self/statm's first field), 0 if unknown.
std::size_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  if (!(statm >> pages)) return 0;
  return pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// How many of `workers` threads with `stack` bytes of stack pthread_create makes while all
// of them are alive (they wait, then are joined): the same calls libgomp makes, whose
// failure it reports with "libgomp: Thread creation failed" and exit(1), which no caller
// can catch. `why` gets pthread_create's error when one failed.
int threads_that_start(int workers, std::size_t stack, std::string& why) {
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, stack);
  struct Shared {
    std::mutex* mutex;
    std::condition_variable* cv;
    bool* release;
  } shared{&mutex, &cv, &release};
  const auto wait = [](void* arg) -> void* {
    auto* s = static_cast<Shared*>(arg);
    std::unique_lock<std::mutex> lock(*s->mutex);
    s->cv->wait(lock, [&] { return *s->release; });
    return nullptr;
  };
  std::vector<pthread_t> started;
  started.reserve(static_cast<std::size_t>(workers));
  for (int t = 0; t < workers; ++t) {
    pthread_t thread;
    const int rc = pthread_create(&thread, &attr, +wait, &shared);
    if (rc != 0) {
      why = std::string("pthread_create failed: ") + std::strerror(rc);
      break;
    }
    started.push_back(thread);
  }
  pthread_attr_destroy(&attr);
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  cv.notify_all();
  for (pthread_t thread : started) pthread_join(thread, nullptr);
  return static_cast<int>(started.size());
}

// The count asked for, or fewer where the threads could not be created (issue 48 row 14:
// QKV_NUM_THREADS=600 under a 4 GB address-space limit ended in libgomp's exit(1)): their
// stacks must fit in half the address space RLIMIT_AS leaves (the rest is for data), and
// that many threads must start (a test spawn; also catches RLIMIT_NPROC and cgroup limits).
// A lower count is announced once on stderr. Decided once per count asked for.
std::atomic<int> g_capped_for{0};  // the count asked for that g_capped answers
std::atomic<int> g_capped{0};
std::mutex g_cap_mutex;

int capped_thread_count(int n) {
  if (n <= 1) return n;
  if (g_capped_for.load(std::memory_order_acquire) == n) return g_capped.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_cap_mutex);
  if (g_capped_for.load(std::memory_order_acquire) == n) return g_capped.load(std::memory_order_relaxed);
  const std::size_t stack = omp_stack_bytes();
  const std::size_t per_thread = stack + (std::size_t{64} << 10);  // guard page, TLS, descriptor
  // A thread that allocates gets a malloc arena of its own until glibc's default M_ARENA_MAX
  // (8 per core on 64-bit) is reached; each reserves HEAP_MAX_SIZE (64 MiB) of address
  // space, which RLIMIT_AS counts although little of it is used. Counting only the stacks,
  // 111 threads under a 2 GB limit left too little for the arenas: the CLI failed with
  // "out of memory" and Python died with SIGSEGV.
  const std::size_t arena = std::size_t{64} << 20;
  const std::size_t arenas_max = 8 * static_cast<std::size_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  const auto cost = [&](std::size_t workers) {  // stacks and arenas of `workers` more threads
    return workers * per_thread + std::min(workers, arenas_max) * arena;
  };
  int allowed = n;
  std::string why;
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const std::size_t cap = static_cast<std::size_t>(limit.rlim_cur);
    const std::size_t used = mapped_bytes();
    const std::size_t room = cap > used ? (cap - used) / 2 : 0;
    std::size_t workers = 0;  // the most whose stacks and arenas fit in `room`
    while (workers + 1 < static_cast<std::size_t>(n) && cost(workers + 1) <= room) ++workers;
    if (workers + 1 < static_cast<std::size_t>(n)) {
      allowed = static_cast<int>(workers + 1);
      why = "their stacks (" + mib(stack) + " each, OMP_STACKSIZE) and malloc arenas (" + mib(arena) +
            " each, up to " + std::to_string(arenas_max) + ") need " +
            mib(cost(static_cast<std::size_t>(n - 1))) + ", more than half of the " +
            mib(cap > used ? cap - used : 0) + " of address space the limit (ulimit -v) leaves";
    }
  }
  if (allowed > 1) {
    std::string spawn_why;
    const int started = threads_that_start(allowed - 1, stack, spawn_why);
    if (started < allowed - 1) {
      allowed = started / 2 + 1;  // room for what the process allocates next
      why = spawn_why + " after " + std::to_string(started) + " threads";
    }
  }
  if (allowed < n)
    std::fprintf(stderr, "qkv: warning: %d threads asked for, but %s; using %d threads\n", n,
                 why.c_str(), allowed);
  g_capped.store(allowed, std::memory_order_relaxed);
  g_capped_for.store(n, std::memory_order_release);
  return allowed;
}

}  // namespace

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = threads_from_environment();
    g_threads.store(n, std::memory_order_relaxed);
  }
  // A region started here gets one thread inside an active region at the deepest level
  // OpenMP allows (qkv/threads.h says why the count must be what a region gets).
  if (omp_in_parallel() && omp_get_active_level() >= omp_get_max_active_levels()) return 1;
  n = std::min(n, omp_get_thread_limit());
  n = capped_thread_count(n);
  bind_workers(n);
  return n;
}

void set_num_threads(int count) {
  QKV_CHECK(count >= 1 && count <= 4096,
            "set_num_threads: count must be in [1, 4096], got " << count);
  g_threads.store(count, std::memory_order_relaxed);
}

namespace {

// Lock-free, so that storing to it from a signal handler is safe.
std::atomic<bool> g_interrupt{false};
static_assert(std::atomic<bool>::is_always_lock_free);
thread_local const std::atomic<bool>* t_interrupt = nullptr;  // the innermost InterruptScope's

}  // namespace

void request_interrupt() noexcept { g_interrupt.store(true, std::memory_order_relaxed); }
void clear_interrupt() noexcept { g_interrupt.store(false, std::memory_order_relaxed); }
bool interrupt_requested() noexcept { return g_interrupt.load(std::memory_order_relaxed); }

InterruptScope::InterruptScope(const std::atomic<bool>& flag) noexcept : previous_(t_interrupt) {
  t_interrupt = &flag;
}
InterruptScope::~InterruptScope() { t_interrupt = previous_; }

namespace detail {

const std::atomic<bool>& current_interrupt_flag() noexcept {
  return t_interrupt != nullptr ? *t_interrupt : g_interrupt;
}

void fail_region_for_test(const char* region) noexcept {
  RegionErrors::fault_.store(region, std::memory_order_relaxed);
}

void RegionErrors::stop_or_fail() const {
  if (interrupt_->load(std::memory_order_relaxed))
    throw Error(std::string(region_) + ": interrupted", ErrorKind::interrupted);
  const char* fault = fault_.load(std::memory_order_relaxed);
  if (fault != nullptr && std::strcmp(fault, region_) == 0)
    throw Error(std::string(region_) + ": fault injected by a test on thread " +
                std::to_string(omp_get_thread_num()));
}

void RegionErrors::keep(std::exception_ptr error) noexcept {
  if (!claimed_.exchange(true, std::memory_order_acq_rel)) first_ = std::move(error);
  // first_ is read only after the region's closing barrier, which orders this store before it.
  failed_.store(true, std::memory_order_relaxed);
}

void RegionErrors::rethrow() const {
  if (!failed_.load(std::memory_order_relaxed)) return;
  try {
    std::rethrow_exception(first_);
  } catch (const std::bad_alloc&) {
    throw Error(std::string(region_) + ": out of memory (an allocation inside the parallel region failed)",
                ErrorKind::memory);
  }
}

}  // namespace detail

}  // namespace qkv
