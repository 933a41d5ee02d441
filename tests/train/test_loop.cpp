// The one training loop (qkv/trainer.h) on a task small enough to write out by hand: a linear
// regression whose batches are a pure function of the step. The loop is held against its
// naive twin (the steps written here one by one), and stop, resume, evaluation, the best
// weights, early stopping, progress and the checkpoint's refusals are each checked.

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/expect_error.h"
#include "nn/check.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/trainer.h"
#include "temp_dir.h"

namespace {

using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, expect_error, TempDir

// y = W·x + b fitted to targets t = A·x (A fixed), loss = mean over the batch's rows of
// |y − t|² / 2. Step s's batch: 6 rows of x ~ N(0, 1) from an Rng seeded by s.
struct Regression : train::Task {
  Tensor w = Tensor::zeros({2, 3}), b = Tensor::zeros({2});
  Tensor gw = Tensor::zeros({2, 3}), gb = Tensor::zeros({2});
  std::vector<double> scores;  // evaluate() returns these in turn (then the last again)
  std::size_t evaluations = 0;
  static constexpr std::int64_t kRows = 6;

  nn::ParameterList parameters() override { return {{"w", &w}, {"b", &b}}; }
  nn::ParameterList gradients() override { return {{"w", &gw}, {"b", &gb}}; }
  train::StepResult step(const train::StepContext& ctx) override {
    const qkv::distributed::RowShare rows = ctx.share(kRows);
    ctx.weigh(static_cast<double>(rows.hi - rows.lo));
    return add_gradient(ctx.step, rows.lo, rows.hi);
  }
  // The batch's rows [lo, hi): adds ∂(mean loss)/∂θ into gw, gb.
  train::StepResult add_gradient(std::int64_t step, std::int64_t lo, std::int64_t hi) {
    qkv::Rng rng(qkv::mix64(static_cast<std::uint64_t>(step) + 17));
    const double A[2][3] = {{1.0, -2.0, 0.5}, {0.25, 1.5, -1.0}};
    double loss = 0;
    const auto n = static_cast<double>(hi - lo);
    for (std::int64_t r = 0; r < kRows; ++r) {
      float x[3];
      for (float& v : x) v = static_cast<float>(rng.normal());
      if (r < lo || r >= hi) continue;
      for (int i = 0; i < 2; ++i) {
        double y = b.data_as<float>()[i], t = 0;
        for (int j = 0; j < 3; ++j) {
          y += double{w.data_as<float>()[i * 3 + j]} * x[j];
          t += A[i][j] * x[j];
        }
        loss += (y - t) * (y - t) / 2 / n;
        for (int j = 0; j < 3; ++j) gw.data_as<float>()[i * 3 + j] += static_cast<float>((y - t) * x[j] / n);
        gb.data_as<float>()[i] += static_cast<float>((y - t) / n);
      }
    }
    return {.loss = loss, .count = n, .items = n};
  }
  double evaluate() override {
    if (scores.empty()) return 0.0;
    return scores[std::min(evaluations++, scores.size() - 1)];
  }
};

std::vector<float> weights(const Regression& t) {
  std::vector<float> v = t.w.to_vector();
  for (float x : t.b.to_vector()) v.push_back(x);
  return v;
}

train::LoopOptions options(const std::string& checkpoint = "") {
  train::LoopOptions o;
  o.task = "regression";
  o.steps = 12;
  o.lr = {0.05, 3, 0.1};
  o.clip_norm = 1.0;
  o.adam.weight_decay = 0.01;
  o.checkpoint = checkpoint;
  o.identity = {{"seed", "17"}};
  return o;
}

// The loop equals its naive twin: the same steps written out here (zero, gradient, clip,
// AdamW at the schedule's rate), bit for bit.
TEST(TrainingLoop, EqualsTheStepsWrittenOut) {
  Regression looped;
  const train::LoopResult r = train::fit(looped, options());
  EXPECT_EQ(r.steps, 12);
  EXPECT_FALSE(r.interrupted);
  EXPECT_TRUE(r.checkpoint.empty());  // none asked for, none written

  Regression naive;
  train::AdamW opt(naive.parameters(), {.weight_decay = 0.01});
  const train::Schedule schedule{0.05, 3, 12, 0.1};
  for (std::int64_t s = 0; s < 12; ++s) {
    train::zero_grad(naive.gradients());
    naive.add_gradient(s, 0, Regression::kRows);
    train::clip_grad_norm(naive.gradients(), 1.0);
    opt.step(naive.gradients(), train::cosine_schedule(s, schedule));
  }
  EXPECT_EQ(weights(looped), weights(naive));
  EXPECT_NE(weights(looped), weights(Regression{}));  // it trained
}

// A warm-up as long as the run is cut to a tenth of it; a ratio of 1 is a constant rate.
TEST(TrainingLoop, TheScheduleWarmsUpWithinTheRunOrStaysConstant) {
  Regression t;
  train::LoopOptions o = options();
  o.steps = 20;
  o.lr = {0.1, 50, 0.0};
  std::vector<double> lr;
  train::fit(t, o, [&](const train::Progress& p) { lr.push_back(p.lr); });
  ASSERT_EQ(lr.size(), 20u);
  EXPECT_DOUBLE_EQ(lr[0], 0.05);  // warm-up over 20 / 10 = 2 steps
  EXPECT_DOUBLE_EQ(lr[1], 0.1);
  EXPECT_LT(lr[19], 0.01);
  Regression c;
  o.lr = {0.1, 0, 1.0};
  lr.clear();
  train::fit(c, o, [&](const train::Progress& p) { lr.push_back(p.lr); });
  for (double x : lr) EXPECT_EQ(x, 0.1);
}

// Stopped by the flag (Ctrl-C) or at a step, with a checkpoint; resumed, the run ends where
// the straight run ends, bit for bit, evaluations and best weights included.
TEST(TrainingLoop, StopThenResumeEqualsTheStraightRun) {
  TempDir dir("loop");
  for (const bool by_flag : {true, false}) {
    train::LoopOptions o = options(dir.file(by_flag ? "flag.safetensors" : "at.safetensors"));
    o.steps_per_epoch = 4;
    o.eval_every = 1;
    o.keep_best = true;
    o.higher_is_better = false;
    Regression straight;
    straight.scores = {3.0, 1.0, 2.0};
    const train::LoopResult whole = train::fit(straight, o);

    Regression first;
    first.scores = {3.0, 1.0, 2.0};
    std::atomic<bool> stop{false};
    train::LoopOptions stopping = o;
    if (!by_flag) stopping.stop_at = 6;
    const train::LoopResult a = train::fit(first, stopping, [&](const train::Progress& p) {
      if (by_flag && p.step == 6) stop.store(true);  // seen before step 7 starts
    }, &stop);
    EXPECT_TRUE(a.interrupted);
    EXPECT_EQ(a.steps, 6);
    EXPECT_EQ(a.checkpoint, o.checkpoint);
    EXPECT_EQ(qkv::SafeTensors::open(o.checkpoint).metadata().at("step"), "6");

    Regression second;
    second.scores = {1.0, 2.0};  // epochs 2 and 3; epoch 1's evaluation comes from the checkpoint
    train::LoopOptions resume = o;
    resume.resume = true;
    const train::LoopResult b = train::fit(second, resume);
    EXPECT_EQ(b.resumed_from, 6);
    EXPECT_EQ(b.steps, 12);
    ASSERT_EQ(b.evaluations.size(), whole.evaluations.size());
    for (std::size_t i = 0; i < b.evaluations.size(); ++i) {
      EXPECT_EQ(b.evaluations[i].step, whole.evaluations[i].step);
      EXPECT_EQ(b.evaluations[i].score, whole.evaluations[i].score);
    }
    EXPECT_EQ(b.best, whole.best);
    EXPECT_EQ(weights(second), weights(straight)) << (by_flag ? "stopped by the flag" : "stopped at a step");
  }
}

// The best evaluation's weights are restored at the end (the checkpoint keeps the last
// ones); the first of equal scores counts; patience stops after that many without a better.
TEST(TrainingLoop, KeepsTheBestWeightsAndStopsEarly) {
  TempDir dir("loop");
  train::LoopOptions o = options(dir.file("best.safetensors"));
  o.eval_every = 2;
  o.keep_best = true;
  Regression t;
  t.scores = {0.1, 0.5, 0.5, 0.2, 0.3, 0.4};  // higher is better: the one after step 4
  std::map<std::int64_t, std::vector<float>> seen;
  const train::LoopResult r = train::fit(t, o, [&](const train::Progress& p) { seen[p.step] = weights(t); });
  ASSERT_EQ(r.evaluations.size(), 6u);
  EXPECT_EQ(r.best, 1);
  EXPECT_EQ(r.evaluations[1].step, 4);
  EXPECT_EQ(weights(t), seen[4]);
  EXPECT_NE(weights(t), seen[12]);

  Regression early;
  early.scores = {0.1, 0.5, 0.5, 0.2, 0.3, 0.4};
  train::LoopOptions patient = o;
  patient.patience = 2;
  const train::LoopResult e = train::fit(early, patient);
  EXPECT_TRUE(e.stopped_early);
  EXPECT_EQ(e.steps, 8);  // evaluations at 6 and 8 were not better than 4's
  EXPECT_EQ(weights(early), seen[4]);
}

// One Progress per step: the epoch, the loss, the rate's unit, evaluations marked; and the
// result's JSON fields.
TEST(TrainingLoop, ReportsProgressAndTheCommonJsonFields) {
  Regression t;
  t.scores = {1.0, 0.5};
  train::LoopOptions o = options();
  o.steps = 6;
  o.steps_per_epoch = 3;
  o.eval_every = 1;
  o.unit = "rows";
  o.metric = "error";
  o.higher_is_better = false;
  std::vector<train::Progress> seen;
  const train::LoopResult r = train::fit(t, o, [&](const train::Progress& p) { seen.push_back(p); });
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen[2].epoch, 1);
  EXPECT_EQ(seen[3].epoch, 2);
  EXPECT_EQ(seen[5].epochs, 2);
  EXPECT_TRUE(seen[2].epoch_end && seen[2].evaluated && seen[5].evaluated && seen[5].best);
  EXPECT_FALSE(seen[1].evaluated || seen[1].epoch_end);
  EXPECT_EQ(seen[5].unit, "rows");
  EXPECT_EQ(seen[5].loss, r.loss);
  EXPECT_GT(seen[2].epoch_loss, 0);
  const std::string line = train::progress_line(seen[5]);
  EXPECT_NE(line.find("step 6/6"), std::string::npos) << line;
  EXPECT_NE(line.find("epoch 2/2"), std::string::npos) << line;
  EXPECT_NE(line.find("error 0.5000 (best)"), std::string::npos) << line;
  const nlohmann::json j = nlohmann::json::parse(r.to_json());
  for (const char* key : {"task", "steps", "interrupted", "stopped_early", "seconds", "items_per_s", "unit", "precision", "loss",
                          "evaluations", "metric", "best_step", "best_score", "checkpoint"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["steps"], 6);
  EXPECT_EQ(j["best_step"], 6);
  EXPECT_EQ(j["evaluations"], nlohmann::json::parse("[[3, 1.0], [6, 0.5]]"));
  EXPECT_EQ(r.items, 36.0);
}

// --resume refuses, naming why: no checkpoint, a finished run, another task's, another
// run's (each key that differs, with both values), a file that is no training checkpoint,
// a damaged one; a step that is not a count.
TEST(TrainingLoop, ResumeRefusesWhatIsNotThisRunsCheckpoint) {
  TempDir dir("loop");
  const std::string path = dir.file("ck.safetensors");
  train::LoopOptions o = options(path);
  o.resume = true;
  Regression t;
  expect_error([&] { train::fit(t, o); }, "--resume: no checkpoint at " + path);
  o.resume = false;
  train::fit(t, o);
  o.resume = true;
  expect_error([&] { train::fit(t, o); }, "is finished (step 12 of 12)");
  o.steps = 20;
  train::LoopOptions other_task = o;
  other_task.task = "another";
  expect_error([&] { train::fit(t, other_task); }, "is a checkpoint of 'qkv train regression', not of 'qkv train another'");
  train::LoopOptions other_run = o;
  other_run.identity["seed"] = "18";
  other_run.lr.peak_lr = 0.5;
  expect_error([&] { train::fit(t, other_run); }, "was written by a run with other options (lr '0.050000000000000003' "
                                                 "there, '0.5' now; seed '17' there, '18' now)");
  {  // the loop's own file with the step replaced
    const qkv::SafeTensors ck = qkv::SafeTensors::open(path);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& name : ck.names()) tensors.emplace_back(name, ck.get(name).contiguous());
    std::map<std::string, std::string> meta = ck.metadata();
    meta["step"] = "7x";
    qkv::save_safetensors(dir.file("step.safetensors"), tensors, meta);
    meta.erase("qkv_checkpoint");
    qkv::save_safetensors(dir.file("plain.safetensors"), tensors, meta);
  }
  train::LoopOptions bad_step = o;
  bad_step.checkpoint = dir.file("step.safetensors");
  expect_error([&] { train::fit(t, bad_step); }, "metadata \"step\" must be a count >= 0, got \"7x\"");
  train::LoopOptions plain = o;
  plain.checkpoint = dir.file("plain.safetensors");
  expect_error([&] { train::fit(t, plain); }, "not a qkv training checkpoint");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);  // damaged
  expect_error([&] { train::fit(t, o); }, path);
}

// Bad options are named.
TEST(TrainingLoop, BadOptionsAreNamed) {
  Regression t;
  train::LoopOptions o = options();
  o.steps = 0;
  expect_error([&] { train::fit(t, o); }, "train regression: steps must be >= 1, got 0");
  o = options();
  o.lr.peak_lr = -1;
  expect_error([&] { train::fit(t, o); }, "lr must be > 0");
  o = options();
  o.resume = true;
  expect_error([&] { train::fit(t, o); }, "--resume needs a checkpoint path");
}

}  // namespace
