// The table of ISA variants (attention/kernels/dispatch.cpp): names and their alias, what
// a CPU that lacks a variant gets, which entry point a problem takes, and both forward
// entry points against the reference on the shapes where either could run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention/kernels/flash.h"
#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/rng.h"
#include "attention/random_inputs.h"

namespace qkv {
namespace {

using detail::Isa;
using testing::random_tensor;

bool contains(const std::vector<Isa>& isas, Isa isa) { return std::find(isas.begin(), isas.end(), isa) != isas.end(); }

TEST(KernelDispatch, NamesRoundTripAndScalarIsSimd128) {
  std::vector<std::string> names = {"simd128"};
#if defined(__x86_64__)
  names.insert(names.end(), {"avx2", "avx512", "avx512_bf16", "amx", "amx_emulated"});
#endif
  for (const std::string& name : names) EXPECT_EQ(detail::isa_name(detail::parse_isa(name)), name);
  // The 128-bit variant's former name stays accepted, as the same variant.
  EXPECT_EQ(detail::parse_isa("scalar"), detail::parse_isa("simd128"));
  EXPECT_STREQ(detail::isa_name(detail::parse_isa("scalar")), "simd128");
  // Every CPU runs it, and it is the first (least) variant.
  ASSERT_FALSE(detail::supported_isas().empty());
  EXPECT_STREQ(detail::isa_name(detail::supported_isas().front()), "simd128");
}

TEST(KernelDispatch, UnknownNamesListEveryName) {
  try {
    (void)detail::parse_isa("sse2");
    ADD_FAILURE() << "parse_isa(\"sse2\") did not throw";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* fragment : {"QKV_ISA", "'sse2'", "simd128", "scalar (= simd128)"})
      EXPECT_NE(message.find(fragment), std::string::npos) << message << " lacks " << fragment;
  }
}

TEST(KernelDispatch, VariantsTheCpuLacksAreRefused) {
  const std::vector<Isa> tested = detail::tested_isas();
  for (Isa isa : detail::supported_isas()) EXPECT_TRUE(contains(tested, isa)) << detail::isa_name(isa);
#if defined(__x86_64__)
  for (const char* name : {"avx2", "avx512", "avx512_bf16", "amx", "amx_emulated"}) {
    const Isa isa = detail::parse_isa(name);
    if (contains(tested, isa) || (std::string(name) == "amx_emulated" && contains(tested, detail::parse_isa("amx"))))
      EXPECT_NO_THROW((void)detail::isa_kernels(isa)) << name;
    else
      EXPECT_THROW((void)detail::isa_kernels(isa), Error) << name;
  }
#endif
}

detail::AttentionProblem problem_of(std::int64_t B, std::int64_t Lq, std::int64_t Lk,
                                    std::vector<std::int64_t> key_lengths = {}) {
  AttentionOptions o;
  o.key_lengths = std::move(key_lengths);
  return detail::make_problem(Tensor::zeros({B, 2, Lq, 8}), Tensor::zeros({B, 2, Lk, 8}),
                              Tensor::zeros({B, 2, Lk, 8}), o);
}

// Decode's entry point takes at most kSplitMaxRows queries over more than two chunks of keys.
TEST(KernelDispatch, DecodeIsFewQueriesOverManyKeys) {
  const std::int64_t rows = detail::kSplitMaxRows, keys = 2 * detail::kSplitKeys;
  EXPECT_TRUE(detail::is_decode(problem_of(1, 1, keys + 1)));
  EXPECT_TRUE(detail::is_decode(problem_of(1, rows, keys + 1)));
  EXPECT_FALSE(detail::is_decode(problem_of(1, rows + 1, keys + 1)));
  EXPECT_FALSE(detail::is_decode(problem_of(1, 1, keys)));
  EXPECT_TRUE(detail::is_decode(problem_of(2, 1, keys + 1, {keys + 1, 3})));  // the longest batch counts
  EXPECT_FALSE(detail::is_decode(problem_of(2, 1, keys + 1, {keys, 3})));
  EXPECT_FALSE(detail::is_decode(problem_of(0, 1, keys + 1)));  // nothing to compute
}

// On a decode shape both forward entry points are correct (the forward one runs any
// shape); each is checked against the reference, under a causal mask and a padding length.
TEST(KernelDispatch, ForwardAndDecodeEntriesBothMatchTheReference) {
  Rng rng(41);
  const Tensor q = random_tensor({2, 4, 3, 32}, rng), k = random_tensor({2, 2, 1100, 32}, rng),
               v = random_tensor({2, 2, 1100, 32}, rng);
  AttentionOptions o;
  o.causal = true;
  o.alignment = Alignment::bottom_right;
  o.key_lengths = {1100, 1037};
  const detail::AttentionProblem problem = detail::make_problem(q, k, v, o);
  ASSERT_TRUE(detail::is_decode(problem));
  o.impl = AttentionImpl::reference;
  const std::vector<float> ref = attention(q, k, v, o).out.to_vector();
  for (Isa isa : detail::tested_isas()) {
    const detail::IsaKernels& kernels = detail::isa_kernels(isa);
    for (const bool decode : {false, true}) {
      Tensor out = Tensor::empty({2, 4, 3, 32});
      (decode ? kernels.decode : kernels.forward)(problem, q, k, v, out, nullptr);
      const std::vector<float> got = out.to_vector();
      double worst = 0;
      for (std::size_t n = 0; n < got.size(); ++n) {
        const double e = std::abs(double{got[n]} - ref[n]);
        if (std::isnan(e) || e > worst) worst = e;  // a NaN stays
      }
      EXPECT_LE(worst, 1e-5) << detail::isa_name(isa) << (decode ? " decode" : " forward");
    }
  }
}

}  // namespace
}  // namespace qkv
