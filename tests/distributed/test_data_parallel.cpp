// Data-parallel training (include/qkv/distributed.h: broadcast, GradientReducer; the date
// translator's training with DateTrainingOptions::communicator), run under mpirun with 2, 3
// and 4 ranks in the same binary as the ring tests (tests/distributed/tests.cmake). Every
// rank knows what every other rank holds (values are a formula of the rank), so each can
// check the reduced result itself; the training test runs single-process training on every
// rank beside the data-parallel run and compares the weights.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dates/dates.h"
#include "language_model/language_model.h"
#include "qkv/distributed.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"

namespace qkv {
namespace {

using distributed::Communicator;
using distributed::GradientReducer;

Communicator& comm() {
  static Communicator c = Communicator::world();
  return c;
}

// The value rank r holds at element i of tensor t.
float value_at(int r, int t, std::int64_t i) { return 0.25f * static_cast<float>(r + 1) + 0.001f * static_cast<float>(t * 100 + i); }

// Tensors of a few sizes (some larger than a bucket, some smaller), filled for `rank`.
std::vector<Tensor> filled(int rank) {
  const std::vector<std::int64_t> sizes = {7, 40, 1, 300, 16, 33};
  std::vector<Tensor> out;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    Tensor x = Tensor::zeros({sizes[t]}, DType::f32);
    float* p = x.data_as<float>();
    for (std::int64_t i = 0; i < sizes[t]; ++i) p[i] = value_at(rank, static_cast<int>(t), i);
    out.push_back(x);
  }
  return out;
}

nn::ParameterList list_of(std::vector<Tensor>& tensors) {
  nn::ParameterList list;
  for (std::size_t t = 0; t < tensors.size(); ++t) list.emplace_back("g" + std::to_string(t), &tensors[t]);
  return list;
}

// Σ_r weight(r)·value_at(r, ...), checked on every element, after reports in several orders
// and bucket sizes (64 bytes: a bucket per tensor or less; 1 MiB: one bucket), over two steps
// with different weights (the reducer is reused).
TEST(GradientReducer, SumsWeightedGradientsOverTheRanks) {
  const int N = comm().size(), me = comm().rank();
  for (std::size_t bucket_bytes : {std::size_t{64}, std::size_t{1} << 20}) {
    std::vector<Tensor> grads = filled(me);
    const nn::ParameterList list = list_of(grads);
    GradientReducer reducer(list, comm(), bucket_bytes);
    for (int step = 0; step < 2; ++step) {
      std::vector<Tensor> fresh = filled(me);
      for (std::size_t t = 0; t < grads.size(); ++t) std::memcpy(list[t].second->data(), fresh[t].data(), fresh[t].nbytes());
      const auto weight = [&](int r) { return step == 0 ? 1.0 : 1.0 / (r + 2); };
      reducer.begin(weight(me));
      // Report the last tensors first, one at a time, and leave the first one for finish().
      for (std::size_t t = list.size(); t-- > 1;) reducer.ready({list[t]});
      const distributed::ReductionTimings timings = reducer.finish();
      // Every bucket but the one holding the first tensor started during the "backward":
      // with 64-byte buckets each tensor has its own; with 1 MiB there is only that one.
      EXPECT_EQ(timings.buckets, bucket_bytes == 64 ? 6 : 1);
      EXPECT_EQ(timings.started_early, timings.buckets - 1);
      for (std::size_t t = 0; t < list.size(); ++t) {
        const float* got = list[t].second->data_as<float>();
        for (std::int64_t i = 0; i < list[t].second->numel(); ++i) {
          double want = 0;
          for (int r = 0; r < N; ++r) want += static_cast<float>(value_at(r, static_cast<int>(t), i) * static_cast<float>(weight(r)));
          ASSERT_NEAR(got[i], want, 1e-5 * std::abs(want) + 1e-6)
              << "tensor " << t << " element " << i << " step " << step << " bucket_bytes " << bucket_bytes;
        }
      }
    }
  }
}

TEST(GradientReducer, RefusesUnknownAndRepeatedGradients) {
  std::vector<Tensor> grads = filled(comm().rank());
  const nn::ParameterList list = list_of(grads);
  GradientReducer reducer(list, comm(), 64);
  Tensor stranger = Tensor::zeros({3}, DType::f32);
  EXPECT_THROW(reducer.ready({{"stranger", &stranger}}), Error);
  reducer.ready({list[5]});
  EXPECT_THROW(reducer.ready({list[5]}), Error);
  reducer.finish();  // every rank reported the same, so the reductions pair up
}

TEST(Broadcast, EveryRankGetsTheRootsTensors) {
  const int N = comm().size(), me = comm().rank();
  for (int root : {0, N - 1}) {
    std::vector<Tensor> mine = filled(me);
    distributed::broadcast(list_of(mine), comm(), root);
    const std::vector<Tensor> want = filled(root);
    for (std::size_t t = 0; t < mine.size(); ++t) EXPECT_EQ(mine[t].to_vector(), want[t].to_vector());
  }
  // Ranks that disagree on the sizes all throw, before anything moves.
  std::vector<Tensor> odd = {Tensor::zeros({me == 0 ? 5 : 6}, DType::f32)};
  EXPECT_THROW(distributed::broadcast(list_of(odd), comm(), 0), Error);
}

// A directory every rank names the same way (the ranks of one job share mpirun's local
// daemon as parent), removed by rank 0 at the end.
std::string job_dir(const std::string& what) {
  return (std::filesystem::temp_directory_path() /
          ("qkv_dp_" + std::to_string(getppid()) + "_" + std::to_string(comm().size()) + "_" + what))
      .string();
}

models::DateTrainingOptions small_run(const std::string& out_dir) {
  models::DateTrainingOptions o;
  o.steps = 20;
  o.batch = 13;  // not a multiple of 2, 3 or 4: the shares differ
  o.warmup_steps = 4;
  o.peak_lr = 2e-3;
  o.seed = 5;
  o.eval_size = 8;
  o.checkpoint_every = 0;
  o.out_dir = out_dir;
  o.model.d_model = 32;
  o.model.nhead = 2;
  o.model.dim_feedforward = 64;
  o.model.num_encoder_layers = 1;
  o.model.num_decoder_layers = 1;
  return o;
}

// The criterion: with the same global batch, the weights after 20 steps equal
// single-process training's within 1e-5 relative: the norm of the difference over the whole
// model relative to the norm of the weights. Each tensor's largest difference is held to
// 1e-4 of its largest magnitude besides (so one small tensor cannot hide in the norm; the
// sums over ranks are taken in another order than one process's, and AdamW, which divides
// each gradient by its own running magnitude, passes on rounding in small gradients at full
// size: the largest per-tensor differences are a few 1e-5). Left out, by construction: the
// key part of each attention's in_proj_bias. It adds q·b to every score of a query alike,
// which softmax ignores, so the model's output does not depend on it and its gradient is 0
// in exact arithmetic: what the backward gives is rounding, which AdamW turns into steps of
// ordinary size (1e-4 after 20 steps); another summation order gives another walk. Those
// entries are only checked to be finite.
// The comparison described above, of two training checkpoints' weights; E is the model
// width (the key part of an attention's in_proj_bias, or GPT-2's c_attn.bias, is [E, 2E)).
void expect_same_weights(const std::string& parallel_file, const std::string& single_file, std::int64_t E) {
  const SafeTensors p = SafeTensors::open(parallel_file);
  const SafeTensors s = SafeTensors::open(single_file);
  ASSERT_EQ(p.names(), s.names());
  double diff2 = 0, norm2 = 0;
  for (const std::string& name : s.names()) {
    if (name.starts_with("optimizer.")) continue;
    const std::vector<float> a = p.get(name).to_vector(), b = s.get(name).to_vector();
    ASSERT_EQ(a.size(), b.size()) << name;
    const bool qkv_bias = name.ends_with("in_proj_bias") || name.ends_with("c_attn.bias");
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const auto at = static_cast<std::int64_t>(i);
      if (qkv_bias && at >= E && at < 2 * E) {  // the key part: see above
        EXPECT_TRUE(std::isfinite(a[i]) && std::isfinite(b[i])) << name << "[" << i << "]";
        continue;
      }
      const double d = std::abs(double(a[i]) - double(b[i]));
      worst = std::max(worst, d);
      scale = std::max(scale, std::abs(double(b[i])));
      diff2 += d * d;
      norm2 += double(b[i]) * b[i];
    }
    EXPECT_LE(worst, 1e-4 * scale) << name;
  }
  EXPECT_LE(std::sqrt(diff2), 1e-5 * std::sqrt(norm2)) << "the whole model";
}

TEST(DataParallelDates, WeightsAfter20StepsEqualSingleProcess) {
  const int me = comm().rank();
  const std::string parallel_dir = job_dir("parallel");
  const std::string single_dir = job_dir("single_" + std::to_string(me));
  models::DateTrainingOptions parallel = small_run(parallel_dir);
  parallel.communicator = &comm();
  const models::DateTrainingResult pr = models::train_dates(parallel, nullptr);
  const models::DateTrainingResult sr = models::train_dates(small_run(single_dir), nullptr);
  EXPECT_EQ(pr.steps, 20);
  EXPECT_EQ(pr.reductions.ranks, comm().size());
  EXPECT_EQ(pr.reductions.started_early, pr.reductions.total) << "every bucket started during the backward";
  comm().barrier();  // rank 0's files are written
  expect_same_weights(parallel_dir + "/checkpoint.safetensors", single_dir + "/checkpoint.safetensors",
                      small_run("").model.d_model);
  EXPECT_EQ(comm().min(pr.exact_match), comm().max(pr.exact_match)) << "every rank learns rank 0's score";
  EXPECT_GE(sr.exact_match, 0.0);
  comm().barrier();
  std::filesystem::remove_all(single_dir);
  if (me == 0) std::filesystem::remove_all(parallel_dir);
}

// The same for the language model: a tiny GPT-2 on a generated text, 7 windows a step.
TEST(DataParallelLm, WeightsAfter20StepsEqualSingleProcess) {
  const int me = comm().rank();
  // Every rank must be given the same options, the text's path included: rank 0 writes it.
  const std::string text = job_dir("lm_text") + ".txt";
  if (me == 0) {
    std::ofstream f(text);
    for (int i = 0; i < 400; ++i) f << "line " << i << " says " << (i * 7919) % 1000 << " and the year is 19" << i % 100 << ".\n";
  }
  comm().barrier();
  const auto train = [&](const std::string& out_dir, const distributed::Communicator* c) {
    models::LmTrainingOptions o;
    o.text = text;
    o.vocab_size = 300;
    o.model.n_layer = 1;
    o.model.n_embd = 32;
    o.model.n_head = 2;
    o.context = 32;
    o.steps = 20;
    o.batch = 7;
    o.warmup_steps = 4;
    o.eval_every = 0;
    o.checkpoint_every = 0;
    o.out_dir = out_dir;
    o.communicator = c;
    return models::train_lm(o, nullptr);
  };
  const std::string parallel_dir = job_dir("lm_parallel");
  const std::string single_dir = job_dir("lm_single_" + std::to_string(me));
  const models::LmTrainingResult pr = train(parallel_dir, &comm());
  const models::LmTrainingResult sr = train(single_dir, nullptr);
  EXPECT_EQ(pr.steps, 20);
  EXPECT_NEAR(pr.loss, sr.loss, 1e-5 * std::abs(sr.loss));
  EXPECT_EQ(pr.reductions.started_early, pr.reductions.total);
  comm().barrier();
  expect_same_weights(parallel_dir + "/checkpoint.safetensors", single_dir + "/checkpoint.safetensors", 32);
  comm().barrier();
  std::filesystem::remove_all(single_dir);
  if (me == 0) {
    std::filesystem::remove_all(parallel_dir);
    std::filesystem::remove(text);
  }
}

TEST(DataParallelDates, RanksWithDifferentOptionsAllRefuse) {
  models::DateTrainingOptions o = small_run(job_dir("refused"));
  o.communicator = &comm();
  o.seed = comm().rank() == 1 ? 6 : 5;
  try {
    models::train_dates(o, nullptr);
    ADD_FAILURE() << "expected qkv::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("were given different options"), std::string::npos) << e.what();
  }
  models::DateTrainingOptions few = small_run(job_dir("refused"));
  few.communicator = &comm();
  few.batch = comm().size() - 1;
  EXPECT_THROW(models::train_dates(few, nullptr), Error);
  comm().barrier();
  if (comm().rank() == 0) std::filesystem::remove_all(job_dir("refused"));
}

}  // namespace
}  // namespace qkv
