// Every nn entry point takes f32, bf16 and f16 and computes in f32; f64 (which only the
// reference attention computes, in double) is a qkv::Error(type) naming the argument and
// the dtype, never 8-byte elements read as floats.

#include "nn/check.h"

namespace {

using qkv::DType;
using qkv::ErrorKind;
using qkv::Tensor;
using namespace qkv::testing;  // nn::, randn, ...

// The message of a call that must fail as a TypeError, mentioning `needle` and "f64".
void expect_f64_refused(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no qkv::Error; expected one mentioning '" << needle << "'";
  } catch (const qkv::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("got f64"), std::string::npos) << what;
    EXPECT_EQ(e.kind(), ErrorKind::type) << what;
  }
}

TEST(NnDtypes, F64InputsAreTypeErrorsNamingTheArgument) {
  const Tensor x = randn({2, 3, 8}, 1), x64 = x.to(DType::f64);
  const Tensor w = randn({4, 8}, 2);
  expect_f64_refused([&] { nn::linear(x64, w); }, "linear: x must be floating");
  expect_f64_refused([&] { nn::linear(x, w.to(DType::f64)); }, "linear: weight");
  expect_f64_refused([&] { nn::PackedWeight(w.to(DType::f64)); }, "PackedWeight: weight");
  expect_f64_refused([&] { nn::layer_norm(x64, {8}, Tensor(), Tensor(), 1e-5); }, "layer_norm: x");
  expect_f64_refused([&] { nn::gelu(x64); }, "gelu: x");
  expect_f64_refused([&] { nn::relu(x64); }, "relu: x");
  expect_f64_refused([&] { nn::add(x64, x); }, "add: a");
  expect_f64_refused([&] { nn::apply_rope(x64.unsqueeze(0)); }, "apply_rope: x");

  nn::MultiheadAttentionConfig c;
  c.embed_dim = 8;
  c.num_heads = 2;
  const nn::MultiheadAttention mha(c);
  expect_f64_refused([&] { mha.forward(x64, x64, x64); }, "x must be floating");
  expect_f64_refused([&] { nn::KVCache(2, 2, 4, 4, DType::f64); }, "KVCache: dtype must be f32, bf16 or f16");

  nn::VectorAttentionConfig vc;
  vc.dim = 8;
  const nn::VectorAttention va(vc);
  expect_f64_refused([&] { va.forward(x64, randn({2, 3, 3}, 3)); }, "VectorAttention");

  // The same inputs in f32 and bf16 pass.
  EXPECT_NO_THROW(nn::linear(x, w));
  EXPECT_NO_THROW(mha.forward(x.to(DType::bf16), x, x));
}

// load_state_dict converts what it copies (as torch's does): f64 values are rounded to
// the f32 parameters once, not reinterpreted.
TEST(NnDtypes, LoadStateDictRoundsF64ParametersToF32) {
  nn::Linear layer(3, 2, true, 1);
  const Tensor weight = randn({2, 3}, 4).to(DType::f64), bias = randn({2}, 5).to(DType::f64);
  nn::load_state_dict(layer, nn::StateDict{{"weight", weight}, {"bias", bias}});
  EXPECT_EQ(layer.weight.dtype(), DType::f32);
  EXPECT_EQ(layer.weight.to_vector(), weight.to_vector());
  EXPECT_EQ(layer.bias.to_vector(), bias.to_vector());
}

}  // namespace
