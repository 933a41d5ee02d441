// Fashion-MNIST classification: images in, augmented batches, the training loop, the model
// directory and predictions. See apps/vision/vision.h.

#include "vision/vision.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "vision/idx.h"
#include "vision/image.h"
#include "io/json_bounded.h"
#include "io/json_config.h"
#include "io/read_file.h"
#include "models/checkpoint.h"
#include "qkv/error.h"
#include "qkv/files.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/train.h"
#include "qkv/viz.h"

namespace qkv::vision {

namespace {


constexpr std::uint64_t kImageFileMaxBytes = std::uint64_t{1} << 30;

bool starts_with(const std::string& bytes, std::initializer_list<unsigned char> magic) {
  if (bytes.size() < magic.size()) return false;
  std::size_t i = 0;
  for (const unsigned char c : magic)
    if (static_cast<unsigned char>(bytes[i++]) != c) return false;
  return true;
}

}  // namespace

Images Images::slice(std::int64_t begin, std::int64_t end) const {
  QKV_CHECK(0 <= begin && begin <= end && end <= count,
            "Images::slice: [" << begin << ", " << end << ") is not within the " << count << " images");
  Images out;
  out.count = end - begin;
  out.height = height;
  out.width = width;
  const std::int64_t px = height * width;
  out.pixels.assign(pixels.begin() + begin * px, pixels.begin() + end * px);
  if (!labels.empty()) out.labels.assign(labels.begin() + begin, labels.begin() + end);
  return out;
}

Images read_images(const std::string& path, std::int64_t height, std::int64_t width) {
  const std::string bytes = io::read_file(path, "images", kImageFileMaxBytes);
  Images out;
  // IDX: gzip's 1f 8b or the IDX magic's two zero bytes; else PNG or PGM (io::parse_image
  // names what it expected when the file is none of these).
  if (starts_with(bytes, {0x1f, 0x8b}) || starts_with(bytes, {0x00, 0x00})) {
    const io::IdxArray a = io::parse_idx(bytes, "IDX file '" + path + "'");
    QKV_CHECK(a.dims.size() == 3,
              "IDX file '" << path << "': holds " << a.dims.size() << " dimensions, images need 3 (N, H, W)");
    out.count = a.dims[0];
    out.height = a.dims[1];
    out.width = a.dims[2];
    out.pixels = a.data;
  } else {
    io::GreyImage g = io::parse_image(bytes, "image '" + path + "'");
    out.count = 1;
    out.height = g.height;
    out.width = g.width;
    out.pixels = std::move(g.pixels);
  }
  QKV_CHECK((height == 0 || out.height == height) && (width == 0 || out.width == width),
            "'" << path << "': images are " << out.height << "x" << out.width << ", the model takes "
                << height << "x" << width << " (resize them first)");
  return out;
}

void read_labels(const std::string& path, Images& images, int classes) {
  const io::IdxArray a = io::read_idx_labels(path, classes);
  QKV_CHECK(a.dims[0] == images.count,
            "IDX file '" << path << "': " << a.dims[0] << " labels for " << images.count << " images");
  images.labels.assign(a.data.begin(), a.data.end());
}

FashionMnist load_fashion_mnist(const std::string& dir, std::int64_t validation) {
  QKV_CHECK(std::filesystem::is_directory(dir),
            "fashion-mnist: '" << dir << "' is not a directory (make it with scripts/fetch_data.sh fashion-mnist DIR)");
  Images train = read_images(dir + "/train-images-idx3-ubyte.gz");
  read_labels(dir + "/train-labels-idx1-ubyte.gz", train);
  FashionMnist data;
  data.test = read_images(dir + "/t10k-images-idx3-ubyte.gz");
  read_labels(dir + "/t10k-labels-idx1-ubyte.gz", data.test);
  QKV_CHECK(validation >= 0 && validation < train.count,
            "fashion-mnist: validation must be in [0, " << train.count << "), got " << validation);
  data.train = train.slice(0, train.count - validation);
  data.validation = train.slice(train.count - validation, train.count);
  return data;
}

std::vector<std::uint8_t> augmented_pixels(const Images& images, std::span<const std::int64_t> indices,
                                           const Augmentation* augment, std::uint64_t seed) {
  const std::int64_t B = static_cast<std::int64_t>(indices.size()), H = images.height, W = images.width;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(B * H * W));  // (B, H, W)
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t i = indices[static_cast<std::size_t>(b)];
    QKV_CHECK(i >= 0 && i < images.count, "to_input: image index " << i << " outside [0, " << images.count << ")");
    const std::uint8_t* src = images.pixels.data() + i * H * W;
    std::int64_t dy = 0, dx = 0;
    bool flip = false;
    if (augment != nullptr) {
      const std::int64_t span = 2 * augment->pad + 1;
      const auto draw = [&](std::uint64_t k) {
        return counter_uniform(seed, static_cast<std::uint64_t>(b) * 3 + k);
      };
      dy = std::min<std::int64_t>(static_cast<std::int64_t>(draw(0) * static_cast<double>(span)), span - 1) - augment->pad;
      dx = std::min<std::int64_t>(static_cast<std::int64_t>(draw(1) * static_cast<double>(span)), span - 1) - augment->pad;
      flip = augment->flip && draw(2) < 0.5;
    }
    std::uint8_t* dst = out.data() + b * H * W;
    // Output (y, x) reads source (y + dy, x' + dx) with x' = flip ? W − 1 − x : x; outside
    // the image is black (the padding).
    for (std::int64_t y = 0; y < H; ++y)
      for (std::int64_t x = 0; x < W; ++x) {
        const std::int64_t sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
        const bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
        dst[y * W + x] = inside ? src[sy * W + sx] : 0;
      }
    if (augment != nullptr && augment->erase != 0.0) {  // NaN too: erased_rectangle refuses it
      const ErasedRectangle r = erased_rectangle(H, W, augment->erase, seed, b);
      for (std::int64_t y = r.y0; y < r.y0 + r.height; ++y)
        std::fill_n(dst + y * W + r.x0, r.width, kErasePixel);
    }
  }
  return out;
}

ErasedRectangle erased_rectangle(std::int64_t H, std::int64_t W, double erase, std::uint64_t seed, std::int64_t b) {
  QKV_CHECK(H >= 1 && W >= 1 && erase >= 0.0 && erase <= 1.0,
            "erased_rectangle: need H, W >= 1 and erase in [0, 1], got " << H << ", " << W << ", " << erase);
  // Five draws per image from a stream of its own (the crop's and flip's draws stay put).
  const std::uint64_t stream = mix64(seed ^ 0x4572617365ull);
  const auto draw = [&](std::uint64_t k) { return counter_uniform(stream, static_cast<std::uint64_t>(b) * 5 + k); };
  ErasedRectangle r;
  if (!(draw(0) < erase)) return r;
  const double area = (0.02 + 0.38 * draw(1)) * static_cast<double>(H * W);
  const double aspect = std::exp(std::log(0.3) + (std::log(3.3) - std::log(0.3)) * draw(2));  // h / w
  r.height = std::clamp<std::int64_t>(std::llround(std::sqrt(area * aspect)), 1, H);
  r.width = std::clamp<std::int64_t>(std::llround(std::sqrt(area / aspect)), 1, W);
  r.y0 = std::min<std::int64_t>(static_cast<std::int64_t>(draw(3) * static_cast<double>(H - r.height + 1)), H - r.height);
  r.x0 = std::min<std::int64_t>(static_cast<std::int64_t>(draw(4) * static_cast<double>(W - r.width + 1)), W - r.width);
  return r;
}

Tensor to_input(const Images& images, std::span<const std::int64_t> indices, const Augmentation* augment,
                std::uint64_t seed) {
  const std::vector<std::uint8_t> pixels = augmented_pixels(images, indices, augment, seed);
  Tensor out = Tensor::empty({static_cast<std::int64_t>(indices.size()), 1, images.height, images.width});
  float* o = out.data_as<float>();
  // Pixel p -> (p / 255 − mean) / std.
  float table[256];
  for (int p = 0; p < 256; ++p) table[p] = (static_cast<float>(p) / 255.0f - kPixelMean) / kPixelStd;
  for (std::size_t k = 0; k < pixels.size(); ++k) o[k] = table[pixels[k]];
  return out;
}

std::int64_t steps_per_epoch(std::int64_t images, std::int64_t batch) { return (images + batch - 1) / batch; }

Batch training_batch_without_images(const Images& train, std::uint64_t seed, std::int64_t epoch, std::int64_t step,
                                    std::int64_t batch) {
  QKV_CHECK(batch >= 1 && train.count >= 1 && !train.labels.empty(),
            "training_batch: need labelled images and batch >= 1");
  QKV_CHECK(step >= 0 && step < steps_per_epoch(train.count, batch),
            "training_batch: step " << step << " outside the epoch's " << steps_per_epoch(train.count, batch));
  std::vector<std::int64_t> order(static_cast<std::size_t>(train.count));
  for (std::int64_t i = 0; i < train.count; ++i) order[static_cast<std::size_t>(i)] = i;
  Rng rng(mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(epoch) + 0x56697331ull));
  shuffle(order, rng);
  Batch out;
  const std::int64_t begin = step * batch, end = std::min(train.count, begin + batch);
  out.indices.assign(order.begin() + begin, order.begin() + end);
  for (const std::int64_t i : out.indices) out.labels.push_back(train.labels[static_cast<std::size_t>(i)]);
  out.seed = mix64(mix64(seed + 0x41756721ull) ^ (static_cast<std::uint64_t>(epoch) << 32) ^
                   static_cast<std::uint64_t>(step));
  return out;
}

Batch training_batch(const Images& train, std::uint64_t seed, std::int64_t epoch, std::int64_t step,
                     std::int64_t batch, const Augmentation& augment) {
  Batch out = training_batch_without_images(train, seed, epoch, step, batch);
  out.images = to_input(train, out.indices, &augment, out.seed);
  return out;
}

Evaluation evaluate(std::span<const Prediction> predictions, std::span<const std::int64_t> labels,
                    std::int64_t classes) {
  QKV_CHECK(predictions.size() == labels.size(),
            "evaluate: " << predictions.size() << " predictions for " << labels.size() << " labels");
  Evaluation e;
  e.classes = classes;
  e.counts.assign(static_cast<std::size_t>(classes * classes), 0);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const std::int64_t t = labels[i], p = predictions[i].label;
    QKV_CHECK(t >= 0 && t < classes && p >= 0 && p < classes,
              "evaluate: image " << i << ": label " << t << " or prediction " << p << " outside [0, " << classes << ")");
    ++e.counts[static_cast<std::size_t>(t * classes + p)];
    e.correct += t == p;
    ++e.images;
  }
  return e;
}

// ---------------------------------------------------------------------------------------
// The network.

void VisionNetwork::check() const {
  if (model == "vit") {
    vit.check();
    return;
  }
  QKV_CHECK(model == "point", "vision: the model must be 'vit' or 'point', got '" << model << "'");
  point.check();
  QKV_CHECK(point_image_size >= 1 && point_image_size <= 4096,
            "vision: the point model's image size must be in [1, 4096], got " << point_image_size);
}

std::int64_t VisionNetwork::image_size() const { return model == "vit" ? vit.image_size : point_image_size; }
std::int64_t VisionNetwork::classes() const { return model == "vit" ? vit.classes : point.classes; }
std::int64_t VisionNetwork::num_parameters() const {
  return model == "vit" ? vit.num_parameters() : point.num_parameters();
}

VisionNetwork VisionNetwork::initialized(const VisionNetwork& shape, std::uint64_t seed) {
  shape.check();
  VisionNetwork n;
  n.model = shape.model;
  n.vit = shape.vit;
  n.point = shape.point;
  n.point_image_size = shape.point_image_size;
  if (n.model == "vit")
    n.vit_weights = models::VitWeights::initialized(n.vit, seed);
  else
    n.point_weights = models::PointTransformerWeights::initialized(n.point, seed);
  return n;
}

VisionNetwork VisionNetwork::zeros_like() const {
  VisionNetwork n;
  n.model = model;
  n.vit = vit;
  n.point = point;
  n.point_image_size = point_image_size;
  if (n.model == "vit")
    n.vit_weights = models::VitWeights::zeros_like(n.vit);
  else
    n.point_weights = models::PointTransformerWeights::zeros_like(n.point);
  return n;
}

Tensor VisionNetwork::input(const Images& images, std::span<const std::int64_t> indices, const Augmentation* augment,
                            std::uint64_t seed) const {
  if (model == "vit") return to_input(images, indices, augment, seed);
  const std::vector<std::uint8_t> pixels = augmented_pixels(images, indices, augment, seed);  // (B, H, W)
  const std::int64_t B = static_cast<std::int64_t>(indices.size()), H = images.height, W = images.width;
  if (augment != nullptr)
    return models::images_to_points(pixels, B, H, W, point.points, seed, 0, point.patch_size);
  // Inference: every image with seed 0, counter 0 — its points depend on its pixels alone.
  const std::int64_t F = point.point_features();
  Tensor out = Tensor::empty({B, point.points, F});
  float* o = out.data_as<float>();
  for (std::int64_t b = 0; b < B; ++b) {
    const Tensor one = models::image_to_points(std::span<const std::uint8_t>(pixels).subspan(
                                                   static_cast<std::size_t>(b * H * W), static_cast<std::size_t>(H * W)),
                                               H, W, point.points, 0, 0, point.patch_size);
    std::copy_n(one.data_as<float>(), point.points * F, o + b * point.points * F);
  }
  return out;
}

Tensor VisionNetwork::forward(const Tensor& input, Record* record, std::span<const std::int64_t> kept) const {
  if (model == "vit") return vit_weights.forward(input, nullptr, record ? &record->vit : nullptr, kept);
  QKV_CHECK(kept.empty(), "vision: patch dropout applies to the vit model only");
  return point_weights.forward(input, record ? &record->point : nullptr);
}

void VisionNetwork::backward(const Tensor& dlogits, const Record& record, VisionNetwork& grads) const {
  QKV_CHECK(grads.model == model, "vision: gradients of a '" << grads.model << "' model for a '" << model << "' one");
  if (model == "vit")
    vit_weights.backward(dlogits, record.vit, grads.vit_weights);
  else
    point_weights.backward(dlogits, record.point, grads.point_weights);
}

nn::ParameterList VisionNetwork::parameters() {
  return model == "vit" ? vit_weights.parameters() : point_weights.parameters();
}

// ---------------------------------------------------------------------------------------
// Predictions.

namespace {

// logits (B, classes) -> softmax rows as predictions.
void append_predictions(const Tensor& logits, std::vector<Prediction>& out) {
  const std::int64_t B = logits.size(0), K = logits.size(1);
  const float* l = logits.data_as<float>();
  for (std::int64_t b = 0; b < B; ++b) {
    Prediction p;
    p.probabilities.resize(static_cast<std::size_t>(K));
    const float* row = l + b * K;
    const float mx = *std::max_element(row, row + K);
    double sum = 0.0;
    for (std::int64_t k = 0; k < K; ++k) sum += std::exp(static_cast<double>(row[k] - mx));
    for (std::int64_t k = 0; k < K; ++k)
      p.probabilities[static_cast<std::size_t>(k)] = static_cast<float>(std::exp(static_cast<double>(row[k] - mx)) / sum);
    p.label = std::max_element(row, row + K) - row;
    p.score = p.probabilities[static_cast<std::size_t>(p.label)];
    out.push_back(std::move(p));
  }
}

std::vector<Prediction> predict(const VisionNetwork& net, const Images& images, std::int64_t batch) {
  std::vector<Prediction> out;
  out.reserve(static_cast<std::size_t>(images.count));
  std::vector<std::int64_t> idx;
  for (std::int64_t begin = 0; begin < images.count; begin += batch) {
    idx.clear();
    for (std::int64_t i = begin; i < std::min(images.count, begin + batch); ++i) idx.push_back(i);
    append_predictions(net.forward(net.input(images, idx)), out);
  }
  return out;
}

double accuracy_of(const VisionNetwork& net, const Images& images) {
  if (images.count == 0) return 0.0;
  const std::vector<Prediction> p = predict(net, images, 256);
  return evaluate(p, images.labels, net.classes()).accuracy();
}

// The architecture's fields of config.json ("model" and the config's, at the top level).
nlohmann::json config_json(const VisionNetwork& n) {
  if (n.model == "vit") {
    const models::VitConfig& c = n.vit;
    return {{"model", "vit"},   {"image_size", c.image_size}, {"channels", c.channels},
            {"patch_size", c.patch_size}, {"dim", c.dim},     {"layers", c.layers},
            {"heads", c.heads}, {"mlp_dim", c.mlp_dim},       {"classes", c.classes},
            {"learned_positions", c.learned_positions}, {"shifted_patches", c.shifted_patches}};
  }
  const models::PointTransformerConfig& c = n.point;
  return {{"model", "point"},
          {"image_size", n.point_image_size},
          {"points", c.points},
          {"patch_size", c.patch_size},
          {"neighbors", c.neighbors},
          {"dim", c.dim},
          {"blocks", c.blocks},
          {"pos_mlp_hidden", c.pos_mlp_hidden},
          {"attn_mlp_hidden_mult", c.attn_mlp_hidden_mult},
          {"head_hidden", c.head_hidden},
          {"classes", c.classes}};
}

// config.json's architecture -> an unweighted network, checked (sizes bounded so a
// hostile file cannot ask for terabytes).
VisionNetwork network_from(const JsonConfig& j) {
  VisionNetwork n;
  n.model = j.get_string("model");
  QKV_CHECK(n.model == "vit" || n.model == "point",
            j.label() << ": model must be 'vit' or 'point', got '" << n.model << "'");
  if (n.model == "vit") {
    models::VitConfig& c = n.vit;
    c.image_size = j.get_int("image_size");
    c.channels = j.get_int("channels");
    c.patch_size = j.get_int("patch_size");
    c.dim = j.get_int("dim");
    c.layers = j.get_int("layers");
    c.heads = j.get_int("heads");
    c.mlp_dim = j.get_int("mlp_dim");
    c.classes = j.get_int("classes");
    c.learned_positions = j.get_bool("learned_positions");
    c.shifted_patches = j.get_bool("shifted_patches", false);  // absent in models written before it
    QKV_CHECK(c.image_size <= 4096 && c.channels <= 16 && c.dim <= 4096 && c.layers <= 64 && c.heads <= 256 &&
                  c.mlp_dim <= 16384 && c.classes <= 100000,
              j.label() << ": a size is out of range (image_size <= 4096, channels <= 16, dim <= 4096, layers <= 64, "
                           "heads <= 256, mlp_dim <= 16384, classes <= 100000)");
  } else {
    models::PointTransformerConfig& c = n.point;
    n.point_image_size = j.get_int("image_size");
    c.points = j.get_int("points");
    c.patch_size = j.get_int("patch_size", 1);  // absent in models written before it: the pixel alone
    c.neighbors = j.get_int("neighbors");
    c.dim = j.get_int("dim");
    c.blocks = j.get_int("blocks");
    c.pos_mlp_hidden = j.get_int("pos_mlp_hidden");
    c.attn_mlp_hidden_mult = j.get_int("attn_mlp_hidden_mult");
    c.head_hidden = j.get_int("head_hidden");
    c.classes = j.get_int("classes");
    QKV_CHECK(c.points <= 65536 && c.dim <= 4096 && c.blocks <= 64 && c.pos_mlp_hidden <= 4096 &&
                  c.attn_mlp_hidden_mult <= 64 && c.head_hidden <= 16384 && c.classes <= 100000,
              j.label() << ": a size is out of range (points <= 65536, dim <= 4096, blocks <= 64, pos_mlp_hidden "
                           "<= 4096, attn_mlp_hidden_mult <= 64, head_hidden <= 16384, classes <= 100000)");
  }
  n.check();
  return n;
}

std::vector<std::pair<std::string, Tensor>> weight_tensors(VisionNetwork& n, bool bf16) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, t] : n.parameters()) out.emplace_back(name, bf16 ? t->to(DType::bf16) : t->contiguous());
  return out;
}


}  // namespace

// ---------------------------------------------------------------------------------------
// Training.

std::string VisionTrainingResult::to_json() const {
  nlohmann::ordered_json j;
  j["validation_accuracy"] = validation_accuracy;
  j["best_epoch"] = best_epoch;
  j["num_parameters"] = num_parameters;
  j["out"] = out_dir;
  if (!interrupted) j["test_accuracy"] = test_accuracy;
  return LoopResult::to_json(j.dump());
}

namespace {

// One step of the ViT or the point model: the epoch's shuffled batch, augmented (by position
// in the batch, so every rank augments all of it), this rank's rows, label-smoothed
// cross-entropy.
struct VisionTask : train::Task {
  const VisionTrainingOptions& o;
  const Images& train;
  const Images& validation;
  VisionNetwork model, grads;
  std::int64_t patches, keep;
  VisionTask(const VisionTrainingOptions& options, const Images& t, const Images& v, const VisionNetwork& shape)
      : o(options), train(t), validation(v), model(VisionNetwork::initialized(shape, options.seed)),
        grads(model.zeros_like()), patches(options.model == "vit" ? options.vit.patches() : 0),
        keep(options.patch_dropout > 0.0 ? models::patches_kept(patches, options.patch_dropout) : patches) {}
  nn::ParameterList parameters() override { return model.parameters(); }
  nn::ParameterList gradients() override { return grads.parameters(); }
  train::StepResult step(const train::StepContext& ctx) override {
    const Batch batch = training_batch_without_images(train, o.seed, ctx.epoch, ctx.step_in_epoch, o.batch);
    const auto B = static_cast<std::int64_t>(batch.indices.size());
    std::vector<std::int64_t> kept =
        keep < patches && (o.patch_dropout_epochs == 0 || ctx.epoch < o.patch_dropout_epochs)
            ? models::random_patches(B, patches, keep, batch.seed)
            : std::vector<std::int64_t>{};
    Tensor input = model.input(train, batch.indices, &o.augment, batch.seed);
    std::vector<std::int64_t> labels = batch.labels;
    const distributed::RowShare rows = ctx.share(B);
    if (ctx.ranks > 1) {  // this rank's rows of everything the batch holds
      input = input.slice(0, rows.lo, rows.hi).contiguous();
      labels = std::vector<std::int64_t>(batch.labels.begin() + rows.lo, batch.labels.begin() + rows.hi);
      if (!kept.empty()) kept = std::vector<std::int64_t>(kept.begin() + rows.lo * keep, kept.begin() + rows.hi * keep);
    }
    ctx.weigh(static_cast<double>(labels.size()));
    VisionNetwork::Record record;
    const Tensor logits = model.forward(input, &record, kept);
    Tensor dlogits;
    const train::CrossEntropyResult ce = train::cross_entropy(logits, labels, &dlogits, o.label_smoothing);
    model.backward(dlogits, record, grads);
    return {.loss = ce.loss, .count = static_cast<double>(ce.counted), .correct = static_cast<double>(ce.correct),
            .items = static_cast<double>(labels.size())};
  }
  double evaluate() override { return accuracy_of(model, validation); }
};

}  // namespace

VisionTrainingResult train_vision(const VisionTrainingOptions& o, const FashionMnist& data,
                                  const train::ProgressCallback& on_progress, const std::atomic<bool>* stop) {
  QKV_CHECK(o.model == "vit" || o.model == "point",
            "train " << o.model << ": --model must be 'vit' or 'point', got '" << o.model << "'");
  QKV_CHECK(o.epochs >= 1 && o.batch >= 1, "train " << o.model << ": epochs and batch must be >= 1, got "
                                               << o.epochs << " and " << o.batch);
  QKV_CHECK(o.peak_lr > 0 && std::isfinite(o.peak_lr) && o.warmup_epochs >= 0 && o.label_smoothing >= 0 &&
                o.label_smoothing < 1 && o.weight_decay >= 0 && o.augment.pad >= 0 && o.augment.erase >= 0 &&
                o.augment.erase <= 1,
            "train " << o.model << ": lr must be > 0, warm-up, weight decay and padding >= 0, label smoothing in [0, 1), "
            "erase in [0, 1]");
  QKV_CHECK(o.model == "vit" || o.augment.erase == 0.0,
            "train " << o.model << ": erase applies to the vit model only (an erased rectangle would be ink to the point model)");
  QKV_CHECK(o.patch_dropout >= 0.0 && o.patch_dropout < 1.0,
            "train " << o.model << ": patch dropout must be in [0, 1), got " << o.patch_dropout);
  QKV_CHECK(o.patch_dropout_epochs >= 0 && o.patch_dropout_epochs <= o.epochs,
            "train " << o.model << ": patch dropout's epochs must be in [0, epochs = " << o.epochs << "], got "
                                                                           << o.patch_dropout_epochs);
  QKV_CHECK(o.patch_dropout_epochs == 0 || o.patch_dropout > 0.0,
            "train " << o.model << ": patch dropout's epochs (" << o.patch_dropout_epochs
                                                     << ") given without patch dropout (its fraction is 0)");
  QKV_CHECK(o.model == "vit" || o.patch_dropout == 0.0,
            "train " << o.model << ": patch dropout applies to the vit model only (the point model has no patches)");
  QKV_CHECK(!o.out_dir.empty(), "train " << o.model << ": an output directory is required");
  VisionNetwork shape;
  shape.model = o.model;
  shape.vit = o.vit;
  shape.point = o.point;
  shape.point_image_size = data.train.height;
  shape.check();
  QKV_CHECK((o.model == "point" || o.vit.channels == 1) && shape.image_size() == data.train.height &&
                data.train.height == data.train.width,
            "train " << o.model << ": the model takes " << (o.model == "vit" ? o.vit.channels : 1) << "x" << shape.image_size()
                                             << "x" << shape.image_size() << " images, the data are 1x"
                                             << data.train.height << "x" << data.train.width);
  QKV_CHECK(shape.classes() == static_cast<std::int64_t>(kFashionMnistClasses.size()),
            "train " << o.model << ": the model must have " << kFashionMnistClasses.size() << " classes");
  const Images train = o.train_limit > 0 && o.train_limit < data.train.count ? data.train.slice(0, o.train_limit)
                                                                              : data.train;
  const std::string config_text = config_json(shape).dump();
  VisionTask task(o, train, data.validation, shape);
  const std::int64_t per_epoch = steps_per_epoch(train.count, o.batch);
  const int ranks = o.communicator != nullptr ? o.communicator->size() : 1;
  QKV_CHECK(o.batch >= ranks, "train " << o.model << ": --batch " << o.batch << " gives some of the " << ranks
                                                      << " ranks no images; it must be at least the number of ranks");
  train::LoopOptions loop;
  loop.task = o.model;
  loop.steps = per_epoch * o.epochs;
  loop.steps_per_epoch = per_epoch;
  loop.unit = "img";
  loop.eval_every = 1;
  loop.metric = "validation accuracy";
  loop.keep_best = true;
  loop.patience = o.patience;
  loop.adam.weight_decay = o.weight_decay;
  loop.adam.beta2 = 0.999;
  loop.clip_norm = o.clip_norm;
  loop.lr = {o.peak_lr, static_cast<std::int64_t>(o.warmup_epochs * static_cast<double>(per_epoch)), o.min_lr_ratio};
  static_cast<train::RunOptions&>(loop) = train::run_options(o, o.out_dir + "/checkpoint.safetensors");
  loop.checkpoint_at_epoch_end = true;
  std::ostringstream augment;
  augment << o.augment.pad << ' ' << o.augment.flip << ' ' << train::identity_value(o.augment.erase);
  loop.identity = {{"config", config_text},
                   {"seed", std::to_string(o.seed)},
                   {"batch", std::to_string(o.batch)},
                   {"training_images", std::to_string(train.count)},
                   {"label_smoothing", train::identity_value(o.label_smoothing)},
                   {"augment", augment.str()},
                   {"patch_dropout", train::identity_value(o.patch_dropout) + " " + std::to_string(o.patch_dropout_epochs)}};
  VisionTrainingResult result;
  static_cast<train::LoopResult&>(result) = train::fit(task, loop, on_progress, stop);
  result.num_parameters = shape.num_parameters();
  result.out_dir = o.out_dir;
  for (const train::Evaluation& e : result.evaluations) result.validation_accuracy.push_back(e.score);
  if (result.best >= 0) result.best_epoch = result.evaluations[static_cast<std::size_t>(result.best)].step / per_epoch;
  if (result.interrupted || (o.communicator != nullptr && o.communicator->rank() != 0)) return result;
  VisionNetwork& best = task.model;  // the loop restored the best epoch's weights
  result.test_accuracy = accuracy_of(best, data.test);
  nlohmann::json config = config_json(shape);
  config["model_type"] = "qkv-vision";
  config["pixel_mean"] = kPixelMean;
  config["pixel_std"] = kPixelStd;
  config["class_names"] = std::vector<std::string>(kFashionMnistClasses.begin(), kFashionMnistClasses.end());
  config["report"] = {{"trained_with", o.command},
                      {"epochs", o.epochs},
                      {"steps", result.steps},
                      {"batch", o.batch},
                      {"seed", o.seed},
                      {"patch_dropout", o.patch_dropout},
                      {"patch_dropout_epochs", o.patch_dropout_epochs},
                      {"training_images", train.count},
                      {"validation_accuracy", result.validation_accuracy},
                      {"best_epoch", result.best_epoch},
                      {"test_accuracy", result.test_accuracy},
                      {"training_seconds", result.seconds},
                      {"num_parameters", result.num_parameters}};
  ModelFiles files(o.out_dir);  // the directory changes as a whole, config.json last
  save_safetensors(files.add("model.safetensors"), weight_tensors(best, o.bf16), {{"format", "pt"}});
  files.commit(config.dump());
  return result;
}

// ---------------------------------------------------------------------------------------
// A trained model.

Classifier Classifier::from_network(VisionNetwork network, std::vector<std::string> class_names) {
  network.check();
  QKV_CHECK(static_cast<std::int64_t>(class_names.size()) == network.classes(),
            "classifier: " << class_names.size() << " class names for " << network.classes() << " classes");
  Classifier c;
  c.net_ = std::move(network);
  c.class_names_ = std::move(class_names);
  return c;
}

Classifier Classifier::load(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  const JsonConfig j = JsonConfig::load(config_path);
  QKV_CHECK(j.get_string("model_type", "") == "qkv-vision",
            config_path << ": not a qkv image classifier (model_type is not 'qkv-vision'; make one with qkv train vit or qkv train point)");
  VisionNetwork net = network_from(j);
  const nlohmann::json names = io::parse_json(io::read_file(config_path, "config", 16u << 20), config_path, false);
  QKV_CHECK(names.is_object() && names.contains("class_names") && names["class_names"].is_array(),
            config_path << ": no class_names list");
  std::vector<std::string> class_names;
  for (const auto& n : names["class_names"]) {
    QKV_CHECK(n.is_string(), config_path << ": class_names must be strings");
    class_names.push_back(n.get<std::string>());
  }
  const std::string weights_path = dir + "/model.safetensors";
  const SafeTensors st = SafeTensors::open(weights_path);
  net = net.zeros_like();
  nn::StateDict state;
  std::set<std::string> read;
  for (auto& [name, t] : net.parameters()) {
    QKV_CHECK(st.contains(name), weights_path << ": no tensor '" << name << "'");
    Tensor v = st.get(name).to(DType::f32).contiguous();
    QKV_CHECK(v.shape() == t->shape(), weights_path << ": '" << name << "' has shape " << shape_to_string(v.shape())
                                                   << ", expected " << shape_to_string(t->shape()));
    models::detail::check_finite(v, weights_path, name);
    state[name] = v;
    read.insert(name);
  }
  for (const std::string& name : st.names())
    QKV_CHECK(read.count(name), weights_path << ": tensor '" << name << "' belongs to no parameter of this model");
  nn::load_state_dict(net.parameters(), state);
  Classifier out = from_network(std::move(net), std::move(class_names));
  out.mean_ = static_cast<float>(j.get_double("pixel_mean", kPixelMean));
  out.std_ = static_cast<float>(j.get_double("pixel_std", kPixelStd));
  QKV_CHECK(out.mean_ == kPixelMean && out.std_ == kPixelStd,
            config_path << ": pixel_mean/pixel_std other than Fashion-MNIST's are not supported");
  if (names.contains("report")) out.report_json_ = names["report"].dump();
  return out;
}

namespace {

// Each image flipped left to right (column x becomes W − 1 − x); the labels stay.
Images mirrored(const Images& images) {
  Images out = images;
  const std::int64_t W = images.width;
  for (std::int64_t row = 0; row < images.count * images.height; ++row)
    std::reverse(out.pixels.begin() + row * W, out.pixels.begin() + (row + 1) * W);
  return out;
}

// A block's vector attention of image 0 as (N, K) weights: the softmax over the K
// neighbours of each channel (a.logits (1, N, K, C)), averaged over the C channels, so
// each point's K weights sum to 1.
std::vector<float> neighbor_weights(const nn::VectorAttention::Record& a, std::int64_t N) {
  const std::int64_t K = a.K, C = a.logits.size(3);
  std::vector<float> weight(static_cast<std::size_t>(N * K), 0.0f);
  const Tensor logits = a.logits.contiguous();
  const float* l = logits.data_as<float>();
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c) {
      float mx = -INFINITY;
      for (std::int64_t k = 0; k < K; ++k) mx = std::max(mx, l[(n * K + k) * C + c]);
      double sum = 0.0;
      for (std::int64_t k = 0; k < K; ++k) sum += std::exp(static_cast<double>(l[(n * K + k) * C + c] - mx));
      for (std::int64_t k = 0; k < K; ++k)
        weight[static_cast<std::size_t>(n * K + k)] += static_cast<float>(
            std::exp(static_cast<double>(l[(n * K + k) * C + c] - mx)) / sum / static_cast<double>(C));
    }
  return weight;
}

void check_image_size(const Images& images, std::int64_t size, const char* fn) {
  QKV_CHECK(images.height == size && images.width == size,
            fn << ": the model takes " << size << "x" << size << " images, got " << images.height << "x"
               << images.width);
}

}  // namespace

std::vector<Prediction> Classifier::classify(const Images& images, std::int64_t batch, bool tta) const {
  check_image_size(images, image_size(), "classify");
  QKV_CHECK(batch >= 1, "classify: batch must be >= 1, got " << batch);
  std::vector<Prediction> out = predict(net_, images, batch);
  if (!tta) return out;
  const std::vector<Prediction> mirror = predict(net_, mirrored(images), batch);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::vector<float>& p = out[i].probabilities;  // (classes)
    for (std::size_t k = 0; k < p.size(); ++k) p[k] = 0.5f * (p[k] + mirror[i].probabilities[k]);
    out[i].label = std::max_element(p.begin(), p.end()) - p.begin();
    out[i].score = p[static_cast<std::size_t>(out[i].label)];
  }
  return out;
}

std::vector<float> Classifier::rollout(const Images& images, std::int64_t i) const {
  QKV_CHECK(net_.model == "vit", "rollout: the model is '" << net_.model << "', attention rollout is the ViT's (use point_view)");
  check_image_size(images, image_size(), "rollout");
  QKV_CHECK(i >= 0 && i < images.count, "rollout: image " << i << " outside [0, " << images.count << ")");
  std::vector<Tensor> probs;
  const std::int64_t index[1] = {i};
  net_.vit_weights.forward(to_input(images, index), &probs);
  return models::attention_rollout(probs, 0);
}

Classifier::PointView Classifier::point_view(const Images& images, std::int64_t i) const {
  QKV_CHECK(net_.model == "point", "point_view: the model is '" << net_.model << "', not the point model (use rollout)");
  check_image_size(images, image_size(), "point_view");
  QKV_CHECK(i >= 0 && i < images.count, "point_view: image " << i << " outside [0, " << images.count << ")");
  const std::int64_t index[1] = {i};
  const Tensor points = net_.input(images, index);  // (1, N, F): x, y, the S × S window
  models::PointTransformerWeights::Record record;
  net_.point_weights.forward(points, &record);
  PointView v;
  const std::int64_t N = points.size(1), F = points.size(2);
  const std::vector<float> all = points.to_vector();
  for (std::int64_t n = 0; n < N; ++n)  // x, y and the window's centre, the point's own pixel
    for (const std::int64_t f : {std::int64_t{0}, std::int64_t{1}, 2 + (F - 2) / 2})
      v.points.push_back(all[static_cast<std::size_t>(n * F + f)]);
  if (record.blocks.empty()) return v;  // no attention to show
  const nn::VectorAttention::Record& a = record.blocks.back().attn;
  const std::int64_t K = a.K;
  v.neighbors = K;
  v.neighbor.assign(a.idx.begin(), a.idx.begin() + N * K);
  v.weight = neighbor_weights(a, N);
  v.received.assign(static_cast<std::size_t>(N), 0.0f);
  for (std::int64_t t = 0; t < N * K; ++t)
    v.received[static_cast<std::size_t>(v.neighbor[static_cast<std::size_t>(t)])] +=
        v.weight[static_cast<std::size_t>(t)] / static_cast<float>(N);
  return v;
}

Classifier::Attention Classifier::attention(const Images& images, std::int64_t i) const {
  check_image_size(images, image_size(), "attention");
  QKV_CHECK(i >= 0 && i < images.count, "attention: image " << i << " outside [0, " << images.count << ")");
  const std::int64_t index[1] = {i};
  Attention out;
  if (net_.model == "vit") {
    std::vector<Tensor> probs;  // per block (1, heads, 1 + N, 1 + N)
    net_.vit_weights.forward(to_input(images, index), &probs);
    for (const Tensor& p : probs) out.layers.push_back(p.select(0, 0).contiguous());
    const std::int64_t grid = net_.vit.grid();
    out.tokens.push_back("[CLS]");
    for (std::int64_t r = 0; r < grid; ++r)
      for (std::int64_t c = 0; c < grid; ++c) {
        std::string token = "r";  // appended: GCC 12 warns (-Wrestrict, wrongly) on "r" + ...
        token += std::to_string(r);
        token += 'c';
        token += std::to_string(c);
        out.tokens.push_back(std::move(token));
      }
    return out;
  }
  const Tensor points = net_.input(images, index);  // (1, N, F)
  models::PointTransformerWeights::Record record;
  net_.point_weights.forward(points, &record);
  const std::int64_t N = points.size(1);
  for (std::int64_t n = 0; n < N; ++n) out.tokens.push_back("pt" + std::to_string(n));
  for (const auto& block : record.blocks) {
    const nn::VectorAttention::Record& a = block.attn;
    const std::vector<float> w = neighbor_weights(a, N);  // (N, K)
    std::vector<float> dense(static_cast<std::size_t>(N * N), 0.0f);  // (N, N), zero off the neighbours
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t k = 0; k < a.K; ++k) {
        const std::int64_t j = a.idx[static_cast<std::size_t>(n * a.K + k)];
        dense[static_cast<std::size_t>(n * N + j)] += w[static_cast<std::size_t>(n * a.K + k)];
      }
    out.layers.push_back(Tensor::from_vector({1, N, N}, dense));  // (H = 1, N, N)
  }
  return out;
}

}  // namespace qkv::vision
