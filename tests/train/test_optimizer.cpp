// AdamW, the schedule, clipping and cross-entropy (qkv/train.h) against their formulas
// written here in double.

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

TEST(Train, CrossEntropyMatchesItsFormula) {
  Tensor logits = randn({3, 5}, 31);
  const std::vector<std::int64_t> targets{2, -100, 4};
  Tensor d;
  const double eps = 0.2;
  train::CrossEntropyResult r = train::cross_entropy(logits, targets, &d, eps);
  EXPECT_EQ(r.counted, 2);
  double want = 0;
  std::vector<double> dwant(15, 0.0);
  for (int row : {0, 2}) {
    double z = 0;
    for (int v = 0; v < 5; ++v) z += std::exp(double{logits.get({row, v})});
    for (int v = 0; v < 5; ++v) {
      const double p = std::exp(double{logits.get({row, v})}) / z;
      const double t = (v == targets[static_cast<std::size_t>(row)] ? 1 - eps : 0) + eps / 5;
      want -= t * std::log(p) / 2;
      dwant[static_cast<std::size_t>(row * 5 + v)] = (p - t) / 2;
    }
  }
  EXPECT_NEAR(r.loss, want, 1e-6);
  const auto got = d.to_vector();
  for (std::size_t i = 0; i < 15; ++i) EXPECT_NEAR(got[i], dwant[i], 1e-6) << i;
  const std::vector<std::int64_t> bad{2, 5, 1};
  EXPECT_THROW(train::cross_entropy(logits, bad, &d), qkv::Error);
}

TEST(Train, AdamWMatchesTheUpdateRuleInDouble) {
  Tensor p = randn({3, 4}, 41), bias = randn({4}, 42);
  nn::ParameterList params{{"w", &p}, {"b", &bias}};
  Tensor gp = randn({3, 4}, 43), gb = randn({4}, 44);
  nn::ParameterList grads{{"w", &gp}, {"b", &gb}};
  train::AdamWOptions o;
  o.weight_decay = 0.1;
  const auto p0 = p.to_vector(), b0 = bias.to_vector();
  std::vector<double> theta(p0.begin(), p0.end()), theta_b(b0.begin(), b0.end());
  std::vector<double> m(12, 0), v(12, 0), mb(4, 0), vb(4, 0);
  train::AdamW opt(params, o);
  const double lrs[] = {1e-2, 5e-3, 2e-3};
  for (int t = 1; t <= 3; ++t) {
    opt.step(grads, lrs[t - 1]);
    const double lr = lrs[t - 1];
    auto update = [&](std::vector<double>& th, std::vector<double>& mm, std::vector<double>& vv,
                      const Tensor& g, bool decay) {
      const auto gv = g.to_vector();
      for (std::size_t i = 0; i < th.size(); ++i) {
        if (decay) th[i] -= lr * o.weight_decay * th[i];
        mm[i] = 0.9 * mm[i] + 0.1 * gv[i];
        vv[i] = 0.999 * vv[i] + 0.001 * gv[i] * gv[i];
        const double mh = mm[i] / (1 - std::pow(0.9, t)), vh = vv[i] / (1 - std::pow(0.999, t));
        th[i] -= lr * mh / (std::sqrt(vh) + o.eps);
      }
    };
    update(theta, m, v, gp, true);
    update(theta_b, mb, vb, gb, false);  // vectors are not decayed by default
  }
  const auto got = p.to_vector(), got_b = bias.to_vector();
  for (std::size_t i = 0; i < 12; ++i) EXPECT_NEAR(got[i], theta[i], 1e-6) << i;
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(got_b[i], theta_b[i], 1e-6) << i;
  EXPECT_EQ(opt.steps(), 3);
  // The state round-trips.
  train::AdamW other(params, o);
  other.load_state(opt.state(), opt.steps());
  EXPECT_EQ(other.state()[0].second.to_vector(), opt.state()[0].second.to_vector());
}

TEST(Train, ScheduleWarmsUpThenFollowsTheCosine) {
  const train::Schedule s{1e-3, 10, 110, 0.1};
  EXPECT_NEAR(train::cosine_schedule(0, s), 1e-4, 1e-12);
  EXPECT_NEAR(train::cosine_schedule(9, s), 1e-3, 1e-12);
  EXPECT_NEAR(train::cosine_schedule(10, s), 1e-3, 1e-12);
  EXPECT_NEAR(train::cosine_schedule(60, s), 1e-4 + 0.9e-3 * 0.5, 1e-12);
  EXPECT_NEAR(train::cosine_schedule(110, s), 1e-4, 1e-12);
}

TEST(Train, ClipScalesToTheMaximumNorm) {
  Tensor a = Tensor::from_vector({2}, std::vector<float>{3, 0});
  Tensor b = Tensor::from_vector({1}, std::vector<float>{4});
  nn::ParameterList g{{"a", &a}, {"b", &b}};
  EXPECT_NEAR(train::clip_grad_norm(g, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(a.get({0}), 0.6, 1e-6);
  EXPECT_NEAR(b.get({0}), 0.8, 1e-6);
  EXPECT_NEAR(train::clip_grad_norm(g, 10.0), 1.0, 1e-6);  // under the limit: unchanged
  EXPECT_NEAR(a.get({0}), 0.6, 1e-6);
}

}  // namespace
