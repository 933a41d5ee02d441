#include "qkv/threads.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

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

// The CPUs this process may run on (its affinity mask, as taskset or a container sets it).
int available_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
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

}  // namespace

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = threads_from_environment();
    g_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

void set_num_threads(int count) {
  QKV_CHECK(count >= 1 && count <= 4096,
            "set_num_threads: count must be in [1, 4096], got " << count);
  g_threads.store(count, std::memory_order_relaxed);
}

}  // namespace qkv
