// Running a long computation so that Ctrl-C stops it (the bindings' half of qkv/threads.h's
// interrupts).
//
// Python runs signal handlers only on its main thread, between bytecodes: while the main
// thread is inside a C++ call, Ctrl-C waits for the call to end. So a call made on the main
// thread runs on a worker thread instead, with the GIL released, while the main thread waits
// in slices of kSlice and runs Python's signal handlers between them (PyErr_CheckSignals).
// When a handler raises (KeyboardInterrupt from the default SIGINT handler), the call's own
// interrupt flag is set; the computation stops at its next check (qkv/threads.h) and the
// handler's exception propagates as Python raised it. Calls from other threads run where
// they are, as before: Python delivers signals to the main thread only.
//
// The worker is one thread for the whole process, started at the first call, so that
// OpenMP's team (one per calling thread in libgomp) and qkv's pinning of it are made once,
// not per call. Handing a call over and back costs two thread wake-ups (tests/python/
// test_interrupt.py's note measures it at L = 512).
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "qkv/threads.h"

namespace qkv::python {

// The one worker thread. Never destroyed: it may be blocked in a wait at interpreter exit.
class CallThread {
 public:
  static CallThread& instance();

  // Runs job on the worker and waits for it: polls() between slices of kSlice, and when it
  // returns true sets *stop, then still waits for job to finish (it references the caller's
  // stack). Callers are the main thread only; a call made while one is waiting (from a
  // signal handler that polls() ran) runs job on the calling thread.
  void run(const std::function<void()>& job, std::atomic<bool>* stop, const std::function<bool()>& polls);

 private:
  CallThread();
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void()>* job_ = nullptr;  // the job being handed over; null: none
  bool finished_ = false;  // the worker has finished job_
  bool busy_ = false;      // a run() is waiting for the worker
};

// Whether the calling thread is Python's main thread (the one signal handlers run on).
// init_interruptible() (at module import, with the GIL) finds which that is.
void init_interruptible();
bool on_main_thread();

// Whether a call of about `work` multiply-adds is worth handing over: below, it ends within
// a few milliseconds, and Python runs the handlers right after it. Handing over costs
// about 17 µs (two wake-ups, 26 -> 44 µs for a call of L = 4 on the loaded 2-core
// machines here), 0.7% of an L = 512, H = 12 forward, which therefore runs directly.
inline bool long_call(double work) { return work >= 0x1p29; }

// f() with the GIL released and, on the main thread when `long_running`, interruptible by a
// signal handler that raises (see above). Returns f's value; rethrows f's exception; throws
// py::error_already_set when a handler raised.
template <class F>
auto interruptible(bool long_running, F&& f) -> decltype(f()) {
  using Result = decltype(f());
  if (!long_running || !on_main_thread()) {
    pybind11::gil_scoped_release release;
    return f();
  }
  std::optional<Result> result;
  std::exception_ptr error;
  std::atomic<bool> stop{false};
  bool raised = false;
  {
    pybind11::gil_scoped_release release;
    const std::function<void()> job = [&] {
      const InterruptScope scope(stop);
      try {
        result.emplace(f());
      } catch (...) {
        error = std::current_exception();
      }
    };
    CallThread::instance().run(job, &stop, [&raised] {
      pybind11::gil_scoped_acquire gil;
      raised = PyErr_CheckSignals() != 0;  // the handler's exception stays set
      return raised;
    });
  }
  if (raised) throw pybind11::error_already_set();
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

}  // namespace qkv::python
