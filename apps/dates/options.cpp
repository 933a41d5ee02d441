// The date translator's training options, declared once for the CLI and Python.
#include "dates/dates.h"

namespace qkv::models {

const options::OptionSet<DateTrainingOptions>& date_training_options() {
  using T = DateTrainingOptions;
  static const options::OptionSet<T> set = [] {
    options::OptionSet<T> s("train dates", "Train the date translator from scratch (the embedded model's recipe)",
                            [] {
                              T t;
                              t.out_dir = "dates-model";
                              return t;
                            });
    s.integer("steps", &T::steps, 1, options::kMaxSteps, "Optimizer steps");
    s.integer("batch", &T::batch, 1, 65536, "Pairs per step (generated dates and their ISO 8601 forms)");
    s.number("lr", &T::peak_lr, 1e-7, false, 1.0, false, "Peak learning rate (warm-up, then cosine)");
    s.number("label_smoothing", &T::label_smoothing, 0.0, false, 1.0, true, "Label smoothing");
    s.seed("seed", &T::seed, "Seed of the weights and of the training pairs");
    s.integer("eval_size", &T::eval_size, 1, 14000, "Held-out dates scored at the end (never seen in training)");
    train::declare_run_options(s, "model.safetensors, config.json");
    return s;
  }();
  return set;
}

}  // namespace qkv::models
