// What the training bindings (bindings_train.cpp, apps/recommender/python.cpp) share: tensors
// as NumPy copies, and the relay of a training loop's progress to a Python callback.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qkv/error.h"
#include "qkv/nn.h"
#include "qkv/tensor.h"
#include "qkv/trainer.h"

namespace qkv_python {

namespace py = pybind11;

using IdArray = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;
using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

// An f32 tensor (any strides) as a new NumPy array of its shape.
inline py::array_t<float> to_numpy(const qkv::Tensor& t) {
  qkv::Tensor c = t.contiguous();
  std::vector<py::ssize_t> shape(c.shape().begin(), c.shape().end());
  py::array_t<float> a(shape);
  std::copy_n(c.data_as<float>(), c.numel(), a.mutable_data());
  return a;
}

// name -> array (any real dtype, converted) as name -> an f32 tensor copy of its shape.
inline qkv::nn::StateDict state_dict_from(const py::dict& arrays) {
  qkv::nn::StateDict state;
  for (const auto& [key, value] : arrays) {
    const F32Array a = value.cast<F32Array>();
    const qkv::Shape shape(a.shape(), a.shape() + a.ndim());
    state[key.cast<std::string>()] =
        qkv::Tensor::from_vector(shape, std::span<const float>(a.data(), static_cast<std::size_t>(a.size())));
  }
  return state;
}

// The loop's progress (qkv/trainer.h) as the dict every Python train() passes to its
// progress callback: step, total, epoch, epochs (0 without epochs), epoch_end, loss, accuracy
// (None unless the task measures it), epoch_loss (None but at an epoch end), lr, items_per_s,
// unit, elapsed_s, and metric, score (None unless evaluated after this step) and best.
inline py::dict progress_dict(const qkv::train::Progress& p) {
  py::dict info;
  const auto maybe = [](bool has, double v) { return has ? py::object(py::float_(v)) : py::none(); };
  info["task"] = p.task;
  info["step"] = p.step;
  info["total"] = p.total;
  info["epoch"] = p.epoch;
  info["epochs"] = p.epochs;
  info["epoch_end"] = p.epoch_end;
  info["loss"] = p.loss;
  info["accuracy"] = maybe(p.accuracy >= 0, p.accuracy);
  info["epoch_loss"] = maybe(p.epoch_end, p.epoch_loss);
  info["lr"] = p.lr;
  info["items_per_s"] = p.items_per_s;
  info["unit"] = p.unit;
  info["elapsed_s"] = p.elapsed_s;
  info["metric"] = p.evaluated ? py::object(py::str(p.metric)) : py::none();
  info["score"] = maybe(p.evaluated, p.score);
  info["best"] = p.best;
  return info;
}

// A training loop runs with the GIL released and calls back after each step or epoch.
// The relay takes the GIL, runs Python's signal handlers (so Ctrl-C is seen between steps)
// and calls `callback(info())` when a callback was given. An exception from either is kept
// and `stop` set: the loop ends at its next check, and rethrow() then raises the exception
// as Python raised it (KeyboardInterrupt, or the callback's own).
class ProgressRelay {
 public:
  explicit ProgressRelay(py::object callback) : callback_(std::move(callback)) {}

  template <class Info>
  void operator()(Info&& info) {
    py::gil_scoped_acquire acquire;
    if (raised_) return;
    try {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (!callback_.is_none()) callback_(info());
    } catch (py::error_already_set& e) {
      raised_.emplace(std::move(e));
      stop_.store(true);
    }
  }
  // The loop's progress callback: each Progress relayed as progress_dict.
  qkv::train::ProgressCallback callback() {
    return [this](const qkv::train::Progress& p) { (*this)([&] { return progress_dict(p); }); };
  }
  const std::atomic<bool>* stop() const { return &stop_; }
  // A training run from Python: train(callback(), stop()) with the GIL released; then what
  // the callback or Ctrl-C raised (the loop stopped for it, after a checkpoint) is raised,
  // else train's result returned. A qkv::Error thrown after the relay raised gives way to
  // the relay's exception, the cause.
  template <class Train>
  auto run(Train&& train) {
    std::optional<decltype(train(callback(), stop()))> result;
    try {
      py::gil_scoped_release release;
      result.emplace(train(callback(), stop()));
    } catch (const qkv::Error&) {
      if (!raised()) throw;
    }
    rethrow();
    return std::move(*result);
  }
  bool raised() const { return raised_.has_value(); }
  void rethrow() {
    if (raised_) throw std::move(*raised_);
  }

 private:
  py::object callback_;
  std::atomic<bool> stop_{false};
  std::optional<py::error_already_set> raised_;
};

}  // namespace qkv_python
