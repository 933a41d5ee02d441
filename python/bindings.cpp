// _qkv — the compiled half of the Python module `qkv` (pybind11).
//
// This file only moves buffers across the language boundary; every argument check that
// concerns shapes, dtypes and options lives in the C++ library (qkv::validate_attention),
// and the friendly, PyTorch-shaped signature lives in python/qkv/__init__.py.
//
// - NumPy arrays become qkv::Tensor views with no copy: strides are passed in elements
//   (NumPy's are in bytes) and the array is kept alive by the Tensor's owner.
// - bf16 has no NumPy dtype, so bf16 data crosses as int16 bits plus a flag
//   (torch: t.view(torch.int16).numpy()), and comes back the same way. float64 crosses as
//   qkv::DType::f64 and comes back as float64.
// - Results are handed to NumPy with no copy: the array's base is a capsule that owns
//   the qkv::Tensor.
// - The GIL is released around every computation; attention's calls from the main thread
//   run on a worker thread so that Ctrl-C stops them (interruptible.h).
// - qkv::Error becomes ValueError, TypeError, MemoryError or KeyboardInterrupt (its kind());
//   std::bad_alloc and std::length_error (a container asked for more than it can hold)
//   become MemoryError, naming what was being done where a binding knows it
//   (bindings_common.h).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "interruptible.h"
#include "model_types.h"
#include "qkv/qkv.h"

namespace py = pybind11;
void register_nn(py::module_& m);  // bindings_nn.cpp
void register_models(py::module_& m);  // bindings_models.cpp
void register_train(py::module_& m);   // bindings_train.cpp
void register_dates(py::module_& m);           // apps/dates/python.cpp
void register_language_model(py::module_& m);  // apps/language_model/python.cpp
void register_search(py::module_& m);          // apps/search/python.cpp
void register_recommender(py::module_& m);  // apps/recommender/python.cpp
void register_vision(py::module_& m);  // apps/vision/python.cpp
void register_point(py::module_& m);   // apps/vision/python_point.cpp

namespace {

// PyErr_SetString decodes the message as strict UTF-8, and fails on anything else (a
// message quoting a file's bytes, say), leaving no error set: decode with replacement.
void set_python_error(PyObject* type, const std::string& message) {
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()),
                                        "backslashreplace");
  if (text == nullptr) {
    PyErr_Clear();
    PyErr_SetString(type, "qkv: (the error message could not be decoded)");
    return;
  }
  PyErr_SetObject(type, text);
  Py_DECREF(text);
}

// A shared_ptr that keeps a Python object alive for as long as a qkv::Tensor views its
// memory. The last reference can be dropped while the GIL is released (or, in principle,
// on a worker thread), so the deleter takes the GIL itself.
std::shared_ptr<void> keep_alive(py::object object) {
  auto* held = new py::object(std::move(object));
  return std::shared_ptr<void>(held, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
}

std::string dtype_string(const py::dtype& dtype) {
  return static_cast<std::string>(py::str(py::handle(dtype)));
}

// A zero-copy qkv::Tensor view of a NumPy array.
//   name: the argument's name, for error messages ("query", "attn_mask", ...)
//   bf16_bits: the array holds bf16 bit patterns as int16 (or uint16)
qkv::Tensor tensor_from_array(const py::array& array, const std::string& name, bool bf16_bits) {
  const py::dtype dtype = array.dtype();
  const char kind = dtype.kind();
  const auto itemsize = static_cast<std::int64_t>(dtype.itemsize());
  qkv::DType qdtype = qkv::DType::f32;
  if (bf16_bits) {
    QKV_CHECK_TYPE((kind == 'i' || kind == 'u') && itemsize == 2,
                   name << ": bf16 data must arrive as 16-bit integer bits, got dtype "
                        << dtype_string(dtype));
    qdtype = qkv::DType::bf16;
  } else if (kind == 'f' && itemsize == 4) {
    qdtype = qkv::DType::f32;
  } else if (kind == 'f' && itemsize == 2) {
    qdtype = qkv::DType::f16;
  } else if (kind == 'f' && itemsize == 8) {
    qdtype = qkv::DType::f64;  // computed in double by the reference attention; layers refuse it
  } else if (kind == 'b' && itemsize == 1) {
    qdtype = qkv::DType::boolean;
  } else {
    QKV_CHECK_TYPE(false, name << ": unsupported dtype " << dtype_string(dtype)
                               << "; expected float32, float64, float16, bfloat16 (or bool for a mask)");
  }
  QKV_CHECK(dtype.attr("isnative").cast<bool>(),
            name << ": the array must be in native byte order, got dtype "
                 << dtype_string(dtype) << " (use .astype(dtype.newbyteorder('=')))");

  qkv::Shape shape(static_cast<std::size_t>(array.ndim()));
  qkv::Strides strides(shape.size());
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    const auto byte_stride = static_cast<std::int64_t>(array.strides(d));
    shape[d] = static_cast<std::int64_t>(array.shape(d));
    QKV_CHECK(byte_stride >= 0 && byte_stride % itemsize == 0,
              name << ": stride " << byte_stride << " bytes of dimension " << d
                   << " must be a non-negative multiple of the item size " << itemsize
                   << " (pass a contiguous copy)");
    strides[d] = byte_stride / itemsize;
  }
  QKV_CHECK(reinterpret_cast<std::uintptr_t>(array.data()) % static_cast<std::uintptr_t>(itemsize) == 0,
            name << ": the array's data is not aligned to its item size (pass a contiguous copy)");
  return qkv::Tensor::from_blob(const_cast<void*>(array.data()), shape, strides, qdtype,
                                keep_alive(array));
}

py::dtype numpy_dtype(qkv::DType dtype) {
  switch (dtype) {
    case qkv::DType::f32: return py::dtype::of<float>();
    case qkv::DType::f16: return py::dtype("float16");
    case qkv::DType::bf16: return py::dtype::of<std::int16_t>();  // bits; see the file comment
    case qkv::DType::boolean: return py::dtype::of<bool>();
    case qkv::DType::f64: return py::dtype::of<double>();
  }
  return py::dtype::of<float>();  // unreachable
}

// A zero-copy NumPy array over a qkv::Tensor (bf16 comes back as int16 bits).
py::array array_from_tensor(const qkv::Tensor& tensor) {
  const py::dtype dtype = numpy_dtype(tensor.dtype());
  const auto itemsize = static_cast<py::ssize_t>(qkv::dtype_size(tensor.dtype()));
  std::vector<py::ssize_t> shape, strides;
  for (std::int64_t d = 0; d < tensor.dim(); ++d) {
    shape.push_back(static_cast<py::ssize_t>(tensor.size(d)));
    strides.push_back(static_cast<py::ssize_t>(tensor.stride(d)) * itemsize);
  }
  auto* held = new qkv::Tensor(tensor);
  py::capsule owner(held, [](void* p) { delete static_cast<qkv::Tensor*>(p); });
  return py::array(dtype, shape, strides, held->data(), owner);
}

py::object optional_array(const qkv::Tensor& tensor) {
  return tensor.defined() ? py::object(array_from_tensor(tensor)) : py::object(py::none());
}

qkv::Alignment parse_alignment(const std::string& alignment) {
  if (alignment == "top_left") return qkv::Alignment::top_left;
  if (alignment == "bottom_right") return qkv::Alignment::bottom_right;
  QKV_CHECK(false, "causal_alignment: expected 'top_left' or 'bottom_right', got '" << alignment
                                                                                     << "'");
  return qkv::Alignment::top_left;  // unreachable
}

qkv::AttentionImpl parse_impl(const std::string& impl) {
  if (impl == "automatic") return qkv::AttentionImpl::automatic;
  if (impl == "reference") return qkv::AttentionImpl::reference;
  if (impl == "fast") return qkv::AttentionImpl::fast;
  QKV_CHECK(false, "impl: expected 'automatic', 'reference' or 'fast', got '" << impl << "'");
  return qkv::AttentionImpl::automatic;  // unreachable
}

// The options both attention bindings take, as qkv::AttentionOptions.
qkv::AttentionOptions make_options(std::optional<qkv::Tensor> mask, std::optional<double> scale,
                                   bool causal, const std::string& alignment,
                                   std::vector<std::int64_t> key_lengths,
                                   std::optional<std::pair<std::int64_t, std::int64_t>> window,
                                   std::vector<float> alibi_slopes, std::optional<double> softcap,
                                   double dropout_p, std::uint64_t seed, const std::string& impl) {
  qkv::AttentionOptions options;
  options.scale = scale;
  options.causal = causal;
  options.alignment = parse_alignment(alignment);
  if (mask) options.mask = *mask;
  options.key_lengths = std::move(key_lengths);
  if (window) options.window = qkv::Window{window->first, window->second};
  options.alibi_slopes = std::move(alibi_slopes);
  options.softcap = softcap;
  options.dropout_p = dropout_p;
  options.seed = seed;
  options.impl = parse_impl(impl);
  return options;
}

// Whether an attention call is long enough to run interruptibly (interruptible.h): its
// multiply-adds B·Hq·Lq·Lk·(Dk + Dv) times `factor` (the backward's are 2.5 times the
// forward's), 32 times more on the reference path, which is about that much slower.
bool long_attention(const qkv::Tensor& q, const qkv::Tensor& k, const qkv::Tensor& v,
                    const qkv::AttentionOptions& options, double factor) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;  // an error, raised by the call
  double work = factor;
  for (double size : {q.size(0), q.size(1), q.size(2), k.size(2)}) work *= size;
  work *= static_cast<double>(q.size(3) + v.size(3));
  const bool reference = options.impl == qkv::AttentionImpl::reference || options.return_probs;
  return qkv::python::long_call(reference ? 32.0 * work : work);
}

// The whole of qkv::attention: q, k, v, mask are tensors made by _Tensor.from_array.
py::tuple attention(const qkv::Tensor& q, const qkv::Tensor& k, const qkv::Tensor& v,
                    std::optional<qkv::Tensor> mask, std::optional<double> scale, bool causal,
                    const std::string& alignment, std::vector<std::int64_t> key_lengths,
                    std::optional<std::pair<std::int64_t, std::int64_t>> window,
                    std::vector<float> alibi_slopes, std::optional<double> softcap,
                    double dropout_p, std::uint64_t seed, bool return_lse, bool return_probs,
                    const std::string& impl) {
  qkv::AttentionOptions options =
      make_options(std::move(mask), scale, causal, alignment, std::move(key_lengths), window,
                   std::move(alibi_slopes), softcap, dropout_p, seed, impl);
  options.return_lse = return_lse;
  options.return_probs = return_probs;

  const qkv::AttentionResult result =
      qkv::python::interruptible(long_attention(q, k, v, options, 1.0), [&] { return qkv::attention(q, k, v, options); });
  return py::make_tuple(array_from_tensor(result.out), optional_array(result.lse),
                        optional_array(result.probs));
}

// qkv::attention_backward: dout, q, k, v, out, lse and mask are _Tensor views; the options
// are the forward's. Returns (dq, dk, dv), float32 (float64 for float64 inputs).
py::tuple attention_backward(const qkv::Tensor& dout, const qkv::Tensor& q, const qkv::Tensor& k,
                             const qkv::Tensor& v, const qkv::Tensor& out, const qkv::Tensor& lse,
                             std::optional<qkv::Tensor> mask, std::optional<double> scale,
                             bool causal, const std::string& alignment,
                             std::vector<std::int64_t> key_lengths,
                             std::optional<std::pair<std::int64_t, std::int64_t>> window,
                             std::vector<float> alibi_slopes, std::optional<double> softcap,
                             double dropout_p, std::uint64_t seed, const std::string& impl) {
  const qkv::AttentionOptions options =
      make_options(std::move(mask), scale, causal, alignment, std::move(key_lengths), window,
                   std::move(alibi_slopes), softcap, dropout_p, seed, impl);
  const qkv::AttentionGradients grads = qkv::python::interruptible(
      long_attention(q, k, v, options, 2.5), [&] { return qkv::attention_backward(dout, q, k, v, out, lse, options); });
  return py::make_tuple(array_from_tensor(grads.dq), array_from_tensor(grads.dk),
                        array_from_tensor(grads.dv));
}

py::array self_attention_raw(const qkv::Tensor& x, std::optional<double> scale) {
  const bool batched = x.dim() == 3;
  const double L = x.dim() >= 2 ? static_cast<double>(x.size(batched ? 1 : 0)) : 0.0;
  const double work = (batched ? static_cast<double>(x.size(0)) : 1.0) * L * L * 2.0 * static_cast<double>(x.dim() >= 1 ? x.size(-1) : 0);
  const qkv::Tensor out =
      qkv::python::interruptible(qkv::python::long_call(work), [&] { return qkv::self_attention_raw(x, scale); });
  return array_from_tensor(out);
}

}  // namespace

PYBIND11_MODULE(_qkv, m) {
  m.doc() =
      "The compiled core of the `qkv` module. Use the functions of `qkv` itself; these "
      "take pre-converted NumPy buffers and are not a stable interface.";

  // qkv::Error carries its Python type in kind(); registered first-come, so this wins
  // over pybind11's generic std::exception -> RuntimeError.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const qkv::Error& e) {
      PyObject* type = PyExc_ValueError;
      switch (e.kind()) {
        case qkv::ErrorKind::value: type = PyExc_ValueError; break;
        case qkv::ErrorKind::type: type = PyExc_TypeError; break;
        case qkv::ErrorKind::memory: type = PyExc_MemoryError; break;
        case qkv::ErrorKind::interrupted: type = PyExc_KeyboardInterrupt; break;
      }
      set_python_error(type, e.what());
    } catch (const std::bad_alloc&) {
      // Thrown where no binding could say more (bindings_common.h's guard does); what()
      // is only the type's name.
      set_python_error(PyExc_MemoryError, "qkv: out of memory: an allocation failed");
    } catch (const std::length_error& e) {
      set_python_error(PyExc_MemoryError,
                       std::string("qkv: out of memory: a container was asked for more than "
                                   "it can hold (") + e.what() + ")");
    }
  });

  m.attr("__version__") = qkv::kVersion;
  qkv::python::init_interruptible();

  py::class_<qkv::Tensor>(m, "_Tensor",
                          "A qkv::Tensor: a strided view over memory (here, usually a NumPy "
                          "array's, kept alive by the view).")
      .def_static("from_array", &tensor_from_array, py::arg("array"), py::arg("name"),
                  py::arg("bf16_bits") = false,
                  "A zero-copy view of a NumPy array (float32, float64, float16, bool, or "
                  "bf16 bits as int16 with bf16_bits=True). `name` is the argument name used "
                  "in error messages. Raises TypeError for other dtypes and ValueError for "
                  "negative or unaligned strides. float64 is computed in double by "
                  "_attention/_attention_backward with impl 'reference' or 'automatic'; "
                  "impl 'fast' and the layers raise TypeError for it.")
      .def("to_array", &array_from_tensor,
           "A zero-copy NumPy array over this tensor (bf16 comes back as int16 bits).")
      .def_property_readonly(
          "dtype", [](const qkv::Tensor& t) { return std::string(qkv::dtype_name(t.dtype())); },
          "'f32', 'bf16', 'f16', 'f64' or 'bool'.")
      .def_property_readonly(
          "shape", [](const qkv::Tensor& t) { return py::tuple(py::cast(t.shape())); },
          "The shape as a tuple.")
      .def("__repr__", [](const qkv::Tensor& t) {
        return "_Tensor(shape=" + t.shape_string() + ", dtype=" + qkv::dtype_name(t.dtype()) + ")";
      });

  m.def("_attention", &attention, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask"),
        py::arg("scale"), py::arg("causal"), py::arg("alignment"), py::arg("key_lengths"),
        py::arg("window"), py::arg("alibi_slopes"), py::arg("softcap"), py::arg("dropout_p"),
        py::arg("seed"), py::arg("return_lse"), py::arg("return_probs"),
        py::arg("impl") = "automatic",
        "qkv::attention on 4-d _Tensor views: returns (out, lse or None, probs or None) as "
        "NumPy arrays (lse and probs float32, or float64 for float64 q, k, v). window is "
        "(left, right) with -1 for unbounded. Releases the GIL.");

  m.def("_attention_backward", &attention_backward, py::arg("dout"), py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("out"), py::arg("lse"), py::arg("mask"), py::arg("scale"),
        py::arg("causal"), py::arg("alignment"), py::arg("key_lengths"), py::arg("window"),
        py::arg("alibi_slopes"), py::arg("softcap"), py::arg("dropout_p"), py::arg("seed"),
        py::arg("impl") = "automatic",
        "qkv::attention_backward on 4-d _Tensor views (out and lse from _attention with the "
        "same options): returns (dq, dk, dv) as float32 NumPy arrays, or float64 for "
        "float64 inputs (dout, q, k, v, out and lse all float64). Releases the GIL.");

  m.def("_self_attention_raw", &self_attention_raw, py::arg("x"), py::arg("scale"),
        "qkv::self_attention_raw on a _Tensor view: softmax(scale * x @ x^T) @ x as a NumPy "
        "array. scale=None means 1/sqrt(D). Releases the GIL.");

  m.def("cpu_summary", &qkv::cpu_summary,
        "One line: the CPU's brand and the instruction-set features qkv detected "
        "(AVX2, FMA, F16C, AVX-512 ..., AMX) and dispatches on.");
  m.def("set_num_threads", &qkv::set_num_threads, py::arg("n"),
        "Sets the number of threads qkv's parallel loops use (n >= 1, else ValueError). "
        "Results are identical for every thread count.");
  m.def("get_num_threads", &qkv::num_threads,
        "The number of threads qkv's parallel loops use: set_num_threads's value, else "
        "the environment variable QKV_NUM_THREADS, else OMP_NUM_THREADS, else the CPUs this "
        "process may run on.");
  m.def("_storage_cache_limit", &qkv::storage_cache_limit);
  m.def("_set_storage_cache_limit", &qkv::set_storage_cache_limit, py::arg("nbytes"));
  m.def("_cached_storage_bytes", &qkv::cached_storage_bytes);
  m.def("_release_cached_storage", &qkv::release_cached_storage);
  m.def("_memory_limit", &qkv::memory_limit);
  m.def("_set_memory_limit", [](std::optional<std::size_t> bytes) {
    if (bytes) qkv::set_memory_limit(*bytes); else qkv::reset_memory_limit();
  }, py::arg("nbytes"));
  m.def("_default_memory_limit", &qkv::default_memory_limit);
  qkv::apps::register_model_types();  // the registry's application types (qkv.load_model)
  register_nn(m);
  register_models(m);
  register_train(m);
  register_dates(m);
  register_language_model(m);
  register_search(m);
  register_recommender(m);
  register_vision(m);
  register_point(m);
}
