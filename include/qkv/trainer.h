// The one training loop: every model qkv trains (the date translator, the language model,
// matrix factorisation, SASRec, the ViT and the point model) runs through train::fit, which
// owns what every training run needs and a task should not write again:
//
//   - steps, or epochs of steps; evaluation every N steps or epochs and after the last step;
//     the weights of the best evaluation kept (restored at the end), early stopping;
//   - AdamW with gradient clipping and the learning rate schedule (warm-up, then cosine);
//   - stopping on a flag (Ctrl-C) or at a step (stop_at), always with a checkpoint, and
//     resume from it, bit for bit the run that was not stopped;
//   - the checkpoint: one safetensors file (weights, AdamW moments, the best weights, the
//     evaluations so far, the step and what the run is), written whole or not at all
//     (qkv/files.h); a resume of another task's or another run's checkpoint is refused,
//     naming what differs;
//   - progress after every step (one Progress type; progress_line prints it);
//   - data-parallel training over the ranks of a communicator (mpirun): every rank its
//     contiguous share of each batch, the gradients summed during the backward
//     (distributed::GradientReducer), weights from rank 0, files and progress from rank 0.
//
// A task keeps only what is its own: its data, its model's forward and backward (the loss)
// and its evaluation. The pattern is ggml-opt's fit with callbacks and Hugging Face's
// Trainer; the loop reads top to bottom as llm.c's does (src/train/loop.cpp).
//
//   struct MyTask : train::Task {
//     nn::ParameterList parameters() override { return model.parameters(); }
//     nn::ParameterList gradients() override { return grads.parameters(); }
//     train::StepResult step(const train::StepContext& ctx) override {
//       Batch b = batch_of(ctx.step);                       // a pure function of the step
//       ctx.weigh(b.targets);                               // before the backward
//       double loss = model.forward_backward(b, grads, ctx.ready());
//       return {.loss = loss, .count = b.targets, .items = b.tokens};
//     }
//     double evaluate() override { return held_out_loss(model); }
//   };
//   train::LoopOptions o;  o.task = "mine";  o.steps = 1000;  o.checkpoint = "out/checkpoint.safetensors";
//   train::LoopResult r = train::fit(task, o, print_progress, &interrupted);
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/distributed.h"
#include "qkv/nn.h"
#include "qkv/options.h"
#include "qkv/train.h"

namespace qkv::train {

// What a task's step is told. `step` counts from 0 over the whole run; with epochs,
// epoch = step / steps_per_epoch and step_in_epoch = step % steps_per_epoch.
struct StepContext {
  std::int64_t step = 0, epoch = 0, step_in_epoch = 0;
  int rank = 0, ranks = 1;

  // The rows of a batch of `rows` this rank trains on (all of them in one process).
  distributed::RowShare share(std::int64_t rows) const { return distributed::row_share(rows, rank, ranks); }
  // Must be called once per step before the backward, with the number of items (targets,
  // rows, ratings) this rank's loss is the mean over: data-parallel, each rank's gradients
  // then count by its share of all ranks' items, so the sum is the whole batch's mean.
  // Does nothing in one process.
  std::function<void(double count)> weigh;
  // The backward's gradients-ready hook (data-parallel: starts the sums during the
  // backward), or null. A backward that takes none may ignore it.
  const nn::GradientsReady* ready = nullptr;
};

// What a task's step gives back, of this rank's rows.
struct StepResult {
  double loss = 0.0;     // mean over `count` items (its gradients added into gradients())
  double count = 0.0;    // items the loss is the mean over (weigh's count)
  double correct = -1;   // of them, predicted right; -1 when the task does not measure it
  double items = 0.0;    // what the rate counts (tokens, images, ratings)
};

class Task {
 public:
  virtual ~Task() = default;
  // The weights AdamW updates, named as the checkpoint names them, and their gradients
  // (same order, names and shapes). Called once, before the first step.
  virtual nn::ParameterList parameters() = 0;
  virtual nn::ParameterList gradients() = 0;
  // Forward and backward of step ctx.step on this rank's rows (ctx.share): adds the
  // gradient of the mean loss into gradients(), which the loop zeroed. A pure function of
  // the step and the weights, so a resumed run takes the steps the straight run took.
  virtual StepResult step(const StepContext& ctx) = 0;
  // A score of the current weights (held-out loss, validation accuracy): called on rank 0
  // only, its value shared with the others.
  virtual double evaluate() { return 0.0; }
};

// The learning rate of every step: a linear warm-up over warmup_steps to peak_lr, then a
// half cosine down to peak_lr · min_lr_ratio at the last step (cosine_schedule).
// min_lr_ratio = 1 and warmup_steps = 0 give a constant rate. A warm-up as long as the run
// or longer (a quick test of a recipe made for a long run) is cut to a tenth of the run, so
// the rate still reaches its peak and decays.
struct LrSchedule {
  double peak_lr = 1e-3;
  std::int64_t warmup_steps = 0;
  double min_lr_ratio = 1.0;
};

// How a run is checkpointed, stopped and resumed, and over which ranks: the part of
// LoopOptions a task's options carry through as they are.
struct RunOptions {
  std::string checkpoint;            // its path; "" = none: nothing written, stop without one
  bool resume = false;               // continue from `checkpoint`
  std::int64_t checkpoint_every = 0; // steps; 0 = only when the loop ends (and at epoch ends)
  std::int64_t stop_at = 0;          // > 0: stop after this step, as the stop flag does
  // The dtype of the matrix products in each step's forward and backward: "f32", or "bf16"
  // (bf16 inputs, f32 accumulation; weights, gradients, optimizer state, normalisation,
  // softmax and loss in f32: qkv/nn/precision.h). Part of the run's identity: a resume in
  // another precision is refused, naming both.
  std::string precision = "f32";
  // Data-parallel over the ranks of `communicator` when it has more than one.
  const distributed::Communicator* communicator = nullptr;
};

struct LoopOptions : RunOptions {
  std::string task;                  // "dates", "lm", ...: in the checkpoint; another task's is refused
  std::int64_t steps = 1;            // the last step (>= 1): epochs · steps_per_epoch with epochs
  std::int64_t steps_per_epoch = 0;  // > 0: the run is epochs of this many steps
  std::string unit = "tok";          // what StepResult::items counts, for the rate ("tok", "img")

  // Evaluation (Task::evaluate): every eval_every steps, or with epochs every eval_every
  // epochs (at epoch ends); 0 = none during the run. eval_at_end: also after the last step.
  std::int64_t eval_every = 0;
  bool eval_at_end = false;
  std::string metric = "score";      // what evaluate returns ("held-out loss", "validation accuracy")
  bool higher_is_better = true;
  bool keep_best = false;            // restore the weights of the best evaluation at the end
  std::int64_t patience = 0;         // > 0: stop after this many evaluations without a better one

  AdamWOptions adam;
  double clip_norm = 0.0;            // > 0: clip_grad_norm before every step
  LrSchedule lr;

  bool checkpoint_at_epoch_end = false;
  // What makes this run this run (the model's configuration, seed, batch, data ...): written
  // into the checkpoint; --resume refuses a checkpoint whose identity differs, naming the
  // keys; data-parallel ranks must agree on all of it. The loop adds its own settings (the
  // optimizer's, the schedule's, clipping, the task).
  std::map<std::string, std::string> identity;
  // Called on the writing rank just before each checkpoint is written, with its step (a
  // task that writes its model with every checkpoint, as the language model does).
  std::function<void(std::int64_t step)> before_checkpoint;
};

// After every step, on the writing rank.
struct Progress {
  std::string task;
  std::int64_t step = 0, total = 0;   // steps done, of
  std::int64_t epoch = 0, epochs = 0; // with epochs: the 1-based epoch of this step, of
  bool epoch_end = false;
  double loss = 0.0;                  // of this step (all ranks)
  double accuracy = -1.0;             // of this step's batch, when the task measures it
  double epoch_loss = -1.0;           // at an epoch end: the epoch's mean loss
  double lr = 0.0;                    // this step's
  double items_per_s = 0.0;           // since the start of this run
  std::string unit;
  double elapsed_s = 0.0;
  bool evaluated = false;             // evaluated after this step:
  std::string metric;
  double score = 0.0;
  bool best = false;                  // the best evaluation so far
};
using ProgressCallback = std::function<void(const Progress&)>;

// "step 40/100 ████······ loss 1.2345  acc 97.1%  lr 1.00e-03  5000 tok/s  0:10 elapsed, ETA 0:15"
// (+ "  epoch 3/20", "  held-out loss 1.23 (best)").
std::string progress_line(const Progress& p);
// The one printer: on a terminal (tty) the line redrawn after every step, a step that
// evaluated or ended an epoch kept on screen; elsewhere one line every `every` steps
// (0: total / 20), at evaluations and at the end. Writes to `out` (stderr in the CLI).
ProgressCallback progress_printer(std::ostream& out, bool tty, std::int64_t every = 0);

struct Evaluation {
  std::int64_t step = 0;
  double score = 0.0;
};

struct LoopResult {
  std::string task;
  std::int64_t steps = 0;            // done, including those before a resume
  std::int64_t total = 0;            // the options' steps
  std::int64_t resumed_from = 0;     // the checkpoint's step (0 for a fresh run)
  bool interrupted = false;          // stopped by the flag or stop_at; a checkpoint was written
  bool stopped_early = false;        // by patience
  double seconds = 0.0;              // of this run
  double step_seconds = 0.0;         // of it, in steps (evaluation and checkpoints left out)
  double items = 0.0;                // this run's, all ranks
  std::string unit;
  std::string precision;             // the products' ("f32", "bf16")
  double items_per_s() const { return seconds > 0 ? items / seconds : 0.0; }
  double loss = 0.0;                 // of the last step
  std::vector<Evaluation> evaluations;  // this run's and those before a resume
  std::string metric;
  std::int64_t best = -1;            // index into evaluations of the best, -1 = none
  std::string checkpoint;            // written, "" = none
  distributed::ReductionTotals reductions;
  // One JSON object: the fields every `qkv train --json` and every Python train() result has
  // (task, steps, interrupted, stopped_early, seconds, items_per_s, unit, precision, loss, evaluations
  // [[step, score]...], metric, best_step, best_score, checkpoint, and ranks and the
  // reductions' totals when data-parallel), then the members of `task_fields`, a JSON object
  // of the task's own fields, in their order.
  std::string to_json(std::string_view task_fields = "{}") const;
};

// Runs (or resumes) the loop to options.steps; see the top of this file. `stop` is read once
// per step. Throws qkv::Error for options out of range and, with resume, a checkpoint that
// is missing, damaged, another task's, or another run's (naming what differs).
LoopResult fit(Task& task, const LoopOptions& options, const ProgressCallback& on_progress = {},
               const std::atomic<bool>* stop = nullptr);

// The run identity's text of a value, as the loop writes it (doubles to 17 digits).
std::string identity_value(double v);


// Declares, in a task's option set (qkv/options.h), the options every training run takes:
// out (the directory), resume, checkpoint_every, stop_at, precision, from the fields of
// those names that every task's options struct has.
template <class T>
void declare_run_options(options::OptionSet<T>& set, const std::string& writes) {
  set.path("out", &T::out_dir, "Output directory: " + writes + ", checkpoint.safetensors");
  set.flag("resume", &T::resume,
           "Continue from OUT/checkpoint.safetensors, bit for bit as the run that was not stopped. "
           "Refused, naming why: a checkpoint of another task, of a run with other options (each "
           "option that differs named), damaged, or of a finished run");
  set.integer("checkpoint_every", &T::checkpoint_every, 0, options::kMaxSteps,
              "Steps between checkpoints (0 = when the run ends or stops only)");
  set.integer("stop_at", &T::stop_at, 0, options::kMaxSteps,
              "Stop after this step with a checkpoint, as Ctrl-C does (the CLI exits 130; continue "
              "with --resume); 0 = never");
  set.choice("precision", &T::precision, {"f32", "bf16"},
             "The matrix products of training: f32, or bf16 as PyTorch's CPU autocast (bf16 inputs, "
             "f32 accumulation; weights, optimizer, LayerNorm, softmax and loss in f32). bf16 needs a "
             "CPU with AVX512-BF16 or AMX; evaluation runs in f32");
}

// The RunOptions of a task's options struct T, whose fields declare_run_options declared
// (resume, checkpoint_every, stop_at, precision) beside its communicator, checkpointing to
// `checkpoint`: what every task hands the loop as it is.
template <class T>
RunOptions run_options(const T& o, std::string checkpoint) {
  RunOptions r;
  r.checkpoint = std::move(checkpoint);
  r.resume = o.resume;
  r.checkpoint_every = o.checkpoint_every;
  r.stop_at = o.stop_at;
  r.precision = o.precision;
  r.communicator = o.communicator;
  return r;
}

}  // namespace qkv::train
