// The one training loop (qkv/trainer.h): read top to bottom, a run is
//   check the options -> the weights (fresh, or the checkpoint's) -> for each step: stop?,
//   the task's forward and backward, the gradient sums (data-parallel), clip, AdamW at the
//   schedule's rate, evaluate?, checkpoint?, progress -> the last checkpoint -> the best weights.

#include "qkv/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "io/json_bounded.h"
#include "qkv/error.h"
#include "qkv/nn/precision.h"
#include "qkv/safetensors.h"
#include "train/checkpoint.h"

namespace qkv::train {

namespace {

using Clock = std::chrono::steady_clock;

// Everything the loop itself contributes to a run's identity: what changes the weights a
// run reaches besides the task's own options.
std::map<std::string, std::string> full_identity(const LoopOptions& o) {
  std::map<std::string, std::string> id = o.identity;
  id["task"] = o.task;
  id["steps_per_epoch"] = std::to_string(o.steps_per_epoch);
  id["lr"] = identity_value(o.lr.peak_lr);
  id["warmup_steps"] = std::to_string(o.lr.warmup_steps);
  id["min_lr_ratio"] = identity_value(o.lr.min_lr_ratio);
  id["weight_decay"] = identity_value(o.adam.weight_decay);
  id["betas"] = identity_value(o.adam.beta1) + "," + identity_value(o.adam.beta2);
  id["eps"] = identity_value(o.adam.eps);
  id["decay_vectors"] = o.adam.decay_vectors ? "1" : "0";
  id["clip_norm"] = identity_value(o.clip_norm);
  id["keep_best"] = o.keep_best ? "1" : "0";
  id["precision"] = o.precision;
  return id;
}

// What data-parallel ranks must agree on: the identity and every setting of the loop.
std::string ranks_key(const LoopOptions& o) {
  std::ostringstream key;
  for (const auto& [k, v] : full_identity(o)) key << k << '=' << v << '\n';
  key << o.steps << ' ' << o.eval_every << ' ' << o.eval_at_end << ' ' << o.patience << ' ' << o.checkpoint << ' '
      << o.resume << ' ' << o.checkpoint_every << ' ' << o.checkpoint_at_epoch_end << ' ' << o.stop_at;
  return key.str();
}

bool better(double a, double b, bool higher) { return higher ? a > b : a < b; }

// The index of the best evaluation (the first of equals), -1 for none.
std::int64_t best_of(const std::vector<Evaluation>& e, bool higher) {
  std::int64_t best = -1;
  for (std::size_t i = 0; i < e.size(); ++i)
    if (best < 0 || better(e[i].score, e[static_cast<std::size_t>(best)].score, higher))
      best = static_cast<std::int64_t>(i);
  return best;
}

void copy_into(const nn::ParameterList& from, std::vector<Tensor>& to) {
  if (to.empty())
    for (const auto& [name, t] : from) to.push_back(Tensor::zeros(t->shape()));
  for (std::size_t i = 0; i < from.size(); ++i) to[i].copy_from(*from[i].second);
}

}  // namespace

std::string identity_value(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

LoopResult fit(Task& task, const LoopOptions& o, const ProgressCallback& on_progress, const std::atomic<bool>* stop) {
  const std::string what = "train " + o.task;
  QKV_CHECK(!o.task.empty(), "train: the loop needs the task's name");
  QKV_CHECK(o.steps >= 1, what << ": steps must be >= 1, got " << o.steps);
  QKV_CHECK(o.steps_per_epoch >= 0 && o.eval_every >= 0 && o.patience >= 0 && o.checkpoint_every >= 0 &&
                o.stop_at >= 0 && o.lr.warmup_steps >= 0,
            what << ": steps_per_epoch, eval_every, patience, checkpoint_every, stop_at and warmup must be >= 0");
  QKV_CHECK(o.lr.peak_lr > 0 && std::isfinite(o.lr.peak_lr), what << ": lr must be > 0, got " << o.lr.peak_lr);
  QKV_CHECK(o.lr.min_lr_ratio >= 0 && o.lr.min_lr_ratio <= 1,
            what << ": min_lr_ratio must be in [0, 1], got " << o.lr.min_lr_ratio);
  QKV_CHECK(o.clip_norm >= 0 && std::isfinite(o.clip_norm), what << ": clip_norm must be >= 0");
  QKV_CHECK(!o.resume || !o.checkpoint.empty(), what << ": --resume needs a checkpoint path");
  // The products' dtype for every step (qkv/nn/precision.h); bf16 only where it runs natively.
  const DType products = nn::parse_precision(o.precision, what);
  if (products == DType::bf16) nn::check_bf16_products(what + " --precision bf16");

  // Data-parallel over more than one rank: the ranks agree on everything first.
  const distributed::Communicator* comm =
      o.communicator != nullptr && o.communicator->size() > 1 ? o.communicator : nullptr;
  const int rank = comm ? comm->rank() : 0, ranks = comm ? comm->size() : 1;
  if (comm) distributed::check_same_everywhere(ranks_key(o), *comm, what);
  const bool writer = rank == 0;  // writes the checkpoint, evaluates, reports progress

  const nn::ParameterList params = task.parameters(), grads = task.gradients();
  QKV_CHECK(params.size() == grads.size(), what << ": the task gave " << grads.size() << " gradients for "
                                                << params.size() << " parameters");
  for (std::size_t i = 0; i < params.size(); ++i)
    QKV_CHECK(params[i].second->shape() == grads[i].second->shape(),
              what << ": gradient " << i << " ('" << grads[i].first << "') does not match parameter '"
                   << params[i].first << "' " << params[i].second->shape_string());
  AdamW opt(params, o.adam);
  const std::map<std::string, std::string> identity = full_identity(o);

  LoopResult result;
  result.task = o.task;
  result.total = o.steps;
  result.unit = o.unit;
  result.precision = o.precision;
  result.metric = o.metric;
  result.reductions.ranks = ranks;
  std::vector<Tensor> best_weights;  // of evaluations[result.best], when keep_best
  std::int64_t start = 0;
  if (o.resume) {
    const TrainingCheckpoint ck = read_checkpoint(o.checkpoint, o.task, identity, params, opt);
    start = ck.step;
    result.evaluations = ck.evaluations;
    if (o.keep_best && !ck.best.empty()) {
      best_weights = ck.best;
    }
    QKV_CHECK(start <= o.steps, o.checkpoint << ": is at step " << start << ", past the run's last step " << o.steps);
    // Resuming a finished run would train nothing and report nothing true.
    QKV_CHECK(start < o.steps, what << ": --resume: the run of " << o.checkpoint << " is finished (step " << start
                                    << " of " << o.steps << "): nothing to train; give more steps to train it further");
  }
  result.resumed_from = start;
  result.best = best_of(result.evaluations, o.higher_is_better);
  // Evaluations since the best one: what early stopping counts.
  std::int64_t since_best =
      result.best < 0 ? 0 : static_cast<std::int64_t>(result.evaluations.size()) - 1 - result.best;

  std::optional<distributed::GradientReducer> reducer;
  if (comm) {
    distributed::broadcast(params, *comm, 0);
    reducer.emplace(grads, *comm);
  }

  const std::int64_t warmup = o.lr.warmup_steps < o.steps ? o.lr.warmup_steps : o.steps / 10;
  const Schedule schedule{o.lr.peak_lr, warmup, o.steps, o.lr.min_lr_ratio};
  const std::int64_t per_epoch = o.steps_per_epoch;
  const auto t0 = Clock::now();
  const auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  double epoch_loss = 0.0, epoch_count = 0.0;
  const auto write_checkpoint = [&](std::int64_t at) {
    if (!writer || o.checkpoint.empty()) return;
    if (o.before_checkpoint) o.before_checkpoint(at);
    TrainingCheckpoint ck;
    ck.step = at;
    ck.evaluations = result.evaluations;
    if (o.keep_best && result.best >= 0) ck.best = best_weights;
    write_checkpoint_file(o.checkpoint, o.task, identity, params, opt, ck);
    result.checkpoint = o.checkpoint;
  };

  std::int64_t step = start;
  for (; step < o.steps; ++step) {
    bool stopping = (stop && stop->load()) || (o.stop_at > 0 && step >= o.stop_at);
    if (comm) stopping = comm->max(stopping ? 1.0 : 0.0) > 0.0;  // every rank stops at the same step
    if (stopping) {
      result.interrupted = true;
      break;
    }
    const auto s0 = Clock::now();
    StepContext ctx;
    ctx.step = step;
    ctx.epoch = per_epoch > 0 ? step / per_epoch : 0;
    ctx.step_in_epoch = per_epoch > 0 ? step % per_epoch : step;
    ctx.rank = rank;
    ctx.ranks = ranks;
    bool weighed = false;
    double all_count = 0.0;
    ctx.weigh = [&](double count) {
      QKV_CHECK(!weighed, what << ": the task weighed step " << step << " twice");
      weighed = true;
      if (!comm) return;
      all_count = comm->sum(count);
      reducer->begin(all_count > 0 ? count / all_count : 0.0);
    };
    if (comm) ctx.ready = &reducer->hook();
    zero_grad(grads);
    StepResult r;
    {
      // The step's forward and backward, with their products in the run's precision (this
      // thread's scope, as torch.autocast's; evaluation below runs outside it, in f32).
      const nn::ProductPrecision precision(products);
      r = task.step(ctx);
    }
    if (comm) {
      QKV_CHECK(weighed, what << ": the task did not weigh step " << step << " (StepContext::weigh)");
      result.reductions.add(reducer->finish());
      // A rank whose share of a short last batch is empty adds nothing (its mean is 0 / 0).
      r.loss = all_count > 0 ? comm->sum(r.count > 0 ? r.loss * r.count : 0.0) / all_count : 0.0;
      if (r.correct >= 0) r.correct = comm->sum(r.correct);
      r.items = comm->sum(r.items);
      r.count = all_count;
    }
    if (o.clip_norm > 0) clip_grad_norm(grads, o.clip_norm);
    const double lr = cosine_schedule(step, schedule);
    opt.step(grads, lr);
    result.step_seconds += since(s0);
    result.items += r.items;
    result.loss = r.loss;
    epoch_loss += r.loss * r.count;
    epoch_count += r.count;

    Progress p;
    p.task = o.task;
    p.step = step + 1;
    p.total = o.steps;
    p.loss = r.loss;
    p.accuracy = r.correct >= 0 && r.count > 0 ? r.correct / r.count : -1.0;
    p.lr = lr;
    p.unit = o.unit;
    const bool last = step + 1 == o.steps;
    bool due = false;
    if (per_epoch > 0) {
      p.epoch = step / per_epoch + 1;
      p.epochs = (o.steps + per_epoch - 1) / per_epoch;
      p.epoch_end = (step + 1) % per_epoch == 0 || last;
      if (p.epoch_end) {
        p.epoch_loss = epoch_count > 0 ? epoch_loss / epoch_count : 0.0;
        epoch_loss = epoch_count = 0.0;
      }
      due = o.eval_every > 0 && p.epoch_end && p.epoch % o.eval_every == 0;
    } else {
      due = o.eval_every > 0 && p.step % o.eval_every == 0;
    }
    if (due || (last && o.eval_at_end)) {
      double score = writer ? task.evaluate() : 0.0;
      if (comm) score = comm->sum(score);  // rank 0's, on every rank
      result.evaluations.push_back({p.step, score});
      p.evaluated = true;
      p.metric = o.metric;
      p.score = score;
      p.best = result.best < 0 ||
               better(score, result.evaluations[static_cast<std::size_t>(result.best)].score, o.higher_is_better);
      if (p.best) {
        result.best = static_cast<std::int64_t>(result.evaluations.size()) - 1;
        since_best = 0;
        if (o.keep_best) copy_into(params, best_weights);
      } else {
        ++since_best;
      }
    }
    if (!last && ((o.checkpoint_every > 0 && p.step % o.checkpoint_every == 0) ||
                  (o.checkpoint_at_epoch_end && p.epoch_end)))
      write_checkpoint(p.step);
    p.elapsed_s = since(t0);
    p.items_per_s = p.elapsed_s > 0 ? result.items / p.elapsed_s : 0.0;
    if (writer && on_progress) on_progress(p);
    if (o.patience > 0 && p.evaluated && since_best >= o.patience && !last) {
      result.stopped_early = true;
      ++step;
      break;
    }
  }
  result.steps = step;
  result.seconds = since(t0);
  write_checkpoint(step);
  // The best evaluation's weights are the run's result (the checkpoint keeps the last ones).
  if (o.keep_best && result.best >= 0 && !result.interrupted && best_weights.size() == params.size())
    for (std::size_t i = 0; i < params.size(); ++i) params[i].second->copy_from(best_weights[i]);
  return result;
}

std::string LoopResult::to_json(std::string_view task_fields) const {
  nlohmann::ordered_json j;
  j["task"] = task;
  j["steps"] = steps;
  j["interrupted"] = interrupted;
  j["stopped_early"] = stopped_early;
  j["seconds"] = seconds;
  j["items_per_s"] = items_per_s();
  j["unit"] = unit;
  j["precision"] = precision;
  j["loss"] = loss;
  j["evaluations"] = evaluations_json(evaluations);
  if (evaluations.empty()) j["metric"] = nullptr; else j["metric"] = metric;
  if (best >= 0) {
    j["best_step"] = evaluations[static_cast<std::size_t>(best)].step;
    j["best_score"] = evaluations[static_cast<std::size_t>(best)].score;
  } else {
    j["best_step"] = nullptr;
    j["best_score"] = nullptr;
  }
  j["checkpoint"] = checkpoint;
  if (reductions.ranks > 1) {
    j["ranks"] = reductions.ranks;
    j["reduce_wait_s"] = reductions.wait_s;
    j["reduce_progress_s"] = reductions.progress_s;
    j["reduce_pack_s"] = reductions.pack_s;
    j["reductions_started_early"] = reductions.started_early;
    j["reductions"] = reductions.total;
  }
  const auto own = io::parse_json<nlohmann::ordered_json>(task_fields, "train: the task's result fields");
  QKV_CHECK(own.is_object(), "train: the task's result fields must be a JSON object");
  for (const auto& [key, value] : own.items()) j[key] = value;
  return j.dump();
}

}  // namespace qkv::train
