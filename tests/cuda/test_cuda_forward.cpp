// The CUDA forward (include/qkv/cuda.h) against the double-precision reference
// (impl = reference) over the option matrix: dtypes, head dims, causal alignments, GQA,
// lengths that are not multiples of the tiles, window, ALiBi, softcap, key lengths, lse
// and split-KV. On a machine without a usable GPU these tests skip with the reason; the
// error paths (ErrorPaths.*) run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "attention/random_inputs.h"
#include "qkv/attention.h"
#include "qkv/cuda.h"
#include "qkv/error.h"

namespace {

using qkv::Alignment;
using qkv::AttentionOptions;
using qkv::DType;
using qkv::Tensor;

struct Case {
  DType dtype = DType::bf16;
  std::int64_t D = 64, B = 1, Hq = 2, Hkv = 2, Lq = 1, Lk = 1;
  AttentionOptions options;
  int splits = 0;   // QKV_CUDA_SPLITS while it runs; 0 = automatic
  int block_m = 0;  // QKV_CUDA_BLOCK_M while it runs (64: the narrow CTA); 0 = the default
  const char* kernel = nullptr;     // QKV_CUDA_KERNEL while it runs ("mma"); null = the default
  const char* sm90_tile = nullptr;  // QKV_CUDA_SM90_TILE while it runs ("2x64", ...); null = the default

  std::string name() const {
    std::ostringstream s;
    s << qkv::dtype_name(dtype) << " D=" << D << " B=" << B << " Hq=" << Hq << " Hkv=" << Hkv
      << " Lq=" << Lq << " Lk=" << Lk;
    if (options.causal) s << (options.alignment == Alignment::top_left ? " causal_tl" : " causal_br");
    else if (options.alignment == Alignment::bottom_right) s << " align_br";
    if (options.window) s << " window=(" << options.window->left << "," << options.window->right << ")";
    if (!options.alibi_slopes.empty()) s << " alibi";
    if (options.softcap) s << " softcap=" << *options.softcap;
    if (!options.key_lengths.empty()) {
      s << " key_lengths=";
      for (auto n : options.key_lengths) s << n << ",";
    }
    if (options.return_lse) s << " lse";
    if (splits) s << " splits=" << splits;
    if (block_m) s << " block_m=" << block_m;
    if (kernel) s << " kernel=" << kernel;
    if (sm90_tile) s << " sm90_tile=" << sm90_tile;
    return s.str();
  }
};

#define SKIP_WITHOUT_GPU() \
  if (!qkv::cuda::available()) GTEST_SKIP() << qkv::cuda::unavailable_reason()

// Sets the environment variable `name` to `value` for the lifetime of the object (0 or
// null: leaves it unset), then unsets it: QKV_CUDA_SPLITS, QKV_CUDA_BLOCK_M,
// QKV_CUDA_KERNEL, QKV_CUDA_SM90_TILE.
class EnvOverride {
 public:
  EnvOverride(const char* name, int value) : name_(name) {
    if (value > 0) setenv(name, std::to_string(value).c_str(), 1);
  }
  EnvOverride(const char* name, const char* value) : name_(name) {
    if (value != nullptr) setenv(name, value, 1);
  }
  ~EnvOverride() { unsetenv(name_); }
  EnvOverride(const EnvOverride&) = delete;
  EnvOverride& operator=(const EnvOverride&) = delete;

 private:
  const char* name_;
};

std::uint64_t case_seed = 1;

void run_case(const Case& c) {
  SCOPED_TRACE(c.name());
  qkv::Rng rng(case_seed++);  // fresh inputs for every case
  const Tensor q = qkv::testing::random_tensor({c.B, c.Hq, c.Lq, c.D}, rng, 1.0, c.dtype);   // (B, Hq, Lq, D)
  const Tensor k = qkv::testing::random_tensor({c.B, c.Hkv, c.Lk, c.D}, rng, 1.0, c.dtype);  // (B, Hkv, Lk, D)
  const Tensor v = qkv::testing::random_tensor({c.B, c.Hkv, c.Lk, c.D}, rng, 1.0, c.dtype);  // (B, Hkv, Lk, D)
  AttentionOptions reference_options = c.options;
  reference_options.impl = qkv::AttentionImpl::reference;
  const qkv::AttentionResult want = qkv::attention(q, k, v, reference_options);
  qkv::AttentionResult got;
  {
    EnvOverride splits("QKV_CUDA_SPLITS", c.splits);
    EnvOverride block_m("QKV_CUDA_BLOCK_M", c.block_m);
    EnvOverride kernel("QKV_CUDA_KERNEL", c.kernel);
    EnvOverride sm90_tile("QKV_CUDA_SM90_TILE", c.sm90_tile);
    got = qkv::cuda::attention(q, k, v, c.options);
  }
  const std::vector<float> w = want.out.to_vector(), g = got.out.to_vector();
  ASSERT_EQ(w.size(), g.size());
  double error = 0, norm = 0, max_abs = 0;
  std::int64_t nan = 0;
  for (std::size_t n = 0; n < w.size(); ++n) {
    if (std::isnan(g[n])) ++nan;
    const double d = double{g[n]} - w[n];
    error += d * d;
    norm += double{w[n]} * w[n];
    max_abs = std::max(max_abs, std::abs(d));
  }
  const double tolerance = c.dtype == DType::bf16 ? 1e-2 : 4e-3;
  const double rel = norm > 0 ? std::sqrt(error / norm) : std::sqrt(error);
  EXPECT_EQ(nan, 0) << "NaN (unwritten or wrong) output elements";
  EXPECT_LT(rel, tolerance) << "rel L2 error";
  EXPECT_LT(max_abs, c.dtype == DType::bf16 ? 6e-2 : 2e-2) << "max abs error";
  if (c.options.return_lse) {
    const std::vector<float> wl = want.lse.to_vector(), gl = got.lse.to_vector();
    ASSERT_EQ(wl.size(), gl.size());
    double lse_error = 0;
    for (std::size_t n = 0; n < wl.size(); ++n) {
      if (std::isinf(wl[n])) {
        EXPECT_TRUE(std::isinf(gl[n]) && gl[n] < 0) << "lse[" << n << "] want -inf, got " << gl[n];
      } else {
        lse_error = std::max(lse_error, std::abs(double{gl[n]} - wl[n]));
      }
    }
    EXPECT_LT(lse_error, 2e-3 * std::max(1.0, 1.0)) << "lse max abs error";
  }
}

// The main matrix: dtype x D x causal x GQA x lengths.
TEST(CudaForward, Matrix) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::pair<std::int64_t, std::int64_t>> lengths = {
      {1, 1}, {7, 129}, {63, 65}, {65, 63}, {127, 127}, {129, 257}, {200, 50}};
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (std::int64_t D : {64, 128, 256}) {
      for (int causal = 0; causal < 3; ++causal) {
        for (std::int64_t group : {1, 4}) {
          for (auto [Lq, Lk] : lengths) {
            Case c;
            c.dtype = dtype, c.D = D, c.B = 2, c.Hkv = 2, c.Hq = 2 * group, c.Lq = Lq, c.Lk = Lk;
            c.options.causal = causal > 0;
            c.options.alignment = causal == 2 ? Alignment::bottom_right : Alignment::top_left;
            c.options.return_lse = true;
            run_case(c);
          }
        }
      }
    }
  }
}

TEST(CudaForward, WindowAlibiSoftcapScale) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (std::int64_t D : {64, 128, 256}) {
      for (auto [Lq, Lk] : std::vector<std::pair<std::int64_t, std::int64_t>>{{129, 257}, {300, 300}, {65, 1000}}) {
        for (int variant = 0; variant < 6; ++variant) {
          Case c;
          c.dtype = dtype, c.D = D, c.B = 2, c.Hq = 4, c.Hkv = 2, c.Lq = Lq, c.Lk = Lk;
          c.options.return_lse = true;
          switch (variant) {
            case 0: c.options.window = qkv::Window{32, 0}; break;  // local causal
            case 1: c.options.window = qkv::Window{100, 20}; c.options.alignment = Alignment::bottom_right; break;
            case 2: c.options.window = qkv::Window{-1, 5}; break;
            case 3: c.options.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f}; c.options.causal = true; break;
            case 4: c.options.softcap = 5.0; c.options.scale = 0.3; break;
            case 5:
              c.options.softcap = 20.0;
              c.options.alibi_slopes = {0.1f, 0.2f, 0.3f, 0.4f};
              c.options.window = qkv::Window{64, 64};
              c.options.causal = true;
              c.options.alignment = Alignment::bottom_right;
              break;
          }
          run_case(c);
        }
      }
    }
  }
}

TEST(CudaForward, KeyLengths) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (std::int64_t D : {64, 128, 256}) {
      for (int causal = 0; causal < 3; ++causal) {
        Case c;
        c.dtype = dtype, c.D = D, c.B = 4, c.Hq = 4, c.Hkv = 1, c.Lq = 70, c.Lk = 300;
        c.options.key_lengths = {0, 1, 129, 300};  // 0: every row fully masked -> 0, lse -inf
        c.options.causal = causal > 0;
        c.options.alignment = causal == 2 ? Alignment::bottom_right : Alignment::top_left;
        c.options.return_lse = true;
        run_case(c);
      }
    }
  }
}

// The option sets the kernel-shape tests run (B = 2, Hq = 4): 0 none, 1 causal, 2 causal
// bottom-right, 3 window with key lengths and softcap, 4 causal ALiBi with a scale, 5 a right
// window with batch 0's rows all masked.
void set_variant(Case& c, int variant) {
  switch (variant) {
    case 0: break;
    case 1: c.options.causal = true; break;
    case 2: c.options.causal = true; c.options.alignment = Alignment::bottom_right; break;
    case 3:
      c.options.window = qkv::Window{40, 3};
      c.options.key_lengths = {c.Lk, c.Lk / 2};
      c.options.softcap = 15.0;
      break;
    case 4:
      c.options.causal = true;
      c.options.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
      c.options.scale = 0.3;
      break;
    case 5:
      c.options.key_lengths = {0, c.Lk - 1};
      c.options.window = qkv::Window{-1, 50};
      break;
  }
}

// Both CTA shapes of the mma.sync kernel (forward.cu's Tiling) on the same problems, each
// forced through QKV_CUDA_BLOCK_M (64: narrow; 128: wide, which D = 256 does not take by
// default; setting it also keeps D = 64 and 128 off the wgmma kernel), over lengths
// that leave partial CTAs and partial warps in each, masks included.
TEST(CudaForward, BothBlockShapes) {
  SKIP_WITHOUT_GPU();
  for (int block_m : {64, 128}) {
    for (std::int64_t D : {64, 128, 256}) {
      for (int variant = 0; variant < 4; ++variant) {
        for (auto [Lq, Lk] : std::vector<std::pair<std::int64_t, std::int64_t>>{{65, 200}, {200, 161}}) {
          Case c;
          c.dtype = D == 128 ? DType::f16 : DType::bf16;
          c.D = D, c.B = 2, c.Hq = 4, c.Hkv = 2, c.Lq = Lq, c.Lk = Lk, c.block_m = block_m;
          c.options.return_lse = true;
          set_variant(c, variant);
          run_case(c);
        }
      }
    }
  }
  Case c;  // the wide CTA split over keys (a small grid, a long key range)
  c.D = 128, c.B = 1, c.Hq = 1, c.Hkv = 1, c.Lq = 100, c.Lk = 3000, c.splits = 5;
  c.options.causal = true;
  c.options.alignment = Alignment::bottom_right;
  c.options.return_lse = true;
  run_case(c);
}

// The wgmma kernel (forward_sm90.cu) in each of its CTA shapes, and the mma.sync kernel
// forced by QKV_CUDA_KERNEL=mma, on problems the default sends to it (D 64 and 128, more
// than 64 query rows, no key split: splits = 1), over lengths that leave partial CTAs,
// partial warpgroups and partial key tiles, every mask and score option, GQA and both dtypes.
TEST(CudaForward, Sm90Kernel) {
  SKIP_WITHOUT_GPU();
  const char* tiles[] = {"2x128", "2x64", "1x128", "1x64"};
  for (const char* tile : tiles) {
    for (std::int64_t D : {64, 128}) {
      for (int variant = 0; variant < 6; ++variant) {
        for (auto [Lq, Lk] : std::vector<std::pair<std::int64_t, std::int64_t>>{{65, 200}, {200, 161}, {333, 600}}) {
          Case c;
          c.dtype = variant % 2 == 0 ? DType::bf16 : DType::f16;
          c.D = D, c.B = 2, c.Hq = 4, c.Hkv = variant >= 3 ? 1 : 2, c.Lq = Lq, c.Lk = Lk;
          c.splits = 1, c.sm90_tile = tile;
          c.options.return_lse = true;
          set_variant(c, variant);
          run_case(c);
        }
      }
    }
  }
  for (std::int64_t D : {64, 128}) {  // the same problems on the mma.sync kernel
    Case c;
    c.D = D, c.B = 2, c.Hq = 4, c.Hkv = 2, c.Lq = 333, c.Lk = 1000, c.splits = 1, c.kernel = "mma";
    c.options.causal = true;
    c.options.return_lse = true;
    run_case(c);
  }
}

// Fully masked rows from the diagonal: bottom-right with Lq > Lk leaves the first rows
// without keys.
TEST(CudaForward, FullyMaskedRows) {
  SKIP_WITHOUT_GPU();
  for (std::int64_t D : {64, 128, 256}) {
    Case c;
    c.D = D, c.Lq = 130, c.Lk = 40;
    c.options.causal = true;
    c.options.alignment = Alignment::bottom_right;
    c.options.return_lse = true;
    run_case(c);
  }
}

// Decode: Lq = 1 against a long KV cache, split-KV automatic and forced (1 = none).
TEST(CudaForward, DecodeSplitKV) {
  SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (std::int64_t D : {64, 128, 256}) {
      for (int splits : {0, 1, 3, 8, 64}) {
        for (std::int64_t Lq : {1, 4, 16}) {
          Case c;
          c.dtype = dtype, c.D = D, c.B = 2, c.Hq = 8, c.Hkv = 2, c.Lq = Lq, c.Lk = 2000;
          c.options.causal = Lq > 1;
          c.options.alignment = Alignment::bottom_right;
          c.options.key_lengths = {1999, 777};
          c.options.return_lse = true;
          c.splits = splits;
          run_case(c);
        }
      }
    }
  }
  Case c;  // more splits than tiles, and a window that leaves most splits empty
  c.D = 128, c.Lq = 1, c.Lk = 5000, c.splits = 64;
  c.options.window = qkv::Window{100, 0};
  c.options.alignment = Alignment::bottom_right;
  c.options.return_lse = true;
  run_case(c);
}

// Non-contiguous q (a (B, L, H, D) layout permuted): the host form copies; the device form
// takes strides (tested through Python, scripts/cuda/check_torch.py).
TEST(CudaForward, PermutedInput) {
  SKIP_WITHOUT_GPU();
  qkv::Rng rng(77);
  const Tensor q = qkv::testing::random_tensor({1, 100, 4, 64}, rng, 1.0, DType::bf16).permute({0, 2, 1, 3});
  const Tensor k = qkv::testing::random_tensor({1, 4, 90, 64}, rng, 1.0, DType::bf16);
  const Tensor v = qkv::testing::random_tensor({1, 4, 90, 64}, rng, 1.0, DType::bf16);
  AttentionOptions reference;
  reference.impl = qkv::AttentionImpl::reference;
  const std::vector<float> w = qkv::attention(q, k, v, reference).out.to_vector();
  const std::vector<float> g = qkv::cuda::attention(q, k, v).out.to_vector();
  double error = 0, norm = 0;
  for (std::size_t n = 0; n < w.size(); ++n) error += (g[n] - w[n]) * (g[n] - w[n]), norm += w[n] * w[n];
  EXPECT_LT(std::sqrt(error / norm), 1e-2);
}

// ---- Without a GPU too: what is refused, and how.

TEST(CudaErrorPaths, UnavailableSaysWhy) {
  if (qkv::cuda::available()) {
    EXPECT_TRUE(qkv::cuda::unavailable_reason().empty());
    EXPECT_FALSE(qkv::cuda::device_name().empty());
    return;
  }
  const std::string reason = qkv::cuda::unavailable_reason();
  EXPECT_FALSE(reason.empty());
  const Tensor x = Tensor::zeros({1, 1, 4, 64}, DType::bf16);
  try {
    qkv::cuda::attention(x, x, x);
    FAIL() << "expected qkv::Error";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
  EXPECT_THROW(qkv::cuda::device_name(), qkv::Error);
  EXPECT_THROW(qkv::cuda::attention_forward(qkv::cuda::DeviceAttention{}), qkv::Error);
}

// The refusals name the option; on a machine without a GPU the reason comes first, so
// these run only where the options themselves are what is checked.
TEST(CudaErrorPaths, UnsupportedOptionsAreNamed) {
  SKIP_WITHOUT_GPU();
  const Tensor x = Tensor::zeros({1, 1, 4, 64}, DType::bf16);
  auto message = [](auto&& call) {
    try {
      call();
    } catch (const qkv::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] { qkv::cuda::attention(x.to(DType::f32), x.to(DType::f32), x.to(DType::f32)); }).find("bf16 or f16"), std::string::npos);
  AttentionOptions dropout;
  dropout.dropout_p = 0.1;
  EXPECT_NE(message([&] { qkv::cuda::attention(x, x, x, dropout); }).find("dropout"), std::string::npos);
  AttentionOptions probs;
  probs.return_probs = true;
  EXPECT_NE(message([&] { qkv::cuda::attention(x, x, x, probs); }).find("return_probs"), std::string::npos);
  AttentionOptions mask;
  mask.mask = Tensor::zeros({4, 4}, DType::boolean);
  EXPECT_NE(message([&] { qkv::cuda::attention(x, x, x, mask); }).find("mask"), std::string::npos);
  const Tensor d32 = Tensor::zeros({1, 1, 4, 32}, DType::bf16);
  EXPECT_NE(message([&] { qkv::cuda::attention(d32, d32, d32); }).find("head dim"), std::string::npos);
  const Tensor v128 = Tensor::zeros({1, 1, 4, 128}, DType::bf16);
  EXPECT_NE(message([&] { qkv::cuda::attention(x, x, v128); }).find("Dv"), std::string::npos);
}

}  // namespace
