// Image classification on Fashion-MNIST (Xiao, Rasul & Vollgraf 2017): the data, the
// augmented batches, the training loop of `qkv train vision`, a trained model directory and
// `qkv classify`'s predictions.
//
// Data: `scripts/fetch_data.sh fashion-mnist DIR` copies Debian's dataset-fashion-mnist
// into DIR: 60,000 training and 10,000 test images, 28×28 grey, 10 classes. Training uses
// the first 55,000 training images; validation, which picks the epoch kept, the last 5,000;
// the test set is scored only after training, for the report.
//
// Model directory: config.json ("model_type": "qkv-vision", the architecture, the pixel
// normalisation, the class names, the training report) and model.safetensors (the
// weights, f32 or bf16).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "qkv/tensor.h"
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
// horizontal flip.
struct Augmentation {
  std::int64_t pad = 2;
  bool flip = true;
};

// images [indices] -> (B, 1, H, W) model input, normalised; augmented when `augment` is
// given, image i's crop and flip drawn from counter_uniform(seed, ...) of its position in
// the batch, so a batch is a pure function of (seed, indices).
Tensor to_input(const Images& images, std::span<const std::int64_t> indices,
                const Augmentation* augment = nullptr, std::uint64_t seed = 0);

// Training batch `step` of `epoch`: the epoch's order is a Fisher–Yates shuffle seeded
// by (seed, epoch); the batch is its rows [step·B, step·B + B) (the last one shorter),
// augmented with a seed of (seed, epoch, step). A pure function of its arguments, so a torch
// twin can be fed the same batches.
struct Batch {
  Tensor images;                     // (B, 1, H, W)
  std::vector<std::int64_t> labels;  // (B)
  std::vector<std::int64_t> indices; // (B) into the training images
};
Batch training_batch(const Images& train, std::uint64_t seed, std::int64_t epoch, std::int64_t step,
                     std::int64_t batch, const Augmentation& augment);
std::int64_t steps_per_epoch(std::int64_t images, std::int64_t batch);

struct VisionTrainingOptions {
  std::string model = "vit";
  models::VitConfig vit;
  std::int64_t epochs = 20;
  std::int64_t batch = 128;
  double peak_lr = 1e-3;
  double warmup_epochs = 1.0;
  double min_lr_ratio = 0.01;
  double weight_decay = 0.05;
  double clip_norm = 1.0;
  double label_smoothing = 0.1;
  Augmentation augment;
  std::uint64_t seed = 0;       // weights, order, augmentation
  std::int64_t train_limit = 0; // > 0: train on the first N training images only (tests)
  std::string out_dir;          // model.safetensors, config.json, checkpoint.safetensors
  bool resume = false;          // continue from out_dir/checkpoint.safetensors
  std::int64_t checkpoint_every = 500;  // steps; 0 = at epoch ends and on interruption only
  std::int64_t stop_at = 0;     // > 0: stop after this step with a checkpoint, as `stop` does
  bool bf16 = false;            // write model.safetensors in bf16 (half the size)
  std::string command;          // recorded in config.json
};

struct VisionProgress {
  std::int64_t step = 0, total = 0;  // steps done, of all epochs
  std::int64_t epoch = 0;            // 1-based, the epoch of this step
  double loss = 0.0;                 // of the last step
  double accuracy = 0.0;             // of the last step's (augmented) batch
  double lr = 0.0;
  double images_per_s = 0.0;         // training images since start
  double elapsed_s = 0.0;
  bool epoch_end = false;            // validation_accuracy is this epoch's
  double validation_accuracy = 0.0;
};

struct VisionTrainingResult {
  std::int64_t steps = 0;            // done, including those before a resume
  bool interrupted = false;          // stopped by `stop` or stop_at; a checkpoint was written
  double seconds = 0.0;              // of this run
  double images_per_s = 0.0;
  std::vector<double> validation_accuracy;  // per finished epoch (this run and before)
  std::int64_t best_epoch = 0;       // 1-based: the weights written
  double test_accuracy = 0.0;        // of the best epoch's weights (not when interrupted)
  std::int64_t num_parameters = 0;
  std::string checkpoint;
  std::string out_dir;               // the options' out_dir

  // One JSON object, `qkv train vision --json`'s and qkv.vision.train's: steps, interrupted,
  // seconds, images_per_s, validation_accuracy, best_epoch, num_parameters, checkpoint, out,
  // and test_accuracy unless interrupted.
  std::string to_json() const;
};

// Trains (or resumes) and writes out_dir/{config.json, model.safetensors} with the weights
// of the epoch of best validation accuracy, scored on the test set. The checkpoint (last
// weights, AdamW moments, step, the per-epoch validation accuracies and the best weights so
// far) is written every checkpoint_every steps, at every epoch end and when the loop stops.
VisionTrainingResult train_vision(const VisionTrainingOptions& options, const FashionMnist& data,
                                  const std::function<void(const VisionProgress&)>& on_progress,
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
  static Classifier from_weights(const models::VitConfig& config, models::VitWeights weights,
                                 std::vector<std::string> class_names);

  // Images of the model's size (else an error naming both sizes) -> one prediction each,
  // in `batch`-sized forwards.
  std::vector<Prediction> classify(const Images& images, std::int64_t batch = 256) const;
  // Image i's attention rollout over its patches (models::attention_rollout): (grid²).
  std::vector<float> rollout(const Images& images, std::int64_t i) const;

  const models::VitConfig& config() const { return config_; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  const std::string& report_json() const { return report_json_; }  // training's, or "{}"

 private:
  models::VitConfig config_;
  models::VitWeights weights_;
  std::vector<std::string> class_names_;
  float mean_ = kPixelMean, std_ = kPixelStd;
  std::string report_json_ = "{}";
};

}  // namespace qkv::vision
