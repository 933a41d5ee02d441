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

#include "qkv/nn.h"
#include "qkv/tensor.h"

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
  const std::atomic<bool>* stop() const { return &stop_; }
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
