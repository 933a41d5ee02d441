#include "qkv/threads.h"

#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "qkv/error.h"

namespace qkv {
namespace {

// 0 = not yet decided; read from QKV_NUM_THREADS or OpenMP on first use.
std::atomic<int> g_threads{0};

int threads_from_environment() {
  const char* text = std::getenv("QKV_NUM_THREADS");
  if (text == nullptr || *text == '\0') return omp_get_max_threads();
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  QKV_CHECK(*end == '\0' && value >= 1 && value <= 4096,
            "QKV_NUM_THREADS must be a positive integer (at most 4096), got '" << text << "'");
  return static_cast<int>(value);
}

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
