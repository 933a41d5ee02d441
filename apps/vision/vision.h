// Image classification on Fashion-MNIST (Xiao, Rasul & Vollgraf 2017): the data, the
// augmented batches, the training loop of `qkv train vit` and `qkv train point`, a trained model directory and
// `qkv classify`'s predictions.
//
// Data: `scripts/fetch_data.sh fashion-mnist DIR` copies Debian's dataset-fashion-mnist
// into DIR: 60,000 training and 10,000 test images, 28×28 grey, 10 classes. Training uses
// the first 55,000 training images; validation, which picks the epoch kept, the last 5,000;
// the test set is scored only after training, for the report.
//
// Two architectures read the images (VisionNetwork): a Vision Transformer over 4×4 patches
// (qkv/vit.h) and a Point Transformer over points sampled from the inked pixels
// (qkv/point_transformer.h).
//
// Model directory: config.json ("model_type": "qkv-vision", "model": "vit" or "point", the
// architecture, the pixel normalisation, the class names, the training report) and
// model.safetensors (the weights, f32 or bf16).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "qkv/point_transformer.h"
#include "qkv/tensor.h"
#include "qkv/trainer.h"
#include "qkv/vit.h"

namespace qkv::vision {

inline constexpr std::array<const char*, 10> kFashionMnistClasses = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// Model input from pixels: (p / 255 − mean) / std, the Fashion-MNIST training images'
// mean and standard deviation (0.2860, 0.3530), stored in config.json with the model.
inline constexpr float kPixelMean = 0.2860f;
inline constexpr float kPixelStd = 0.3530f;

// Grey images and, when known, their labels.
struct Images {
  std::int64_t count = 0, height = 0, width = 0;
  std::vector<std::uint8_t> pixels;  // (count, height, width), 0 = black
  std::vector<std::int64_t> labels;  // (count) in [0, classes), or empty
  Images slice(std::int64_t begin, std::int64_t end) const;  // images [begin, end)
};

// An IDX image file (gzip or plain: N×H×W unsigned bytes) or one PNG or PGM image, told
// apart by their first bytes. Every image must be height × width (0 = any); an image of
// another size is an error naming the file and both sizes (qkv::Error, as for a file that
// is none of these or is damaged).
Images read_images(const std::string& path, std::int64_t height = 28, std::int64_t width = 28);
// An IDX label file for `images` (their count must match), each label in [0, classes).
void read_labels(const std::string& path, Images& images, int classes = 10);

struct FashionMnist {
  Images train, validation, test;
};
// DIR as fetch_data.sh writes it; validation = the last `validation` training images.
FashionMnist load_fashion_mnist(const std::string& dir, std::int64_t validation = 5000);

// The light augmentation of small-image training: a random crop of the image padded by
// `pad` black pixels on each side (a shift of up to ±pad) and, with probability 1/2, a
// horizontal flip. Then, with probability `erase`, Random Erasing (Zhong et al. 2017): one
// rectangle of the cropped image, of area U(0.02, 0.4)·H·W and aspect ratio h/w =
// exp(U(ln 0.3, ln 3.3)) (sides rounded and kept within 1..H and 1..W), at a uniform
// place, is set to kErasePixel, the mean pixel, which normalises to about 0. Erasing draws
// from its own counters, so the crops and flips are the same whatever `erase` is.
struct Augmentation {
  std::int64_t pad = 2;
  bool flip = true;
  double erase = 0.0;  // in [0, 1]
};
// round(kPixelMean · 255): an erased pixel, (73 / 255 − kPixelMean) / kPixelStd ≈ 0.0008.
inline constexpr std::uint8_t kErasePixel = 73;

// The rectangle Random Erasing sets in image b of a batch augmented with `seed`: rows
// [y0, y0 + height), columns [x0, x0 + width); height = width = 0 when the image is not
// erased (probability 1 − erase).
struct ErasedRectangle {
  std::int64_t y0 = 0, x0 = 0, height = 0, width = 0;
};
ErasedRectangle erased_rectangle(std::int64_t H, std::int64_t W, double erase, std::uint64_t seed, std::int64_t b);

// images [indices] -> (B, 1, H, W) model input, normalised; augmented when `augment` is
// given, image i's crop and flip drawn from counter_uniform(seed, ...) of its position in
// the batch, so a batch is a pure function of (seed, indices).
Tensor to_input(const Images& images, std::span<const std::int64_t> indices,
                const Augmentation* augment = nullptr, std::uint64_t seed = 0);

// images [indices] -> (B, H, W) pixels, cropped, flipped and erased as `augment` and `seed`
// say (the same draws as to_input), or copied when `augment` is null.
std::vector<std::uint8_t> augmented_pixels(const Images& images, std::span<const std::int64_t> indices,
                                           const Augmentation* augment = nullptr, std::uint64_t seed = 0);

// Training batch `step` of `epoch`: the epoch's order is a Fisher–Yates shuffle seeded
// by (seed, epoch); the batch is its rows [step·B, step·B + B) (the last one shorter),
// augmented with a seed of (seed, epoch, step). A pure function of its arguments, so a torch
// twin can be fed the same batches.
struct Batch {
  Tensor images;                     // (B, 1, H, W)
  std::vector<std::int64_t> labels;  // (B)
  std::vector<std::int64_t> indices; // (B) into the training images
  std::uint64_t seed = 0;            // the augmentation's (and the point sampling's) seed
};
Batch training_batch(const Images& train, std::uint64_t seed, std::int64_t epoch, std::int64_t step,
                     std::int64_t batch, const Augmentation& augment);
// training_batch without its images (none is augmented): the indices, labels and seed.
// The seed also draws the batch's patch dropout (VisionTrainingOptions::patch_dropout).
Batch training_batch_without_images(const Images& train, std::uint64_t seed, std::int64_t epoch, std::int64_t step,
                                    std::int64_t batch);
std::int64_t steps_per_epoch(std::int64_t images, std::int64_t batch);

// The network of a vision model: "vit", a Vision Transformer over the image's patches, or
// "point", a Point Transformer over points sampled from its inked pixels. One interface
// for the training loop and the classifier.
//
// The point model's input: a training image's points are drawn afresh each time it is seen
// (models::image_to_points with the batch's seed and counter = its position in the batch),
// after the pixel augmentation; at inference every image is sampled with seed 0 and counter
// 0, so a prediction depends on the image alone.
struct VisionNetwork {
  std::string model = "vit";                // "vit" or "point"
  models::VitConfig vit;                    // when "vit"
  models::PointTransformerConfig point;     // when "point"
  std::int64_t point_image_size = 28;       // when "point": the side of the images it takes
  models::VitWeights vit_weights;
  models::PointTransformerWeights point_weights;

  struct Record {
    models::VitWeights::Record vit;
    models::PointTransformerWeights::Record point;
  };

  // Throws qkv::Error naming the field out of range or an unknown model.
  void check() const;
  std::int64_t image_size() const;
  std::int64_t classes() const;
  std::int64_t num_parameters() const;

  // Fresh weights of `model` with the given configuration (the other one is ignored).
  static VisionNetwork initialized(const VisionNetwork& shape, std::uint64_t seed);
  VisionNetwork zeros_like() const;

  // images [indices] -> the network's input: (B, 1, H, W) normalised pixels for the ViT,
  // (B, N, 3) points for the point model. augment/seed as for to_input; without augment
  // this is the inference input.
  Tensor input(const Images& images, std::span<const std::int64_t> indices, const Augmentation* augment = nullptr,
               std::uint64_t seed = 0) const;
  // input -> logits (B, classes). kept: the ViT's patch dropout (VitWeights::forward);
  // the point model takes none.
  Tensor forward(const Tensor& input, Record* record = nullptr, std::span<const std::int64_t> kept = {}) const;
  // dlogits (B, classes) -> adds ∂/∂θ into grads (of zeros_like's shape).
  void backward(const Tensor& dlogits, const Record& record, VisionNetwork& grads) const;
  nn::ParameterList parameters();
};

struct VisionTrainingOptions {
  std::string data;                     // the Fashion-MNIST directory (load_fashion_mnist)
  std::string model = "vit";            // "vit" or "point" (VisionNetwork)
  models::VitConfig vit;
  models::PointTransformerConfig point;
  std::int64_t epochs = 20;
  std::int64_t batch = 128;
  double peak_lr = 1e-3;
  double warmup_epochs = 1.0;
  double min_lr_ratio = 0.01;
  double weight_decay = 0.05;
  double clip_norm = 1.0;
  double label_smoothing = 0.1;
  Augmentation augment;
  // vit only, in [0, 1): each training image keeps K = N − round(patch_dropout · N) of
  // its N patches (at least 1), drawn by models::random_patches from the batch's seed
  // (qkv/vit.h: patch dropout); validation and test see every patch.
  double patch_dropout = 0.0;
  // > 0: patch dropout in the first patch_dropout_epochs epochs only, every patch after
  // them (the last epochs train on what inference sees); 0: in every epoch.
  std::int64_t patch_dropout_epochs = 0;
  std::uint64_t seed = 0;       // weights, order, augmentation
  std::int64_t train_limit = 0; // > 0: train on the first N training images only (tests)
  std::int64_t patience = 0;    // > 0: stop after this many epochs without a better validation accuracy
  std::string out_dir;          // model.safetensors, config.json, checkpoint.safetensors
  bool resume = false;          // continue from out_dir/checkpoint.safetensors
  std::int64_t checkpoint_every = 500;  // steps; 0 = at epoch ends and on interruption only
  std::int64_t stop_at = 0;     // > 0: stop after this step with a checkpoint, as `stop` does
  std::string precision = "f32";  // the products of training: f32, or bf16 (qkv/nn/precision.h)
  bool bf16 = false;            // write model.safetensors in bf16 (half the size)
  std::string command;          // recorded in config.json
  const distributed::Communicator* communicator = nullptr;
};

// What train_vision returns: the loop's result (qkv/trainer.h: steps, interrupted, seconds,
// items_per_s() in images, loss, the validation accuracy of every epoch as evaluations,
// checkpoint, reductions) and what the task adds.
struct VisionTrainingResult : train::LoopResult {
  std::vector<double> validation_accuracy;  // per finished epoch (this run and before)
  std::int64_t best_epoch = 0;       // 1-based: the weights written
  double test_accuracy = 0.0;        // of the best epoch's weights (not when interrupted)
  std::int64_t num_parameters = 0;
  std::string out_dir;               // the options' out_dir

  // One JSON object, `qkv train vit --json`'s and qkv.vision.train's: the loop's fields,
  // then validation_accuracy, best_epoch, num_parameters, out, and test_accuracy unless
  // interrupted.
  std::string to_json() const;
};

// Trains (or resumes) and writes out_dir/{config.json, model.safetensors} with the weights
// of the epoch of best validation accuracy, scored on the test set. The checkpoint (last
// weights, AdamW moments, step, the per-epoch validation accuracies and the best weights so
// far) is written every checkpoint_every steps, at every epoch end and when the loop stops:
// the one training loop (train::fit, task "vit" or "point"), an evaluation per epoch, the
// best kept. Data-parallel over the ranks of `communicator` when it has more than one: every
// rank augments the whole batch (the draws are by position in it) and trains on its rows.
// The options of `qkv train vit` / `qkv train point` and qkv.train("vit") / ("point"),
// declared once (qkv/options.h); model is fixed by the set ("vit" or "point").
const options::OptionSet<VisionTrainingOptions>& vit_training_options();
const options::OptionSet<VisionTrainingOptions>& point_training_options();

VisionTrainingResult train_vision(const VisionTrainingOptions& options, const FashionMnist& data,
                                  const train::ProgressCallback& on_progress = {},
                                  const std::atomic<bool>* stop = nullptr);

struct Prediction {
  std::int64_t label = 0;            // argmax
  float score = 0.0f;                // its probability
  std::vector<float> probabilities;  // (classes)
};

// The confusion matrix: counts[truth · classes + predicted].
struct Evaluation {
  std::int64_t images = 0, correct = 0;
  std::int64_t classes = 0;
  std::vector<std::int64_t> counts;
  double accuracy() const { return images ? static_cast<double>(correct) / static_cast<double>(images) : 0.0; }
};
Evaluation evaluate(std::span<const Prediction> predictions, std::span<const std::int64_t> labels,
                    std::int64_t classes);

class Classifier {
 public:
  // A directory written by train_vision; errors name the file and what is wrong with it
  // (another kind of model, a missing or misshapen weight, a weight that is not finite).
  static Classifier load(const std::string& dir);
  static Classifier from_network(VisionNetwork network, std::vector<std::string> class_names);

  // Images of the model's size (else an error naming both sizes) -> one prediction each,
  // in `batch`-sized forwards. With `tta` (test-time augmentation), an image's
  // probabilities are the mean of its own and its left-right mirror image's, at two
  // forwards per image: training flips images at random (AugmentOptions::flip), so the
  // model has learnt both sides; an image and its mirror then get the same prediction.
  std::vector<Prediction> classify(const Images& images, std::int64_t batch = 256, bool tta = false) const;
  // ViT: image i's attention rollout over its patches (models::attention_rollout): (grid²).
  std::vector<float> rollout(const Images& images, std::int64_t i) const;

  // Point model: image i's points and what the last block's vector attention does with them.
  struct PointView {
    std::vector<float> points;              // (N, 3) x, y in [−1, 1], its pixel's intensity
    std::int64_t neighbors = 0;             // K
    std::vector<std::int64_t> neighbor;     // (N, K) each point's neighbours, nearest first
    std::vector<float> weight;              // (N, K) their attention weights, the softmax's
                                            // per-channel weights averaged over the C channels
    std::vector<float> received;            // (N) Σ of the weights a point receives, / N
  };
  PointView point_view(const Images& images, std::int64_t i) const;

  // Image i's attention in every block, as qkv::viz shows it. ViT: per block the
  // probabilities (heads, 1 + N, 1 + N) over the tokens "[CLS]", then the patches
  // "r0c0", "r0c1", ... (row-major). Point model: per block (1, N, N), row n point n's
  // weights over its K neighbours (as PointView's, the per-channel softmax averaged over
  // the channels), zero elsewhere, over the tokens "pt0" ... "pt{N-1}". Every row sums to 1.
  struct Attention {
    std::vector<std::string> tokens;  // L
    std::vector<Tensor> layers;       // per block (H, L, L)
  };
  Attention attention(const Images& images, std::int64_t i) const;

  const VisionNetwork& network() const { return net_; }
  const std::string& model() const { return net_.model; }  // "vit" or "point"
  std::int64_t image_size() const { return net_.image_size(); }
  std::int64_t classes() const { return net_.classes(); }
  const std::vector<std::string>& class_names() const { return class_names_; }
  const std::string& report_json() const { return report_json_; }  // training's, or "{}"

 private:
  VisionNetwork net_;
  std::vector<std::string> class_names_;
  float mean_ = kPixelMean, std_ = kPixelStd;
  std::string report_json_ = "{}";
};

// Registers "qkv-vision" (apps/vision/model_type.cpp) in the model registry; called by
// qkv::apps::register_model_types().
void register_vision_model_type();

// The options of `qkv classify` and Classifier.classify / predict_proba, declared once
// (qkv/options.h). show_images and misclassified pick the images of `qkv classify --html`'s
// page: the CLI's alone (Python has the rollout itself, Classifier.rollout).
struct ClassifyQueryOptions {
  std::int64_t batch = 256;  // images per forward
  bool tta = false;          // average each image's probabilities with its mirror image's
  std::string show_images;   // "3,17,42": 0-based indices into the image file, as given
  std::vector<std::int64_t> shown;  // show_images parsed, in the order given (the set's check)
  bool misclassified = false;       // the page shows the images the model got wrong
};
const options::OptionSet<ClassifyQueryOptions>& classify_options();

}  // namespace qkv::vision
