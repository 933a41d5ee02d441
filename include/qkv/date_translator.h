// The date translator: qkv's embedded default model. An encoder–decoder Transformer
// (seq2seq.h) over the characters of dates.h's Vocabulary, trained by qkv itself on
// generated pairs ("Saturday, 21 November 2026" -> "2026-11-21") and evaluated on
// held-out calendar dates it never saw.
//
//   DateTrainingOptions o;  o.steps = 3000;  o.out_dir = "out";
//   DateTrainingResult r = train_dates(o, print_progress, &interrupted);
//   Seq2Seq model = Seq2Seq::load("out");
//   translate_dates(model, {"21 Nov 2026"})  ->  {"2026-11-21"}
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/dates.h"
#include "qkv/seq2seq.h"

namespace qkv::models {

// The architecture `qkv train dates` builds (the vocabulary size filled in).
Seq2SeqConfig date_model_config();

inline constexpr std::int64_t kDateOutputLength = 10;  // "YYYY-MM-DD"

struct DateTrainingOptions {
  std::int64_t steps = 1500;
  std::int64_t batch = 128;          // pairs per step
  double peak_lr = 1e-3;
  std::int64_t warmup_steps = 200;  // steps / 10 when it is not below steps
  double min_lr_ratio = 0.02;        // the cosine ends at peak_lr · this
  double weight_decay = 0.01;
  double clip_norm = 1.0;
  double label_smoothing = 0.0;
  std::uint64_t seed = 0;            // weights and the order of the training pairs
  std::string out_dir;               // model.safetensors, config.json, checkpoint.safetensors
  bool resume = false;               // continue from out_dir/checkpoint.safetensors
  std::int64_t checkpoint_every = 500;  // steps; 0 = only at the end or on interruption
  std::int64_t stop_at = 0;          // > 0: stop after this step with a checkpoint, as `stop` does
  std::int64_t eval_size = 10000;    // held-out dates scored at the end
  std::uint64_t eval_seed = 2026;    // which held-out dates (fixed, so runs compare)
  std::string command;               // recorded in the weights' metadata
  Seq2SeqConfig model = date_model_config();
};

struct TrainingProgress {
  std::int64_t step = 0;       // steps done
  std::int64_t total = 0;
  double loss = 0.0;           // of the last step
  double token_accuracy = 0.0; // of the last step (teacher forcing)
  double lr = 0.0;
  double tokens_per_s = 0.0;   // source + target tokens (padding excluded), since start
  double elapsed_s = 0.0;
};

struct DateTrainingResult {
  std::int64_t steps = 0;          // steps done (including those before a resume)
  bool interrupted = false;        // stopped by the flag; a checkpoint was written
  double seconds = 0.0;            // of this run
  double tokens_per_s = 0.0;
  double exact_match = 0.0;        // on eval_size held-out dates (not measured when interrupted)
  std::int64_t num_parameters = 0;
  std::string checkpoint;          // path written
};

// Trains (or resumes), writes out_dir/model.safetensors + config.json at the end and
// out_dir/checkpoint.safetensors (weights, AdamW moments, step) every checkpoint_every
// steps and when `stop` becomes true (checked once per step; then returns early).
// on_progress is called after every step.
DateTrainingResult train_dates(const DateTrainingOptions& options,
                               const std::function<void(const TrainingProgress&)>& on_progress,
                               const std::atomic<bool>* stop = nullptr);

// The model committed under models/dates, compiled into the library (embedded_model.cpp).
// embedded_date_model() throws qkv::Error when this build has none.
bool has_embedded_date_model();
Seq2Seq embedded_date_model();

// Greedy translation of each input (batched). Inputs longer than the model's max_len or
// that are empty throw qkv::Error naming the input.
std::vector<std::string> translate_dates(const Seq2Seq& model, const std::vector<std::string>& inputs);

// Exact-match accuracy of translate_dates on pairs; `outputs` receives the translations.
double evaluate_dates(const Seq2Seq& model, const std::vector<dates::Pair>& pairs,
                      std::vector<std::string>* outputs = nullptr);

}  // namespace qkv::models
