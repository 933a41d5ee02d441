// What the model bindings (apps/vision/python.cpp, python_point.cpp) share: checked NumPy
// arguments. A wrong Python type or dtype is a TypeError (QKV_CHECK_TYPE), a wrong shape a
// ValueError, each naming the argument, the layout expected and what was given.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>

#include "bindings_training.h"
#include "qkv/error.h"
#include "qkv/tensor.h"

namespace qkv_python {

namespace py = pybind11;

using U8Array = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>;

// The Python type's name of `h`, for messages.
inline std::string type_name(const py::handle& h) { return py::str(py::type::handle_of(h).attr("__name__")); }

// "(2, 3)", "(5,)": a shape as Python writes it.
inline std::string shape_string(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d) s += (d ? ", " : "") + std::to_string(a.shape(d));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// An array argument that must be float32 with `ndim` dimensions (`layout` names them for
// the message), as a contiguous tensor copy.
inline qkv::Tensor f32_tensor(const py::handle& obj, const std::string& name, py::ssize_t ndim, const char* layout) {
  QKV_CHECK_TYPE(py::isinstance<py::array>(obj),
                 name << ": expected a numpy.ndarray of float32 " << layout << ", got " << type_name(obj));
  const auto a = py::reinterpret_borrow<py::array>(obj);
  // array_t's check: the dtype is equivalent to native float32 (not '>f4', not float64)
  QKV_CHECK_TYPE(py::isinstance<py::array_t<float>>(a),
                 name << ": expected dtype float32, got " << static_cast<std::string>(py::str(a.dtype())));
  QKV_CHECK(a.ndim() == ndim, name << ": expected " << layout << ", got shape " << shape_string(a));
  const F32Array c = F32Array::ensure(a);  // a C-contiguous float32 view or copy
  const qkv::Shape shape(c.shape(), c.shape() + c.ndim());
  return qkv::Tensor::from_vector(shape, std::span<const float>(c.data(), static_cast<std::size_t>(c.size())));
}

// An array argument of uint8 pixels with `ndim` dimensions, as a C-contiguous view or copy.
inline U8Array u8_pixels(const py::handle& obj, const std::string& name, py::ssize_t ndim, const char* layout) {
  QKV_CHECK_TYPE(py::isinstance<py::array>(obj),
                 name << ": expected a numpy.ndarray of uint8 pixels " << layout << ", got " << type_name(obj));
  const auto a = py::reinterpret_borrow<py::array>(obj);
  QKV_CHECK_TYPE(py::isinstance<py::array_t<std::uint8_t>>(a),
                 name << ": expected dtype uint8 (pixels 0..255, 0 = black), got "
                      << static_cast<std::string>(py::str(a.dtype())));
  QKV_CHECK(a.ndim() == ndim, name << ": expected " << layout << ", got shape " << shape_string(a));
  return U8Array::ensure(a);
}

}  // namespace qkv_python
