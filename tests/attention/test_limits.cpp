// Hostile numbers and sizes: float options are checked in the precision the computation
// uses them in; every call's memory is checked against the limit before it allocates; head
// dimensions too wide for the fast kernel's scratch run the reference instead of failing.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attention/kernels/flash.h"
#include "attention/random_inputs.h"
#include "qkv/attention.h"
#include "qkv/error.h"
#include "attention/expect_error.h"
#include "qkv/memory.h"
#include "qkv/threads.h"

namespace qkv {
namespace {

using testing::random_tensor;

using testing::expect_error;

struct Restore {
  int threads = num_threads();
  ~Restore() {
    reset_memory_limit();
    set_num_threads(threads);
  }
};

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](float u, float w) {
           return std::memcmp(&u, &w, sizeof u) == 0;
         });
}

struct Inputs {
  Rng rng{3};
  Tensor q = random_tensor({1, 2, 5, 8}, rng), k = random_tensor({1, 2, 7, 8}, rng), v = random_tensor({1, 2, 7, 8}, rng);
};

TEST(AttentionLimits, FloatOptionsAreCheckedInFloat32ForTheKernels) {
  Inputs in;
  for (AttentionImpl impl : {AttentionImpl::automatic, AttentionImpl::fast}) {
    AttentionOptions o;
    o.impl = impl;
    o.scale = 1e39;  // finite in double, infinite in float: every score was NaN
    expect_error([&] { scaled_dot_product_attention(in.q, in.k, in.v, o); },
                 "scale must be finite, got 1e+39, which is not finite in float32, the fast kernels' precision "
                 "(impl = reference computes in double)",
                 ErrorKind::value);
    o.scale = -3.5e38;
    expect_error([&] { scaled_dot_product_attention(in.q, in.k, in.v, o); },
                 "scale must be finite, got -3.5e+38, which is not finite in float32", ErrorKind::value);
    o.scale = 3e38;  // finite in float: fine
    EXPECT_NO_THROW(scaled_dot_product_attention(in.q, in.k, in.v, o));
    o.scale.reset();
    o.softcap = 1e39;
    expect_error([&] { scaled_dot_product_attention(in.q, in.k, in.v, o); },
                 "softcap must be a finite number > 0, got 1e+39, which is not finite in float32", ErrorKind::value);
    o.softcap = 1e-46;  // rounds to 0 in float
    expect_error([&] { scaled_dot_product_attention(in.q, in.k, in.v, o); },
                 "softcap must be a finite number > 0, got 1e-46, which is 0 in float32", ErrorKind::value);
    o.softcap.reset();
    o.alibi_slopes = {1.0f, -3e38f};  // -3e38 · |i' - j| overflows float for any distance >= 2
    expect_error([&] { scaled_dot_product_attention(in.q, in.k, in.v, o); },
                 "alibi_slopes[1] times the largest distance |i' - j| < Lq + Lk = 12 must be finite, got slope "
                 "-3e+38 (times 12: 3.6e+39, which is not finite in float32",
                 ErrorKind::value);
  }
  // The reference computes in double: the same options are numbers there.
  AttentionOptions o;
  o.impl = AttentionImpl::reference;
  o.scale = 1e39;
  EXPECT_NO_THROW(scaled_dot_product_attention(in.q, in.k, in.v, o));
  o.scale = std::numeric_limits<double>::infinity();
  expect_error([&] { scaled_dot_product_attention(in.q, in.k, in.v, o); }, "scale must be finite, got inf",
               ErrorKind::value);
  // And the backward checks as the forward does.
  AttentionOptions f;
  f.return_lse = true;
  const AttentionResult r = attention(in.q, in.k, in.v, f);
  f.scale = 1e39;
  expect_error([&] { attention_backward(r.out, in.q, in.k, in.v, r.out, r.lse, f); },
               "scale must be finite, got 1e+39, which is not finite in float32", ErrorKind::value);
}

// A window side beyond every key is the unbounded window: no overflow in i′ ± side.
TEST(AttentionLimits, HugeWindowIsUnbounded) {
  Inputs in;
  for (AttentionImpl impl : {AttentionImpl::fast, AttentionImpl::reference}) {
    AttentionOptions unbounded, huge;
    unbounded.impl = huge.impl = impl;
    unbounded.causal = huge.causal = true;
    unbounded.alignment = huge.alignment = Alignment::bottom_right;
    unbounded.window = Window{-1, -1};
    huge.window = Window{std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max()};
    EXPECT_TRUE(bitwise_equal(scaled_dot_product_attention(in.q, in.k, in.v, unbounded),
                              scaled_dot_product_attention(in.q, in.k, in.v, huge)));
  }
}

TEST(AttentionLimits, MemoryIsCheckedBeforeItIsTaken) {
  Restore restore;
  set_num_threads(2);
  Rng rng(5);
  const Tensor q = random_tensor({1, 4, 256, 64}, rng);  // out 256 KiB; scratch ~68 KiB per thread
  const Tensor q1 = random_tensor({1, 4, 1, 64}, rng), k = random_tensor({1, 4, 8192, 64}, rng);
  set_memory_limit(200 << 10);
  expect_error([&] { scaled_dot_product_attention(q, q, q); },
               "scaled_dot_product_attention: needs ", ErrorKind::memory);
  try {
    scaled_dot_product_attention(q, q, q);
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the output (B, Hq, Lq, Dv): 256 KiB (262144 bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("kernel scratch: "), std::string::npos) << m;
    EXPECT_NE(m.find(" bytes), 2 threads × "), std::string::npos) << m;
    EXPECT_NE(m.find("more than the memory limit of 200 KiB (204800 bytes), set by set_memory_limit"),
              std::string::npos)
        << m;
  }
  AttentionOptions reference;
  reference.impl = AttentionImpl::reference;
  reference.return_probs = true;  // (B, Hq, Lq, Lk) f32: 1 MiB
  expect_error([&] { attention(q, q, q, reference); }, "the probabilities (B, Hq, Lq, Lk) f32: 1 MiB",
               ErrorKind::memory);
  // Decode: the partial results of its key chunks.
  set_memory_limit(64 << 10);
  expect_error([&] { scaled_dot_product_attention(q1, k, k); }, "decode's partial results", ErrorKind::memory);
  // The backward's gradients and scratch.
  reset_memory_limit();
  AttentionOptions lse;
  lse.return_lse = true;
  const AttentionResult r = attention(q, q, q, lse);
  set_memory_limit(600 << 10);
  expect_error([&] { attention_backward(r.out, q, q, q, r.out, r.lse); }, "attention_backward: needs ",
               ErrorKind::memory);
  lse.impl = AttentionImpl::reference;
  expect_error([&] { attention_backward(r.out, q, q, q, r.out, r.lse, lse); },
               "attention_backward (reference): needs ", ErrorKind::memory);
  reset_memory_limit();
  EXPECT_NO_THROW(attention_backward(r.out, q, q, q, r.out, r.lse));
}

// Head dimensions beyond kMaxFastHeadDim run the reference: the same numbers as asking
// for it, in the memory the reference needs, not the fast kernel's 132 rows per thread.
TEST(AttentionLimits, WideHeadsRunTheReference) {
  Restore restore;
  set_num_threads(2);
  Rng rng(9);
  const std::int64_t D = detail::kMaxFastHeadDim + 1;
  const Tensor q = random_tensor({1, 1, 3, D}, rng, 0.01), k = random_tensor({1, 1, 4, D}, rng, 0.01);
  const Tensor v = random_tensor({1, 1, 4, D}, rng);
  AttentionOptions reference;
  reference.impl = AttentionImpl::reference;
  reference.return_lse = true;
  const AttentionResult want = attention(q, k, v, reference);
  for (AttentionImpl impl : {AttentionImpl::automatic, AttentionImpl::fast}) {
    AttentionOptions o = reference;
    o.impl = impl;
    const AttentionResult got = attention(q, k, v, o);
    EXPECT_TRUE(bitwise_equal(got.out, want.out));
    EXPECT_TRUE(bitwise_equal(got.lse, want.lse));
    const AttentionGradients g = attention_backward(got.out, q, k, v, got.out, got.lse, o);
    const AttentionGradients g_ref = attention_backward(got.out, q, k, v, got.out, got.lse, reference);
    EXPECT_TRUE(bitwise_equal(g.dq, g_ref.dq));
    EXPECT_TRUE(bitwise_equal(g.dv, g_ref.dv));
  }
  // D = 2^20 in 48 MiB: the fast kernel's scratch alone would be 2 × 1.1 GiB.
  const std::int64_t wide = std::int64_t{1} << 20;
  const Tensor qw = Tensor::zeros({1, 1, 2, wide});  // 8 MiB each
  set_memory_limit(48 << 20);
  const Tensor out = scaled_dot_product_attention(qw, qw, qw);
  EXPECT_EQ(out.shape(), (Shape{1, 1, 2, wide}));
}

}  // namespace
}  // namespace qkv
