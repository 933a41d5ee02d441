// Bindings of the Vision Transformer (qkv/vit.h) for its torch twin
// (scripts/bench/vit_torch.py) and the tests: initial weights, the forward with each block's
// attention probabilities, the backward with every gradient, and the pieces the model is
// made of (patchify, the sine-cosine table, attention rollout). And, behind the pure-Python
// qkv.vision, the Fashion-MNIST task (vision/vision.h): the image and label files as NumPy
// arrays, the training batches (a pure function of seed, epoch and step, so a twin can be
// fed the same ones), training with a progress callback, and a trained model's predictions.
//
// A model is a config dict plus a weights dict (name -> array, the twin's names). Config
// keys are VitConfig's fields; a missing key takes vit.h's default, an unknown one is an
// error (a misspelt key would otherwise silently take the default). Arrays cross as NumPy
// copies. Data (images, dlogits, probabilities) must be float32: qkv computes in float32,
// and a float64 array converted silently would hide where the precision went. Weights may
// be any floating dtype (a float64 twin's state dict) and are rounded to float32. Pixels
// must be uint8 (N, H, W), as the files hold them: a float image has no one right way back
// to pixels (0..1 or 0..255?), so it is a TypeError, not a guess.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>


#include <algorithm>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bindings_arrays.h"
#include "bindings_options.h"
#include "bindings_training.h"
#include "qkv/error.h"
#include "vision/vision.h"
#include "qkv/vit.h"

namespace py = pybind11;
namespace models = qkv::models;
namespace vision = qkv::vision;

namespace {

using qkv_python::F32Array;
using qkv_python::to_numpy;

using qkv_python::shape_string;
using qkv_python::type_name;
using qkv_python::f32_tensor;

// config dict -> VitConfig, checked (VitConfig::check names the field out of range).
models::VitConfig vit_config(const py::dict& d) {
  models::VitConfig c;
  std::int64_t* ints[] = {&c.image_size, &c.channels, &c.patch_size, &c.dim,
                          &c.layers,     &c.heads,    &c.mlp_dim,    &c.classes};
  const char* names[] = {"image_size", "channels", "patch_size", "dim", "layers", "heads", "mlp_dim", "classes"};
  for (const auto& [key, value] : d) {
    QKV_CHECK_TYPE(py::isinstance<py::str>(key), "vit config: keys must be str, got " << type_name(key));
    const std::string k = key.cast<std::string>();
    if (k == "learned_positions" || k == "shifted_patches") {
      QKV_CHECK_TYPE(PyBool_Check(value.ptr()) || py::isinstance(value, py::module_::import("numpy").attr("bool_")),
                     "vit config: " << k << " must be a bool, got " << type_name(value));
      (k == "learned_positions" ? c.learned_positions : c.shifted_patches) = value.cast<bool>();
      continue;
    }
    bool known = false;
    for (std::size_t i = 0; i < std::size(names); ++i) {
      if (k != names[i]) continue;
      // PyIndex_Check: int and NumPy's integers; bool is an int but never a size.
      QKV_CHECK_TYPE(PyIndex_Check(value.ptr()) && !PyBool_Check(value.ptr()),
                     "vit config: " << k << " must be an int, got " << type_name(value));
      *ints[i] = value.cast<std::int64_t>();
      known = true;
    }
    QKV_CHECK(known, "vit config: unknown key '" << k
                                                 << "'; expected image_size, channels, patch_size, dim, layers, "
                                                    "heads, mlp_dim, classes, learned_positions, shifted_patches");
  }
  c.check();
  return c;
}

// name -> array into a model of config c: every parameter of c present, with its shape,
// and nothing else (sincos positions are not a parameter: no 'pos_embed').
models::VitWeights vit_weights(const py::dict& weights, const models::VitConfig& c) {
  qkv::nn::StateDict state;
  for (const auto& [key, value] : weights) {
    QKV_CHECK_TYPE(py::isinstance<py::str>(key), "vit weights: keys must be str, got " << type_name(key));
    const std::string name = key.cast<std::string>();
    QKV_CHECK_TYPE(py::isinstance<py::array>(value),
                   "vit weights: '" << name << "' must be a numpy.ndarray, got " << type_name(value));
    const auto a = py::reinterpret_borrow<py::array>(value);
    QKV_CHECK_TYPE(a.dtype().kind() == 'f', "vit weights: '" << name << "' must be floating, got dtype "
                                                             << static_cast<std::string>(py::str(a.dtype())));
    const F32Array f = F32Array::ensure(a);  // rounded to float32 when it was not
    const qkv::Shape shape(f.shape(), f.shape() + f.ndim());
    state[name] = qkv::Tensor::from_vector(shape, std::span<const float>(f.data(), static_cast<std::size_t>(f.size())));
  }
  models::VitWeights w = models::VitWeights::zeros_like(c);
  try {
    qkv::nn::load_state_dict(w.parameters(), state);
  } catch (const qkv::Error& e) {
    throw qkv::Error(std::string("vit weights: ") + e.what(), e.kind());
  }
  return w;
}

py::dict weights_dict(models::VitWeights& w) {
  py::dict out;
  for (auto& [name, t] : w.parameters()) out[py::str(name)] = to_numpy(*t);
  return out;
}

// ---------------------------------------------------------------------------------------
// The Fashion-MNIST task.

using qkv_python::U8Array;
using qkv_python::IdArray;

std::string dtype_string(const py::array& a) { return py::str(a.dtype()); }

// pixels, a uint8 (N, H, W) array -> Images (a copy, no labels).
vision::Images images_from(const py::handle& obj, const std::string& name) {
  const U8Array c = qkv_python::u8_pixels(obj, name, 3, "(N, H, W)");
  vision::Images im;
  im.count = c.shape(0);
  im.height = c.shape(1);
  im.width = c.shape(2);
  im.pixels.assign(c.data(), c.data() + c.size());
  return im;
}

// labels, an integer (count) array -> int64 values.
std::vector<std::int64_t> labels_from(const py::handle& obj, const std::string& name, std::int64_t count) {
  QKV_CHECK_TYPE(py::isinstance<py::array>(obj),
                 name << ": expected a numpy.ndarray of integer labels (N,), got " << type_name(obj));
  const auto a = py::reinterpret_borrow<py::array>(obj);
  QKV_CHECK_TYPE(a.dtype().kind() == 'i' || a.dtype().kind() == 'u',
                 name << ": expected an integer dtype (int64), got " << dtype_string(a));
  QKV_CHECK(a.ndim() == 1 && a.shape(0) == count,
            name << ": expected (" << count << ",), one label per image, got shape " << shape_string(a));
  const IdArray c = IdArray::ensure(a);
  return std::vector<std::int64_t>(c.data(), c.data() + c.size());
}

// kept, None or a (B, K) integer array -> patch dropout's indices (empty for None); their
// range and distinctness are VitWeights::forward's to check.
std::vector<std::int64_t> kept_from(const py::handle& obj, const std::string& name, std::int64_t B) {
  if (obj.is_none()) return {};
  QKV_CHECK_TYPE(py::isinstance<py::array>(obj),
                 name << ": expected None or a numpy.ndarray of patch indices (B, K), got " << type_name(obj));
  const auto a = py::reinterpret_borrow<py::array>(obj);
  QKV_CHECK_TYPE(a.dtype().kind() == 'i' || a.dtype().kind() == 'u',
                 name << ": expected an integer dtype (int64), got " << dtype_string(a));
  QKV_CHECK(a.ndim() == 2 && a.shape(0) == B && a.shape(1) >= 1,
            name << ": expected (" << B << ", K) with K >= 1, got shape " << shape_string(a));
  const IdArray c = IdArray::ensure(a);
  return std::vector<std::int64_t>(c.data(), c.data() + c.size());
}

template <class T>
py::array_t<T> array_of(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
  py::array_t<T> a(shape);
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

py::array_t<std::uint8_t> pixels_array(const vision::Images& im) {
  return array_of(im.pixels, {static_cast<py::ssize_t>(im.count), static_cast<py::ssize_t>(im.height),
                              static_cast<py::ssize_t>(im.width)});
}

py::dict images_dict(const vision::Images& im) {
  py::dict d;
  d["images"] = pixels_array(im);
  d["labels"] = array_of(im.labels, {static_cast<py::ssize_t>(im.labels.size())});
  return d;
}

py::dict point_config_dict(const models::PointTransformerConfig& c) {
  py::dict d;
  d["points"] = c.points;
  d["patch_size"] = c.patch_size;
  d["neighbors"] = c.neighbors;
  d["dim"] = c.dim;
  d["blocks"] = c.blocks;
  d["pos_mlp_hidden"] = c.pos_mlp_hidden;
  d["attn_mlp_hidden_mult"] = c.attn_mlp_hidden_mult;
  d["head_hidden"] = c.head_hidden;
  d["classes"] = c.classes;
  return d;
}

py::dict config_dict(const models::VitConfig& c) {
  py::dict d;
  d["image_size"] = c.image_size;
  d["channels"] = c.channels;
  d["patch_size"] = c.patch_size;
  d["dim"] = c.dim;
  d["layers"] = c.layers;
  d["heads"] = c.heads;
  d["mlp_dim"] = c.mlp_dim;
  d["classes"] = c.classes;
  d["learned_positions"] = c.learned_positions;
  d["shifted_patches"] = c.shifted_patches;
  return d;
}

vision::Augmentation augmentation(std::int64_t pad, bool flip, double erase) {
  QKV_CHECK(pad >= 0 && pad <= 1024, "training batch: pad must be in [0, 1024], got " << pad);
  QKV_CHECK(erase >= 0.0 && erase <= 1.0, "training batch: erase must be in [0, 1], got " << erase);
  return vision::Augmentation{pad, flip, erase};
}

py::tuple batch_tuple(const vision::Batch& b) {
  const py::ssize_t B = static_cast<py::ssize_t>(b.labels.size());
  return py::make_tuple(to_numpy(b.images), array_of(b.labels, {B}), array_of(b.indices, {B}));
}

// A training set held once, for a twin that asks for every batch of a run.
class Batches {
 public:
  Batches(const py::handle& pixels, const py::handle& labels)
      : train_(images_from(pixels, "training batches: images")) {
    train_.labels = labels_from(labels, "training batches: labels", train_.count);
    QKV_CHECK(train_.count >= 1, "training batches: no images");
  }
  std::int64_t steps_per_epoch(std::int64_t batch) const {
    QKV_CHECK(batch >= 1, "training batches: batch must be >= 1, got " << batch);
    return vision::steps_per_epoch(train_.count, batch);
  }
  py::tuple get(std::uint64_t seed, std::int64_t epoch, std::int64_t step, std::int64_t batch, std::int64_t pad,
                bool flip, double erase) const {
    QKV_CHECK(epoch >= 0, "training batches: epoch must be >= 0, got " << epoch);
    const vision::Augmentation aug = augmentation(pad, flip, erase);
    vision::Batch b;
    {
      py::gil_scoped_release release;
      b = vision::training_batch(train_, seed, epoch, step, batch, aug);
    }
    return batch_tuple(b);
  }
  // Patch dropout's draw for batch (epoch, step), as train_vision makes it from the batch's
  // seed: (B, K) patch indices of [0, patches), K = patches_kept(patches, patch_dropout);
  // None when every patch is kept.
  py::object kept(std::uint64_t seed, std::int64_t epoch, std::int64_t step, std::int64_t batch,
                  std::int64_t patches, double patch_dropout) const {
    QKV_CHECK(epoch >= 0, "training batches: epoch must be >= 0, got " << epoch);
    const vision::Batch b = vision::training_batch_without_images(train_, seed, epoch, step, batch);
    const std::int64_t keep = models::patches_kept(patches, patch_dropout);
    if (keep == patches) return py::none();
    const auto B = static_cast<std::int64_t>(b.indices.size());
    return array_of(models::random_patches(B, patches, keep, b.seed),
                    {static_cast<py::ssize_t>(B), static_cast<py::ssize_t>(keep)});
  }

 private:
  vision::Images train_;
};

}  // namespace

void register_vision(py::module_& m) {
  qkv_python::def_options(m, vision::classify_options());  // Classifier.classify, predict, predict_proba
  m.def(
      "_vit_initial",
      [](const py::dict& config, std::uint64_t seed) {
        const models::VitConfig c = vit_config(config);
        models::VitWeights w;
        {
          py::gil_scoped_release release;
          w = models::VitWeights::initialized(c, seed);
        }
        return weights_dict(w);
      },
      py::arg("config"), py::arg("seed"),
      "VitWeights::initialized(config, seed) as name -> float32 array (the twin's names).");

  m.def(
      "_vit_forward",
      [](const py::dict& config, const py::dict& weights, const py::handle& images, bool probs,
         const py::handle& kept) -> py::object {
        const models::VitConfig c = vit_config(config);
        const models::VitWeights w = vit_weights(weights, c);
        const qkv::Tensor x = f32_tensor(images, "vit forward: images", 4, "(B, C, H, W)");
        const std::vector<std::int64_t> k = kept_from(kept, "vit forward: kept", x.size(0));
        qkv::Tensor logits;
        std::vector<qkv::Tensor> p;
        {
          py::gil_scoped_release release;
          logits = w.forward(x, probs ? &p : nullptr, nullptr, k);
        }
        if (!probs) return to_numpy(logits);
        py::list layers;
        for (const qkv::Tensor& t : p) layers.append(to_numpy(t));
        return py::make_tuple(to_numpy(logits), layers);
      },
      py::arg("config"), py::arg("weights"), py::arg("images"), py::arg("probs") = false,
      py::arg("kept") = py::none(),
      "logits (B, classes); with probs=True (logits, [each block's attention probabilities "
      "(B, heads, 1 + K, 1 + K)]). kept: None (every patch, K = N) or patch dropout's (B, K) "
      "integer patch indices, each row distinct, in [0, N).");

  m.def(
      "_vit_backward",
      [](const py::dict& config, const py::dict& weights, const py::handle& images, const py::handle& dlogits,
         const py::handle& kept) {
        const models::VitConfig c = vit_config(config);
        const models::VitWeights w = vit_weights(weights, c);
        const qkv::Tensor x = f32_tensor(images, "vit backward: images", 4, "(B, C, H, W)");
        const qkv::Tensor dy = f32_tensor(dlogits, "vit backward: dlogits", 2, "(B, classes)");
        QKV_CHECK(dy.size(0) == x.size(0) && dy.size(1) == c.classes,
                  "vit backward: dlogits must be (B, classes) = (" << x.size(0) << ", " << c.classes << "), got "
                                                                   << dy.shape_string());
        const std::vector<std::int64_t> k = kept_from(kept, "vit backward: kept", x.size(0));
        models::VitWeights grads = models::VitWeights::zeros_like(c);
        {
          py::gil_scoped_release release;
          models::VitWeights::Record record;
          (void)w.forward(x, nullptr, &record, k);
          w.backward(dy, record, grads);
        }
        return weights_dict(grads);
      },
      py::arg("config"), py::arg("weights"), py::arg("images"), py::arg("dlogits"), py::arg("kept") = py::none(),
      "name -> ∂(Σ dlogits·logits)/∂θ for every parameter, float32 (the images get none); kept as "
      "_vit_forward's.");

  m.def(
      "_vit_random_patches",
      [](std::int64_t B, std::int64_t N, std::int64_t keep, std::uint64_t seed) {
        return array_of(models::random_patches(B, N, keep, seed),
                        {static_cast<py::ssize_t>(B), static_cast<py::ssize_t>(keep)});
      },
      py::arg("B"), py::arg("N"), py::arg("keep"), py::arg("seed"),
      "patch dropout's draw (models::random_patches): (B, keep) int64, each row `keep` distinct "
      "patch indices of [0, N) in ascending order.");

  m.def(
      "_vit_patchify",
      [](const py::handle& images, std::int64_t patch) {
        const qkv::Tensor x = f32_tensor(images, "patchify: images", 4, "(B, C, H, W)");
        return to_numpy(models::patchify(x, patch));
      },
      py::arg("images"), py::arg("patch"), "(B, C, H, W) -> (B, N, C·P·P), features in (c, ky, kx) order.");

  m.def(
      "_vit_sincos_positions",
      [](std::int64_t grid, std::int64_t dim) { return to_numpy(models::sincos_positions_2d(grid, dim)); },
      py::arg("grid"), py::arg("dim"), "The fixed 2-D sine-cosine positions (1 + grid², dim), row 0 zeros.");

  m.def(
      "_vit_rollout",
      [](const py::sequence& probs, std::int64_t b) {
        std::vector<qkv::Tensor> layers;
        for (std::size_t i = 0; i < probs.size(); ++i)
          layers.push_back(f32_tensor(probs[i], "attention_rollout: probs[" + std::to_string(i) + "]", 4,
                                      "(B, heads, T, T)"));
        const std::vector<float> r = models::attention_rollout(layers, b);
        py::array_t<float> out(static_cast<py::ssize_t>(r.size()));
        std::copy(r.begin(), r.end(), out.mutable_data());
        return out;
      },
      py::arg("probs"), py::arg("b"), "Attention rollout of image b: (N) weights over the patches.");

  // ---- the Fashion-MNIST task ----------------------------------------------------------

  m.attr("_vision_pixel_mean") = vision::kPixelMean;
  m.attr("_vision_pixel_std") = vision::kPixelStd;
  {
    py::list names;
    for (const char* n : vision::kFashionMnistClasses) names.append(n);
    m.attr("_vision_classes") = py::tuple(names);
  }

  m.def(
      "_vision_defaults",
      [] {
        const vision::VisionTrainingOptions o;
        py::dict d = config_dict(o.vit);
        d["model"] = o.model;
        d["point"] = point_config_dict(o.point);
        d["epochs"] = o.epochs;
        d["batch"] = o.batch;
        d["lr"] = o.peak_lr;
        d["label_smoothing"] = o.label_smoothing;
        d["seed"] = o.seed;
        d["train_limit"] = o.train_limit;
        d["checkpoint_every"] = o.checkpoint_every;
        d["stop_at"] = o.stop_at;
        d["patience"] = o.patience;
        d["resume"] = o.resume;
        d["bf16"] = o.bf16;
        d["pad"] = o.augment.pad;
        d["flip"] = o.augment.flip;
        d["erase"] = o.augment.erase;
        d["patch_dropout"] = o.patch_dropout;
        d["patch_dropout_epochs"] = o.patch_dropout_epochs;
        return d;
      },
      "VisionTrainingOptions' defaults (its vit config's fields, epochs, batch, lr, ...; "
      "pad, flip and erase: the augmentation of every training batch; patch_dropout).");

  m.def(
      "_vision_read_images",
      [](const std::string& path, std::int64_t height, std::int64_t width) {
        QKV_CHECK(height >= 0 && width >= 0,
                  "read_images: height and width must be >= 0 (0 = any), got " << height << " and " << width);
        vision::Images im;
        {
          py::gil_scoped_release release;
          im = vision::read_images(path, height, width);
        }
        return pixels_array(im);
      },
      py::arg("path"), py::arg("height") = 28, py::arg("width") = 28,
      "vision::read_images: an IDX image file (gzip or plain) or one PNG or PGM image -> uint8 (N, H, W).");

  m.def(
      "_vision_read_labels",
      [](const std::string& path, std::int64_t count, std::int64_t classes) {
        QKV_CHECK(count >= 0, "read_labels: count must be >= 0, got " << count);
        QKV_CHECK(classes >= 1 && classes <= 256, "read_labels: classes must be in [1, 256], got " << classes);
        vision::Images im;
        im.count = count;
        {
          py::gil_scoped_release release;
          vision::read_labels(path, im, static_cast<int>(classes));
        }
        return array_of(im.labels, {static_cast<py::ssize_t>(im.labels.size())});
      },
      py::arg("path"), py::arg("count"), py::arg("classes") = 10,
      "vision::read_labels: an IDX label file of `count` labels in [0, classes) -> int64 (count,).");

  m.def(
      "_vision_load_fashion_mnist",
      [](const std::string& dir, std::int64_t validation) {
        vision::FashionMnist data;
        {
          py::gil_scoped_release release;
          data = vision::load_fashion_mnist(dir, validation);
        }
        py::dict d;
        d["train"] = images_dict(data.train);
        d["validation"] = images_dict(data.validation);
        d["test"] = images_dict(data.test);
        return d;
      },
      py::arg("dir"), py::arg("validation") = 5000,
      "vision::load_fashion_mnist -> {'train', 'validation', 'test'}: each {'images' uint8 (N, 28, 28), "
      "'labels' int64 (N,)}.");

  m.def(
      "_vision_training_batch",
      [](const py::handle& pixels, const py::handle& labels, std::uint64_t seed, std::int64_t epoch,
         std::int64_t step, std::int64_t batch, std::int64_t pad, bool flip, double erase) {
        return Batches(pixels, labels).get(seed, epoch, step, batch, pad, flip, erase);
      },
      py::arg("images"), py::arg("labels"), py::arg("seed"), py::arg("epoch"), py::arg("step"), py::arg("batch"),
      py::arg("pad") = vision::Augmentation{}.pad, py::arg("flip") = vision::Augmentation{}.flip,
      py::arg("erase") = vision::Augmentation{}.erase,
      "vision::training_batch over the training images (uint8 (N, H, W)) and labels (N,) -> "
      "(images float32 (B, 1, H, W), labels int64 (B,), indices int64 (B,) into the images).");

  py::class_<Batches>(m, "_VisionBatches")
      .def(py::init<const py::handle&, const py::handle&>(), py::arg("images"), py::arg("labels"))
      .def("steps_per_epoch", &Batches::steps_per_epoch, py::arg("batch"))
      .def("get", &Batches::get, py::arg("seed"), py::arg("epoch"), py::arg("step"), py::arg("batch"),
           py::arg("pad") = vision::Augmentation{}.pad, py::arg("flip") = vision::Augmentation{}.flip,
           py::arg("erase") = vision::Augmentation{}.erase, "_vision_training_batch over the images given once.")
      .def("kept", &Batches::kept, py::arg("seed"), py::arg("epoch"), py::arg("step"), py::arg("batch"),
           py::arg("patches"), py::arg("patch_dropout"),
           "patch dropout's (B, K) int64 patch indices for batch (epoch, step), as training draws them; "
           "None when every patch is kept.");

  // qkv.train("vit") and qkv.train("point"), from the tasks' one option declaration.
  for (const auto* set : {&vision::vit_training_options(), &vision::point_training_options()})
    qkv_python::def_training(m, *set,
                             [](const vision::VisionTrainingOptions& o, const auto& on_progress, const auto* stop) {
                               return vision::train_vision(o, vision::load_fashion_mnist(o.data), on_progress, stop)
                                   .to_json();
                             });

  py::class_<vision::Classifier>(m, "_VisionClassifier")
      .def(py::init([](const std::string& dir) {
             py::gil_scoped_release release;
             return vision::Classifier::load(dir);
           }),
           py::arg("dir"))
      .def_property_readonly("model", &vision::Classifier::model)
      .def_property_readonly("config",
                             [](const vision::Classifier& c) {
                               return c.model() == "vit" ? config_dict(c.network().vit)
                                                         : point_config_dict(c.network().point);
                             })
      .def_property_readonly("class_names", &vision::Classifier::class_names)
      .def_property_readonly("report",
                             [](const vision::Classifier& c) {
                               return py::module_::import("json").attr("loads")(c.report_json());
                             })
      .def(
          "classify",
          [](const vision::Classifier& c, const py::handle& pixels, std::int64_t batch, bool tta) {
            const vision::Images im = images_from(pixels, "classify: images");
            std::vector<vision::Prediction> p;
            {
              py::gil_scoped_release release;
              p = c.classify(im, batch, tta);
            }
            const py::ssize_t N = static_cast<py::ssize_t>(p.size()), K = c.classes();
            py::array_t<std::int64_t> labels(N);
            py::array_t<float> scores(N), probs({N, K});
            for (py::ssize_t i = 0; i < N; ++i) {
              const vision::Prediction& x = p[static_cast<std::size_t>(i)];
              labels.mutable_at(i) = x.label;
              scores.mutable_at(i) = x.score;
              std::copy(x.probabilities.begin(), x.probabilities.end(), probs.mutable_data(i, 0));
            }
            return py::make_tuple(labels, scores, probs);
          },
          py::arg("images"), py::arg("batch") = 256, py::arg("tta") = false,
          "uint8 (N, H, W) -> (labels int64 (N,), scores float32 (N,), probabilities float32 (N, classes)); "
          "tta: each image's probabilities averaged with its left-right mirror image's.")
      .def(
          "rollout",
          [](const vision::Classifier& c, const py::handle& pixels, std::int64_t i) {
            const vision::Images im = images_from(pixels, "rollout: images");
            std::vector<float> r;
            {
              py::gil_scoped_release release;
              r = c.rollout(im, i);
            }
            const py::ssize_t g = c.network().vit.grid();
            return array_of(r, {g, g});
          },
          py::arg("images"), py::arg("i"),
          "Image i's attention rollout over its patches, float32 (grid, grid), row-major as the patches.")
      .def(
          "attention",
          [](const vision::Classifier& c, const py::handle& pixels, std::int64_t i) {
            const vision::Images im = images_from(pixels, "attention: images");
            vision::Classifier::Attention a;
            {
              py::gil_scoped_release release;
              a = c.attention(im, i);
            }
            py::list layers;
            for (const qkv::Tensor& t : a.layers) layers.append(to_numpy(t));
            return py::make_tuple(a.tokens, layers);
          },
          py::arg("images"), py::arg("i"),
          "Image i's attention in every block (Classifier::attention): (tokens, per block float32 "
          "(H, L, L)); ViT: [CLS] and the patches, point model: H = 1 over the points.")
      .def(
          "point_view",
          [](const vision::Classifier& c, const py::handle& pixels, std::int64_t i) {
            const vision::Images im = images_from(pixels, "point_view: images");
            vision::Classifier::PointView v;
            {
              py::gil_scoped_release release;
              v = c.point_view(im, i);
            }
            const py::ssize_t N = static_cast<py::ssize_t>(v.points.size() / 3), K = v.neighbors;
            py::dict d;
            d["points"] = array_of(v.points, {N, 3});
            d["neighbors"] = array_of(v.neighbor, {N, K});
            d["weights"] = array_of(v.weight, {N, K});
            d["received"] = array_of(v.received, {N});
            return d;
          },
          py::arg("images"), py::arg("i"),
          "The point model's view of image i: points (N, 3), its last block's neighbours (N, K) and their "
          "channel-mean attention weights (N, K), and the weight each point receives / N (N,).");
}
