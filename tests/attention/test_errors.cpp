// Bad input throws qkv::Error whose message names the argument, what was expected and
// what was given — never a crash. Each case states the fragment the message must contain.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "qkv/attention.h"
#include "qkv/error.h"
#include "attention/expect_error.h"

namespace qkv {
namespace {

using testing::expect_error;

struct Inputs {
  Tensor q = Tensor::zeros({2, 4, 3, 8});
  Tensor k = Tensor::zeros({2, 2, 5, 8});
  Tensor v = Tensor::zeros({2, 2, 5, 6});
};

TEST(AttentionErrors, ShapesNameTheArgument) {
  Inputs in;
  expect_error([&] { scaled_dot_product_attention(Tensor::zeros({4, 3, 8}), in.k, in.v); },
               "q must be 4-d (B, Hq, Lq, Dk), got shape (4, 3, 8)");
  expect_error([&] { scaled_dot_product_attention(in.q, Tensor::zeros({2, 2, 5, 7}), in.v); },
               "k.size(3) (Dk) must equal q.size(3) = 8, got 7");
  expect_error([&] { scaled_dot_product_attention(in.q, Tensor::zeros({1, 2, 5, 8}), in.v); },
               "k.size(0) (B) must equal q.size(0) = 2, got 1");
  expect_error([&] { scaled_dot_product_attention(in.q, in.k, Tensor::zeros({2, 2, 4, 6})); },
               "v.size(2) (Lk) must equal k.size(2) = 5, got 4");
  expect_error([&] { scaled_dot_product_attention(in.q, in.k, Tensor::zeros({2, 1, 5, 6})); },
               "v.size(1) (Hkv) must equal k.size(1) = 2, got 1");
  expect_error([&] {
    scaled_dot_product_attention(in.q, Tensor::zeros({2, 3, 5, 8}), Tensor::zeros({2, 3, 5, 6}));
  }, "q.size(1) = 4 must be a multiple of the key/value heads k.size(1) = 3");
  expect_error([&] { scaled_dot_product_attention(Tensor(), in.k, in.v); }, "q is undefined");
}

TEST(AttentionErrors, DtypesAreTypeErrors) {
  Inputs in;
  expect_error([&] { scaled_dot_product_attention(in.q, in.k.to(DType::f16), in.v); },
               "q, k and v must share one dtype, got q f32, k f16, v f32", ErrorKind::type);
  expect_error([&] {
    scaled_dot_product_attention(in.q.to(DType::boolean), in.k.to(DType::boolean), in.v.to(DType::boolean));
  }, "q must be f32, bf16, f16 or f64, got bool", ErrorKind::type);
}

TEST(AttentionErrors, MasksMustBroadcast) {
  Inputs in;
  AttentionOptions o;
  o.mask = Tensor::zeros({3, 4}, DType::boolean);
  expect_error([&] { attention(in.q, in.k, in.v, o); },
               "mask of shape (3, 4) does not broadcast to (B, Hq, Lq, Lk) = (2, 4, 3, 5)");
  o.mask = Tensor::zeros({3, 2, 4, 3, 5});
  expect_error([&] { attention(in.q, in.k, in.v, o); }, "mask must have rank <= 4");
  o.mask = Tensor::zeros({2, 2, 3, 5});  // H = 2 is neither Hq = 4 nor 1
  expect_error([&] { attention(in.q, in.k, in.v, o); }, "dimension 1 has size 2, expected 4 or 1");
}

TEST(AttentionErrors, OptionsOutOfRange) {
  Inputs in;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto with = [&](auto edit) {
    AttentionOptions o;
    edit(o);
    return [&in, o] { attention(in.q, in.k, in.v, o); };
  };
  expect_error(with([&](AttentionOptions& o) { o.scale = nan; }), "scale must be finite, got nan");
  expect_error(with([&](AttentionOptions& o) { o.scale = inf; }), "scale must be finite, got inf");
  expect_error(with([](AttentionOptions& o) { o.key_lengths = {3, -1}; }),
               "key_lengths[1] must be in [0, Lk = 5], got -1");
  expect_error(with([](AttentionOptions& o) { o.key_lengths = {6, 1}; }),
               "key_lengths[0] must be in [0, Lk = 5], got 6");
  expect_error(with([](AttentionOptions& o) { o.key_lengths = {1}; }),
               "key_lengths must have B = 2 entries, got 1");
  expect_error(with([](AttentionOptions& o) { o.window = Window{-2, 0}; }),
               "window.left must be >= 0, or -1 for unbounded, got -2");
  expect_error(with([](AttentionOptions& o) { o.window = Window{0, -5}; }),
               "window.right must be >= 0, or -1 for unbounded, got -5");
  expect_error(with([](AttentionOptions& o) { o.alibi_slopes = {1, 2}; }),
               "alibi_slopes must have Hq = 4 entries, got 2");
  expect_error(with([&](AttentionOptions& o) { o.alibi_slopes = {1, 2, 3, float(nan)}; }),
               "alibi_slopes[3] must be finite");
  expect_error(with([](AttentionOptions& o) { o.softcap = 0.0; }), "softcap must be a finite number > 0, got 0");
  expect_error(with([](AttentionOptions& o) { o.dropout_p = 1.5; }), "dropout_p must be in [0, 1], got 1.5");
  expect_error(with([](AttentionOptions& o) { o.dropout_p = -0.1; }), "dropout_p must be in [0, 1], got -0.1");
  expect_error(with([&](AttentionOptions& o) { o.dropout_p = nan; }), "dropout_p must be in [0, 1], got nan");
}

TEST(AttentionErrors, ValidateAcceptsGoodInputSilently) {
  Inputs in;
  AttentionOptions o;
  o.causal = true;
  o.window = Window{1, -1};
  EXPECT_NO_THROW(validate_attention(in.q, in.k, in.v, o));
}

}  // namespace
}  // namespace qkv
