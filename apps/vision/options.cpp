// The image classifiers' training options, declared once for the CLI and Python: one set
// per model (vit, point), each with only its own options.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <string>
#include <vector>

#include "vision/vision.h"

namespace qkv::vision {
namespace {

using T = VisionTrainingOptions;

options::OptionSet<T> make_set(const std::string& model, const std::string& about) {
  return options::OptionSet<T>("train " + model, about, [model] {
    T t;
    t.model = model;
    t.out_dir = "vision-model";
    return t;
  });
}

// What both models take: the data, the schedule, the run.
void declare_common(options::OptionSet<T>& s) {
  s.path("data", &T::data,
         "The Fashion-MNIST directory (scripts/fetch_data.sh fashion-mnist DIR writes it): training on the first "
         "55,000 training images, validation (which picks the epoch kept) on the last 5,000, the test set "
         "scored once at the end")
      .required = true;
  s.integer("epochs", &T::epochs, 1, 100000, "Passes over the training images (the best validation epoch is kept)");
  s.integer("batch", &T::batch, 1, 65536, "Images per step");
  s.number("lr", &T::peak_lr, 1e-7, false, 1.0, false, "Peak learning rate (a warm-up of one epoch, then cosine)");
  s.number("label_smoothing", &T::label_smoothing, 0.0, false, 1.0, true, "Label smoothing");
  s.seed("seed", &T::seed, "Seed of the weights, the order and the augmentation");
  s.integer("train_limit", &T::train_limit, 0, 1000000, "Train on the first N training images only (0 = all 55,000)");
  s.integer("patience", &T::patience, 0, options::kMaxSteps,
            "Stop early after this many epochs without a better validation accuracy (0 = never)");
  s.flag("bf16", &T::bf16, "Write model.safetensors in bf16 (half the size; --precision sets the products of training)");
  train::declare_run_options(s, "config.json, model.safetensors (the best epoch's weights)");
  s.check([](T& t) {
    if (t.data.empty())
      throw options::OptionError("data", "'train " + t.model +
                                             "' needs the Fashion-MNIST directory (scripts/fetch_data.sh "
                                             "fashion-mnist DIR writes it)");
  });
}

// "3,17,42" -> {3, 17, 42}: what --show-images names, in its order (spaces allowed around
// the commas). Whether each index is inside the file is known once the file is read.
std::vector<std::int64_t> parse_image_indices(const std::string& text) {
  std::vector<std::int64_t> out;
  if (text.find_first_not_of(" \t") == std::string::npos) return out;
  constexpr std::int64_t kMostImages = 1000;  // a page of more would not load in a browser
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    std::string item = text.substr(at, comma - at);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    std::int64_t index = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), index);
    if (item.empty() || error != std::errc() || end != item.data() + item.size() || index < 0)
      throw options::OptionError("show_images", "'" + item + "' is not an image index: give 0-based indices "
                                                "separated by commas, e.g. 3,17,42");
    if (std::find(out.begin(), out.end(), index) != out.end())
      throw options::OptionError("show_images", "image " + std::to_string(index) + " is named twice");
    out.push_back(index);
    if (static_cast<std::int64_t>(out.size()) > kMostImages)
      throw options::OptionError("show_images", "names more than " + std::to_string(kMostImages) +
                                                    " images (the most a page shows)");
    if (comma == text.size()) return out;
    at = comma + 1;
  }
}

}  // namespace

const options::OptionSet<T>& vit_training_options() {
  static const options::OptionSet<T> set = [] {
    auto s = make_set("vit", "Train a Vision Transformer on Fashion-MNIST");
    declare_common(s);
    s.integer("dim", [](T& t) -> auto& { return t.vit.dim; }, 1, 4096, "Token width d");
    s.integer("layers", [](T& t) -> auto& { return t.vit.layers; }, 1, 64, "Encoder blocks");
    s.integer("heads", [](T& t) -> auto& { return t.vit.heads; }, 1, 256, "Attention heads (must divide --dim)");
    s.integer("patch_size", [](T& t) -> auto& { return t.vit.patch_size; }, 1, 28,
              "Patch side P, dividing 28 (28/P patches per side + the class token)");
    s.integer("mlp_dim", [](T& t) -> auto& { return t.vit.mlp_dim; }, 1, 16384, "The blocks' feed-forward width");
    s.custom<std::string>(
        options::OptionSet<T>::choice_spec("positions", {"learned", "sincos"},
                                           "Learned positions or the fixed 2-D sine-cosine table (--dim a multiple of 4)"),
        [](const T& t) { return std::string(t.vit.learned_positions ? "learned" : "sincos"); },
        [](T& t, const std::string& v) { t.vit.learned_positions = v == "learned"; });
    s.flag("shifted_patches", [](T& t) -> auto& { return t.vit.shifted_patches; },
           "Shifted Patch Tokenization (each patch read with its place in four diagonally shifted copies of the "
           "image, normalised, then embedded)");
    s.number("erase", [](T& t) -> auto& { return t.augment.erase; }, 0.0, false, 1.0, false,
             "Random Erasing probability (each training image, after its crop and flip, gets a rectangle of "
             "2-40% of its area set to the mean pixel with this probability)");
    s.number("patch_dropout", &T::patch_dropout, 0.0, false, 1.0, true,
             "The fraction of its patches each training image drops (a random subset per image and step; the "
             "blocks run on the rest, so a step costs less); validation and classify see every patch");
    s.integer("patch_dropout_epochs", &T::patch_dropout_epochs, 0, 100000,
              "Drop patches in the first N epochs only, then train on every patch (0: in every epoch; needs "
              "--patch-dropout)");
    s.check([](T& t) {
      const models::VitConfig& c = t.vit;
      const auto n = [](std::int64_t v) { return std::to_string(v); };
      if (t.patch_dropout_epochs > 0 && t.patch_dropout == 0)
        throw options::OptionError("patch_dropout_epochs", "given without --patch-dropout (what would it limit?)");
      if (t.patch_dropout_epochs > t.epochs)
        throw options::OptionError("patch_dropout_epochs", n(t.patch_dropout_epochs) + " exceeds --epochs " + n(t.epochs));
      if (c.dim % c.heads != 0) throw options::OptionError("heads", n(c.heads) + " must divide --dim " + n(c.dim));
      if (28 % c.patch_size != 0)
        throw options::OptionError("patch_size", "must divide 28 (the images' side), got " + n(c.patch_size));
      if (!c.learned_positions && c.dim % 4 != 0)
        throw options::OptionError("positions", "sincos needs --dim a multiple of 4");
      if (c.shifted_patches && c.patch_size < 2)
        throw options::OptionError("shifted_patches", "needs --patch-size >= 2 (the shift is half a patch)");
    });
    return s;
  }();
  return set;
}

const options::OptionSet<T>& point_training_options() {
  static const options::OptionSet<T> set = [] {
    auto s = make_set("point", "Train a Point Transformer on points sampled from Fashion-MNIST's inked pixels");
    declare_common(s);
    s.integer("dim", [](T& t) -> auto& { return t.point.dim; }, 1, 4096, "Point feature width C");
    s.integer("layers", [](T& t) -> auto& { return t.point.blocks; }, 1, 64, "Point Transformer blocks");
    s.integer("points", [](T& t) -> auto& { return t.point.points; }, 1, 4096, "Points sampled per image");
    s.integer("neighbors", [](T& t) -> auto& { return t.point.neighbors; }, 1, 4096,
              "K, the nearest points each attends to");
    s.integer("patch_size", [](T& t) -> auto& { return t.point.patch_size; }, 1, models::kMaxPointPatch,
              "The side S of the square of pixels each point carries, odd");
    s.check([](T& t) {
      const models::PointTransformerConfig& c = t.point;
      const auto n = [](std::int64_t v) { return std::to_string(v); };
      if (!models::valid_point_patch(c.patch_size))
        throw options::OptionError("patch_size", "must be odd (a window centred on each point), got " +
                                                     n(c.patch_size));
      if (c.neighbors > c.points)
        throw options::OptionError("neighbors", n(c.neighbors) + " exceeds --points " + n(c.points));
    });
    return s;
  }();
  return set;
}

const options::OptionSet<ClassifyQueryOptions>& classify_options() {
  using Q = ClassifyQueryOptions;
  static const options::OptionSet<Q> set = [] {
    options::OptionSet<Q> s("classify", "Classify images with a model of qkv train vit or point");
    s.integer("batch", &Q::batch, 1, 65536, "Images per forward");
    s.flag("tta", &Q::tta,
           "Test-time augmentation: each image's class probabilities are the mean of its own and its left-right "
           "mirror image's (two forwards per image; training flips images too)");
    // The page's images. Both are the CLI's: `qkv classify --html` draws the page.
    s.text("show_images", &Q::show_images,
           "The images the --html page shows, by their 0-based indices in --images, e.g. 3,17,42 (instead of "
           "the first --html-images)")
        .fronts = options::kCli;
    s.flag("misclassified", &Q::misclassified,
           "The --html page shows the images the model got wrong (needs --labels), the first --html-images of them")
        .fronts = options::kCli;
    s.check([](Q& q) {
      q.shown = parse_image_indices(q.show_images);
      if (!q.shown.empty() && q.misclassified)
        throw options::OptionError("show_images", "and --misclassified both pick the page's images: give one");
    });
    return s;
  }();
  return set;
}

}  // namespace qkv::vision
