// The worker thread behind interruptible() (interruptible.h).
#include "interruptible.h"

#include <pthread.h>

namespace qkv::python {
namespace {

// How often the waiting main thread runs Python's signal handlers: Ctrl-C then stops a
// call within this plus the time to the computation's next check (qkv/threads.h).
constexpr std::chrono::milliseconds kSlice{20};

CallThread* g_instance = nullptr;
std::mutex g_instance_mutex;

// A child of fork() has no worker thread (only the forking thread is copied): it starts
// its own at its first call. The parent's object is abandoned, not destroyed: its mutex
// may have been held by the worker at the fork.
void forget_after_fork() { g_instance = nullptr; }
[[maybe_unused]] const bool g_fork_handler = [] {
  return pthread_atfork(nullptr, nullptr, forget_after_fork) == 0;
}();

unsigned long g_main_thread = 0;  // Python's ident of its main thread (init_interruptible)

}  // namespace

CallThread& CallThread::instance() {
  const std::lock_guard lock(g_instance_mutex);
  if (g_instance == nullptr) g_instance = new CallThread;
  return *g_instance;
}

CallThread::CallThread() { std::thread([this] { loop(); }).detach(); }

void CallThread::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return job_ != nullptr; });
    const std::function<void()>* job = job_;
    lock.unlock();
    (*job)();  // catches everything itself (interruptible())
    lock.lock();
    job_ = nullptr;
    finished_ = true;
    done_.notify_one();
  }
}

void CallThread::run(const std::function<void()>& job, std::atomic<bool>* stop,
                     const std::function<bool()>& polls) {
  std::unique_lock lock(mutex_);
  if (busy_) {  // a signal handler that polls() ran called qkv again: run that call here
    lock.unlock();
    job();
    return;
  }
  busy_ = true;
  job_ = &job;
  finished_ = false;
  wake_.notify_one();
  bool stopping = false;
  while (!done_.wait_for(lock, kSlice, [this] { return finished_; })) {
    if (stopping) continue;
    lock.unlock();  // the handlers may take long, and the worker must be able to finish
    stopping = polls();
    if (stopping) stop->store(true, std::memory_order_relaxed);
    lock.lock();
  }
  busy_ = false;
}

void init_interruptible() {
  g_main_thread = pybind11::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
}

bool on_main_thread() { return PyThread_get_thread_ident() == g_main_thread; }

}  // namespace qkv::python
