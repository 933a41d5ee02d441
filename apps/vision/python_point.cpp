// Bindings of the Point Transformer classifier (qkv/point_transformer.h) for its torch twin
// in tests/python/test_point_transformer.py: the sampling of images into points, initial
// weights, the forward and the backward with every gradient.
//
// A model is a config dict plus a weights dict (name -> array), as for the ViT
// (python.cpp): config keys are PointTransformerConfig's fields, a missing key
// takes the header's default, an unknown one is an error. Points and dlogits must be
// float32 (qkv computes in float32; a float64 array converted silently would hide where
// the precision went); weights may be any floating dtype and are rounded to float32;
// pixels must be uint8 (H, W) or (B, H, W), as the image files hold them.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <iterator>
#include <span>
#include <string>

#include "bindings_arrays.h"
#include "bindings_training.h"
#include "qkv/error.h"
#include "qkv/point_transformer.h"

namespace py = pybind11;
namespace models = qkv::models;

namespace {

using qkv_python::F32Array;
using qkv_python::to_numpy;
using qkv_python::shape_string;
using qkv_python::type_name;
using qkv_python::U8Array;
using qkv_python::f32_tensor;

// config dict -> PointTransformerConfig, checked.
models::PointTransformerConfig point_config(const py::dict& d) {
  models::PointTransformerConfig c;
  std::int64_t* ints[] = {&c.points,         &c.patch_size,          &c.neighbors,   &c.dim,    &c.blocks,
                          &c.pos_mlp_hidden, &c.attn_mlp_hidden_mult, &c.head_hidden, &c.classes};
  const char* names[] = {"points",         "patch_size",           "neighbors",   "dim",     "blocks",
                         "pos_mlp_hidden", "attn_mlp_hidden_mult", "head_hidden", "classes"};
  for (const auto& [key, value] : d) {
    QKV_CHECK_TYPE(py::isinstance<py::str>(key), "point transformer config: keys must be str, got " << type_name(key));
    const std::string k = key.cast<std::string>();
    bool known = false;
    for (std::size_t i = 0; i < std::size(names); ++i) {
      if (k != names[i]) continue;
      QKV_CHECK_TYPE(PyIndex_Check(value.ptr()) && !PyBool_Check(value.ptr()),
                     "point transformer config: " << k << " must be an int, got " << type_name(value));
      *ints[i] = value.cast<std::int64_t>();
      known = true;
    }
    QKV_CHECK(known, "point transformer config: unknown key '"
                         << k << "'; expected points, patch_size, neighbors, dim, blocks, pos_mlp_hidden, "
                                 "attn_mlp_hidden_mult, head_hidden, classes");
  }
  c.check();
  return c;
}

models::PointTransformerWeights point_weights(const py::dict& weights, const models::PointTransformerConfig& c) {
  for (const auto& [key, value] : weights) {
    QKV_CHECK_TYPE(py::isinstance<py::str>(key), "point transformer weights: keys must be str, got " << type_name(key));
    QKV_CHECK_TYPE(py::isinstance<py::array>(value) &&
                       py::reinterpret_borrow<py::array>(value).dtype().kind() == 'f',
                   "point transformer weights: '" << key.cast<std::string>()
                                                  << "' must be a floating numpy.ndarray, got " << type_name(value));
  }
  models::PointTransformerWeights w = models::PointTransformerWeights::zeros_like(c);
  try {
    qkv::nn::load_state_dict(w.parameters(), qkv_python::state_dict_from(weights));
  } catch (const qkv::Error& e) {
    throw qkv::Error(std::string("point transformer weights: ") + e.what(), e.kind());
  }
  return w;
}

py::dict weights_dict(models::PointTransformerWeights& w) {
  py::dict out;
  for (auto& [name, t] : w.parameters()) out[py::str(name)] = to_numpy(*t);
  return out;
}

}  // namespace

void register_point(py::module_& m) {
  m.def(
      "_pt_image_to_points",
      [](const py::handle& pixels, std::int64_t points, std::uint64_t seed, std::uint64_t counter,
         std::int64_t patch_size) {
        const U8Array p = qkv_python::u8_pixels(pixels, "image_to_points: pixels", 2, "(H, W)");
        return to_numpy(models::image_to_points(std::span<const std::uint8_t>(p.data(), static_cast<std::size_t>(p.size())),
                                                p.shape(0), p.shape(1), points, seed, counter, patch_size));
      },
      py::arg("pixels"), py::arg("points"), py::arg("seed"), py::arg("counter"), py::arg("patch_size") = 1,
      "uint8 (H, W) -> (N, 2 + S²) float32 points (x, y, the S × S window of intensities; S = patch_size).");

  m.def(
      "_pt_images_to_points",
      [](const py::handle& pixels, std::int64_t points, std::uint64_t seed, std::uint64_t first_counter,
         std::int64_t patch_size) {
        const U8Array p = qkv_python::u8_pixels(pixels, "images_to_points: pixels", 3, "(B, H, W)");
        return to_numpy(models::images_to_points(std::span<const std::uint8_t>(p.data(), static_cast<std::size_t>(p.size())),
                                                 p.shape(0), p.shape(1), p.shape(2), points, seed, first_counter,
                                                 patch_size));
      },
      py::arg("pixels"), py::arg("points"), py::arg("seed"), py::arg("first_counter") = 0, py::arg("patch_size") = 1,
      "uint8 (B, H, W) -> (B, N, 2 + S²) float32; image b drawn with counter first_counter + b.");

  m.def(
      "_pt_initial",
      [](const py::dict& config, std::uint64_t seed) {
        const models::PointTransformerConfig c = point_config(config);
        models::PointTransformerWeights w = models::PointTransformerWeights::initialized(c, seed);
        return weights_dict(w);
      },
      py::arg("config"), py::arg("seed"), "PointTransformerWeights::initialized as name -> float32 array.");

  m.def(
      "_pt_forward",
      [](const py::dict& config, const py::dict& weights, const py::handle& points) {
        const models::PointTransformerConfig c = point_config(config);
        const models::PointTransformerWeights w = point_weights(weights, c);
        const qkv::Tensor x = f32_tensor(points, "point transformer forward: points", 3, "(B, N, 2 + S²)");
        qkv::Tensor logits;
        {
          py::gil_scoped_release release;
          logits = w.forward(x);
        }
        return to_numpy(logits);
      },
      py::arg("config"), py::arg("weights"), py::arg("points"), "logits (B, classes).");

  m.def(
      "_pt_backward",
      [](const py::dict& config, const py::dict& weights, const py::handle& points, const py::handle& dlogits) {
        const models::PointTransformerConfig c = point_config(config);
        const models::PointTransformerWeights w = point_weights(weights, c);
        const qkv::Tensor x = f32_tensor(points, "point transformer backward: points", 3, "(B, N, 2 + S²)");
        const qkv::Tensor dy = f32_tensor(dlogits, "point transformer backward: dlogits", 2, "(B, classes)");
        models::PointTransformerWeights grads = models::PointTransformerWeights::zeros_like(c);
        {
          py::gil_scoped_release release;
          models::PointTransformerWeights::Record record;
          (void)w.forward(x, &record);
          w.backward(dy, record, grads);
        }
        return weights_dict(grads);
      },
      py::arg("config"), py::arg("weights"), py::arg("points"), py::arg("dlogits"),
      "name -> ∂(Σ dlogits·logits)/∂θ for every parameter, float32 (the points get none).");
}
