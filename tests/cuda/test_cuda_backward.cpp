// The CUDA attention backward (src/attention/cuda/backward.cu) against the CPU reference
// backward (double precision): dtypes × head dims × causal alignments × GQA × lengths
// around the tile edges (1, 63, 65, 129 for tiles of 32 and 64), then windows, ALiBi,
// softcap, key lengths (0 included), everything at once, the GPU forward's out and lse,
// and the argument checks. Every case draws fresh inputs (the seed is printed on failure);
// the host form poisons the device gradients with NaN first, so an element the kernels
// never write fails the comparison.
#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "qkv/attention.h"
#include "qkv/cuda.h"
#include "qkv/error.h"
#include "qkv/rng.h"
#include "attention/random_inputs.h"

namespace qkv {
namespace {

using testing::random_tensor;

// bf16 keeps 8 bits of mantissa (relative rounding 2^-9) and f16 11 (2^-12); P and dS are
// rounded to the input dtype before the tensor-core products, as in FlashAttention-2, so
// the gradients' relative L2 error sits well under these.
double tolerance(DType dtype) { return dtype == DType::bf16 ? 2e-2 : 5e-3; }

// ||a − b||₂ / ||b||₂; a NaN anywhere gives NaN, which fails every comparison. When b is
// all zeros (every key masked) a must be exactly zero too: returns 0 or +∞.
// ‖a − b‖ / ‖b‖, with ‖b‖ floored at an RMS of 1e-2 (inputs are of order 1): where the
// exact gradient is 0 — one key per row (Lk = 1, a (0, 0) window, the first query under
// causal), whose softmax is constant, so dq = dk = 0 — a is held to an RMS of 1e-2·tol
// instead of an infinite ratio.
double relative_l2(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  double num = 0, den = 0;
  for (std::size_t n = 0; n < x.size(); ++n) {
    num += (double{x[n]} - y[n]) * (double{x[n]} - y[n]);
    den += double{y[n]} * y[n];
  }
  const double floor = 1e-4 * static_cast<double>(x.size());  // (1e-2)² per element
  return std::sqrt(num / std::max(den, floor));
}

std::uint64_t fresh_seed() {
  static std::random_device device;
  return (std::uint64_t{device()} << 32) ^ device();
}

struct Case {
  DType dtype = DType::bf16;
  std::int64_t B = 2, Hq = 2, Hkv = 2, Lq = 65, Lk = 65, D = 64;
  AttentionOptions options;
  double q_scale = 1.0;  // larger scores make softcap's tanh bend
};

// Runs the GPU backward and the CPU reference on the same fresh inputs and compares dq,
// dk and dv. With gpu_forward, out and lse come from qkv::cuda::attention instead of
// the CPU reference's forward.
void expect_matches_reference(const Case& c, bool gpu_forward = false) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  const Tensor q = random_tensor({c.B, c.Hq, c.Lq, c.D}, rng, c.q_scale, c.dtype);   // (B, Hq, Lq, D)
  const Tensor k = random_tensor({c.B, c.Hkv, c.Lk, c.D}, rng, 1.0, c.dtype);        // (B, Hkv, Lk, D)
  const Tensor v = random_tensor({c.B, c.Hkv, c.Lk, c.D}, rng, 1.0, c.dtype);        // (B, Hkv, Lk, D)
  const Tensor dout = random_tensor({c.B, c.Hq, c.Lq, c.D}, rng, 1.0, c.dtype);      // (B, Hq, Lq, D)

  AttentionOptions forward = c.options;
  forward.return_lse = true;
  forward.impl = AttentionImpl::reference;
  const AttentionResult fwd = gpu_forward ? cuda::attention(q, k, v, forward) : attention(q, k, v, forward);

  AttentionOptions reference = c.options;
  reference.impl = AttentionImpl::reference;
  const AttentionGradients want = attention_backward(dout, q, k, v, fwd.out, fwd.lse, reference);
  const AttentionGradients got = cuda::attention_backward(dout, q, k, v, fwd.out, fwd.lse, c.options);

  ASSERT_EQ(got.dq.shape(), want.dq.shape());
  ASSERT_EQ(got.dk.shape(), want.dk.shape());
  ASSERT_EQ(got.dv.shape(), want.dv.shape());
  EXPECT_EQ(got.dq.dtype(), DType::f32);
  const double tol = tolerance(c.dtype);
  EXPECT_LT(relative_l2(got.dq, want.dq), tol) << "dq";
  EXPECT_LT(relative_l2(got.dk, want.dk), tol) << "dk";
  EXPECT_LT(relative_l2(got.dv, want.dv), tol) << "dv";
}

#define SKIP_WITHOUT_GPU() \
  if (!cuda::available()) GTEST_SKIP() << cuda::unavailable_reason()

std::string describe(const Case& c, const char* causal) {
  return std::string(dtype_name(c.dtype)) + " D=" + std::to_string(c.D) + " " + causal +
         " Hq/Hkv=" + std::to_string(c.Hq) + "/" + std::to_string(c.Hkv) + " Lq=" + std::to_string(c.Lq) +
         " Lk=" + std::to_string(c.Lk);
}

// The main matrix: every dtype, head dim, causal alignment and group size, over lengths
// that land on, just before and just after tile edges, with Lq ≠ Lk both ways.
TEST(CudaBackward, MatchesReferenceAcrossShapes) {
  SKIP_WITHOUT_GPU();
  const std::pair<std::int64_t, std::int64_t> lengths[] = {{1, 1}, {63, 129}, {129, 65}, {64, 64}, {1, 65}};
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::int64_t D : {64, 128, 256})
      for (int causal = 0; causal < 3; ++causal)
        for (std::int64_t group : {1, 2})
          for (const auto& [Lq, Lk] : lengths) {
            Case c;
            c.dtype = dtype;
            c.D = D;
            c.Hkv = 2;
            c.Hq = 2 * group;
            c.Lq = Lq;
            c.Lk = Lk;
            c.options.causal = causal > 0;
            c.options.alignment = causal == 2 ? Alignment::bottom_right : Alignment::top_left;
            const char* names[] = {"none", "top_left", "bottom_right"};
            SCOPED_TRACE(describe(c, names[causal]));
            expect_matches_reference(c);
          }
}

// Longer sequences: several query tiles per key tile (the double-buffered loop), MQA.
TEST(CudaBackward, LongSequencesAndMqa) {
  SKIP_WITHOUT_GPU();
  for (std::int64_t D : {64, 128, 256})
    for (bool causal : {false, true}) {
      Case c;
      c.B = 1;
      c.Hq = 4;
      c.Hkv = 1;
      c.Lq = 300;
      c.Lk = 333;
      c.D = D;
      c.options.causal = causal;
      c.options.alignment = Alignment::bottom_right;
      SCOPED_TRACE(describe(c, causal ? "bottom_right" : "none"));
      expect_matches_reference(c);
    }
}

TEST(CudaBackward, SlidingWindow) {
  SKIP_WITHOUT_GPU();
  struct W {
    std::int64_t left, right;
    bool causal;
    Alignment alignment;
  };
  const W windows[] = {{17, 5, false, Alignment::top_left},
                       {17, -1, true, Alignment::bottom_right},
                       {-1, 0, false, Alignment::bottom_right},
                       {40, 70, false, Alignment::top_left},
                       {0, 0, false, Alignment::top_left}};
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::int64_t D : {64, 128, 256})
      for (const W& w : windows) {
        Case c;
        c.dtype = dtype;
        c.D = D;
        c.Hq = 4;
        c.Lq = 129;
        c.Lk = 200;
        c.options.window = Window{w.left, w.right};
        c.options.causal = w.causal;
        c.options.alignment = w.alignment;
        SCOPED_TRACE(describe(c, "window") + " (" + std::to_string(w.left) + ", " + std::to_string(w.right) + ")");
        expect_matches_reference(c);
      }
}

TEST(CudaBackward, Alibi) {
  SKIP_WITHOUT_GPU();
  for (std::int64_t D : {64, 128, 256})
    for (Alignment alignment : {Alignment::top_left, Alignment::bottom_right}) {
      Case c;
      c.D = D;
      c.Hq = 4;
      c.Lq = 65;
      c.Lk = 129;
      c.options.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
      c.options.causal = alignment == Alignment::bottom_right;
      c.options.alignment = alignment;
      SCOPED_TRACE(describe(c, "alibi"));
      expect_matches_reference(c);
    }
}

TEST(CudaBackward, Softcap) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::int64_t D : {64, 128, 256})
      for (bool causal : {false, true}) {
        Case c;
        c.dtype = dtype;
        c.D = D;
        c.Lq = 129;
        c.Lk = 63;
        c.q_scale = 3.0;  // scores of a few units: tanh(s / 2) is far from linear
        c.options.softcap = 2.0;
        c.options.causal = causal;
        c.options.alignment = Alignment::bottom_right;
        SCOPED_TRACE(describe(c, "softcap"));
        expect_matches_reference(c);
      }
}

// Padding: batch 0 has no keys (its rows are fully masked: lse −∞, dq 0), batch 1 some,
// batch 2 all; under bottom_right the diagonal moves with each batch's key length.
TEST(CudaBackward, KeyLengths) {
  SKIP_WITHOUT_GPU();
  for (std::int64_t D : {64, 128, 256})
    for (int causal = 0; causal < 3; ++causal) {
      Case c;
      c.B = 3;
      c.D = D;
      c.Hq = 4;
      c.Lq = 65;
      c.Lk = 129;
      c.options.key_lengths = {0, 37, 129};
      c.options.causal = causal > 0;
      c.options.alignment = causal == 2 ? Alignment::bottom_right : Alignment::top_left;
      SCOPED_TRACE(describe(c, "key_lengths"));
      expect_matches_reference(c);
    }
}

TEST(CudaBackward, EverythingAtOnce) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::int64_t D : {64, 128, 256}) {
      Case c;
      c.dtype = dtype;
      c.B = 2;
      c.D = D;
      c.Hq = 6;
      c.Hkv = 2;
      c.Lq = 100;
      c.Lk = 150;
      c.q_scale = 2.0;
      c.options.causal = true;
      c.options.alignment = Alignment::bottom_right;
      c.options.window = Window{50, -1};
      c.options.key_lengths = {150, 90};
      c.options.alibi_slopes = {0.3f, 0.2f, 0.1f, 0.05f, 0.02f, 0.01f};
      c.options.softcap = 5.0;
      c.options.scale = 0.1;
      SCOPED_TRACE(describe(c, "all options"));
      expect_matches_reference(c);
    }
}

// out and lse from the GPU forward (the pairing a training step uses).
TEST(CudaBackward, WithGpuForward) {
  SKIP_WITHOUT_GPU();
  for (std::int64_t D : {64, 128, 256}) {
    Case c;
    c.D = D;
    c.Hq = 4;
    c.Lq = 129;
    c.Lk = 129;
    c.options.causal = true;
    SCOPED_TRACE(describe(c, "gpu forward"));
    expect_matches_reference(c, /*gpu_forward=*/true);
  }
}

TEST(CudaBackward, RejectsWhatTheGpuDoesNotSupport) {
  SKIP_WITHOUT_GPU();
  Rng rng(7);
  auto make = [&](DType dtype, std::int64_t D) {
    return random_tensor({1, 1, 8, D}, rng, 1.0, dtype);
  };
  const Tensor q = make(DType::bf16, 64);
  const Tensor lse = Tensor::zeros({1, 1, 8});
  // f32 inputs.
  const Tensor q32 = make(DType::f32, 64);
  EXPECT_THROW(cuda::attention_backward(q32, q32, q32, q32, q32, lse), Error);
  // A head dim the kernels do not have.
  const Tensor q96 = make(DType::bf16, 96);
  EXPECT_THROW(cuda::attention_backward(q96, q96, q96, q96, q96, lse), Error);
  // Masks as tensors and dropout.
  AttentionOptions masked;
  masked.mask = testing::random_bool_mask({8, 8}, rng, 0.5);
  EXPECT_THROW(cuda::attention_backward(q, q, q, q, q, lse, masked), Error);
  AttentionOptions dropout;
  dropout.dropout_p = 0.1;
  EXPECT_THROW(cuda::attention_backward(q, q, q, q, q, lse, dropout), Error);
  // lse of the wrong shape.
  EXPECT_THROW(cuda::attention_backward(q, q, q, q, q, Tensor::zeros({1, 1, 7})), Error);
  // The device form: a null gradient pointer.
  cuda::DeviceAttentionBackward args;
  EXPECT_THROW(cuda::attention_backward(args), Error);
}

}  // namespace
}  // namespace qkv
