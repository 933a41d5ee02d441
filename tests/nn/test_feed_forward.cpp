// nn::FeedForward: the inference forward (activation and residual fused into the
// products) against the recording forward (activation apart) and a composition of the
// tested functional pieces, and its backward against finite differences.

#include "nn/check.h"

namespace {

using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, train::, randn, expect_close, check_gradient, ...

class FeedForwardTest : public ::testing::TestWithParam<nn::Activation> {};

TEST_P(FeedForwardTest, FusedAndRecordingForwardsAgree) {
  nn::FeedForward ff(8, 24, GetParam(), true, 3);
  Tensor x = randn({2, 5, 8}, 4), residual = randn({2, 5, 8}, 5);
  const Tensor fused = ff.forward(x, residual);
  nn::FeedForward::Record record;
  const Tensor recorded = ff.forward(x, residual, &record);
  // The definition, from the pieces: linear2(act(linear1(x))) + residual.
  const Tensor pre = nn::linear(x, ff.linear1.weight, ff.linear1.bias);
  const Tensor h = GetParam() == nn::Activation::relu ? nn::relu(pre)
                   : nn::gelu(pre, GetParam() == nn::Activation::gelu ? nn::GeluApproximation::none
                                                                      : nn::GeluApproximation::tanh);
  const Tensor want_t = nn::add(nn::linear(h, ff.linear2.weight, ff.linear2.bias), residual);
  // The recording forward runs exactly those operations.
  EXPECT_EQ(recorded.to_vector(), want_t.to_vector());
  EXPECT_EQ(record.hidden_pre.to_vector(), pre.to_vector());
  // The fused one evaluates the activation with oneDNN's polynomials: within 8u of each
  // hidden value, carried through linear2's 24 terms.
  std::vector<double> want;
  for (float f : want_t.to_vector()) want.push_back(f);
  expect_close(fused, want, 8 * 24 * kU * (1 + max_abs(want)), "fused feed-forward");
}

TEST_P(FeedForwardTest, BackwardMatchesFiniteDifferences) {
  nn::FeedForward ff(6, 10, GetParam(), true, 7), grads(6, 10, GetParam(), true, 7);
  train::zero_grad(grads.parameters());
  Tensor x = randn({3, 6}, 8), w = randn({3, 6}, 9);
  if (GetParam() == nn::Activation::relu) {
    // Keep linear1's outputs away from ReLU's kink, where a difference quotient means nothing.
    ff.linear1.bias = randn({10}, 10, 2.0);
  }
  nn::FeedForward::Record record;
  ff.forward(x, {}, &record);
  const Tensor dx = ff.backward(w, record, grads);
  auto loss = [&] { return dot(ff.forward(x, {}, nullptr), w); };
  check_gradient(x, dx, loss, "dx", GetParam() == nn::Activation::relu ? 1e-3f : 1e-2f);
  auto p = ff.parameters(), g = grads.parameters();
  for (std::size_t i = 0; i < p.size(); ++i)
    check_gradient(*p[i].second, *g[i].second, loss, p[i].first,
                   GetParam() == nn::Activation::relu ? 1e-3f : 1e-2f);
}

INSTANTIATE_TEST_SUITE_P(Activations, FeedForwardTest,
                         ::testing::Values(nn::Activation::relu, nn::Activation::gelu,
                                           nn::Activation::gelu_tanh));

}  // namespace
