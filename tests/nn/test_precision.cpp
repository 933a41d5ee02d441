// bf16 products under nn::ProductPrecision (qkv/nn/precision.h): linear's forward and
// backward against a naive twin that rounds the factors to bf16 and multiplies in double,
// and MultiheadAttention's forward and backward against f32 within a derived bound.
//
// Tolerances. Under the scope each product multiplies bf16-rounded factors exactly and
// accumulates in f32, so against the naive product of the rounded factors only the f32
// accumulation differs: K·u·Σ|a·b| (u = 2^-24), as for f32 itself. Against the f32 product
// of the unrounded factors, rounding each factor to bf16 (relative error ≤ 2^-9) moves each
// term a·b by ≤ 2·2^-9 = 2^-8 of |a·b|: ≤ 2^-8·Σ|a·b| per output, plus the f32 bound.

#include <array>
#include <thread>

#include "nn/check.h"

namespace {

using qkv::DType;
using qkv::Shape;
using qkv::Tensor;
using namespace qkv::testing;

constexpr double kBf16Term = 0x1.0p-8;  // a product of two bf16-rounded factors: ≤ 2^-8·|a·b|

Tensor round_bf16(const Tensor& t) { return t.to(DType::bf16).to(DType::f32); }

bool has_bf16() {
  try {
    nn::check_bf16_products("test");
    return true;
  } catch (const qkv::Error&) {
    return false;
  }
}

// c[i, j] = Σ_k a[i, k]·b[j, k] in double (a (I, K), b (J, K) row-major) and Σ|a·b|.
void naive_abt(const std::vector<float>& a, const std::vector<float>& b, std::int64_t I,
               std::int64_t J, std::int64_t K, std::vector<double>& c, std::vector<double>& mag) {
  c.assign(static_cast<std::size_t>(I * J), 0);
  mag.assign(c.size(), 0);
  for (std::int64_t i = 0; i < I; ++i)
    for (std::int64_t j = 0; j < J; ++j)
      for (std::int64_t k = 0; k < K; ++k) {
        const double t = static_cast<double>(a[i * K + k]) * b[j * K + k];
        c[i * J + j] += t;
        mag[i * J + j] += std::abs(t);
      }
}

std::vector<float> transpose(const std::vector<float>& a, std::int64_t rows, std::int64_t cols) {
  std::vector<float> t(a.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

TEST(ProductPrecision, ScopeIsPerThreadAndNests) {
  EXPECT_EQ(nn::product_dtype(), DType::f32);
  {
    const nn::ProductPrecision outer(DType::bf16);
    EXPECT_EQ(nn::product_dtype(), DType::bf16);
    {
      const nn::ProductPrecision inner(DType::f32);
      EXPECT_EQ(nn::product_dtype(), DType::f32);
    }
    EXPECT_EQ(nn::product_dtype(), DType::bf16);
    DType other = DType::bf16;
    std::thread([&] { other = nn::product_dtype(); }).join();
    EXPECT_EQ(other, DType::f32);  // another thread's products are its own
  }
  EXPECT_EQ(nn::product_dtype(), DType::f32);
  EXPECT_THROW(nn::ProductPrecision(DType::f16), qkv::Error);
  EXPECT_EQ(nn::parse_precision("bf16", "t"), DType::bf16);
  EXPECT_EQ(nn::parse_precision("f32", "t"), DType::f32);
  try {
    nn::parse_precision("fp16", "train lm");
    FAIL() << "fp16 accepted";
  } catch (const qkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("train lm: precision must be f32 or bf16, got 'fp16'"), std::string::npos)
        << e.what();
  }
}

// linear() under the scope is the naive product of the rounded factors, and not the f32 one.
TEST(ProductPrecision, LinearIsTheProductOfBf16RoundedFactors) {
  if (!has_bf16()) GTEST_SKIP() << "no bf16 dot product on this CPU";
  for (auto [M, K, N] : std::vector<std::array<std::int64_t, 3>>{
           {1, 1, 1}, {3, 5, 7}, {17, 64, 33}, {128, 129, 65}, {2, 257, 3}}) {
    nn::Linear lin(K, N, true, 7);
    const Tensor x = randn({M, K}, 11);  // (M, K)
    Tensor y, y32;
    {
      const nn::ProductPrecision bf16(DType::bf16);
      y = lin.forward(x);  // (M, N) f32
    }
    y32 = lin.forward(x);
    ASSERT_EQ(y.dtype(), DType::f32);
    std::vector<double> want, mag;
    naive_abt(round_bf16(x).to_vector(), round_bf16(lin.weight).to_vector(), M, N, K, want, mag);
    const auto b = lin.bias.to_vector();
    std::vector<double> tol(want.size());
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t n = 0; n < N; ++n) {
        want[m * N + n] += b[n];
        tol[m * N + n] = 2.0 * (K + 1) * kU * (mag[m * N + n] + std::abs(b[n])) + 1e-30;
      }
    const std::string what = "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
    expect_close(y.to_vector(), want, tol, "bf16 linear " + what);
    if (K >= 64) EXPECT_NE(y.to_vector(), y32.to_vector()) << "the scope changed nothing: " << what;
  }
}

// Linear's backward after a recording forward under the scope: x kept in bf16; dx = dy·W and
// dW += dyᵀ·x from rounded dy, W and x (both of linear_backward's branches: N > K computes
// dWᵀ and adds it transposed); db from dy in f32.
TEST(ProductPrecision, LinearBackwardTakesBf16RoundedFactors) {
  if (!has_bf16()) GTEST_SKIP() << "no bf16 dot product on this CPU";
  for (auto [M, K, N] : std::vector<std::array<std::int64_t, 3>>{{6, 40, 24}, {33, 24, 70}, {5, 3, 2}}) {
    nn::Linear lin(K, N, true, 3), grads(K, N, true, 3);
    train::zero_grad(grads.parameters());
    const Tensor prior = randn({N, K}, 4);  // what dweight held before: the backward adds
    grads.weight.copy_from(prior);
    const Tensor x = randn({M, K}, 1), dy = randn({M, N}, 2);
    nn::Linear::Record record;
    Tensor dx;
    {
      const nn::ProductPrecision bf16(DType::bf16);
      lin.forward(x, {}, &record);
      dx = lin.backward(dy, record, grads);
    }
    EXPECT_EQ(record.x.dtype(), DType::bf16);
    const std::string what = "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
    // dx[m, k] = Σ_n dy[m, n]·W[n, k]
    std::vector<double> want, mag;
    naive_abt(round_bf16(dy).to_vector(), transpose(round_bf16(lin.weight).to_vector(), N, K), M, K, N, want, mag);
    std::vector<double> tol(mag.size());
    for (std::size_t i = 0; i < mag.size(); ++i) tol[i] = 2.0 * N * kU * mag[i] + 1e-30;
    expect_close(dx.to_vector(), want, tol, "bf16 dx " + what);
    // dW[n, k] = prior + Σ_m dy[m, n]·x[m, k]
    naive_abt(transpose(round_bf16(dy).to_vector(), M, N), transpose(round_bf16(x).to_vector(), M, K), N, K, M,
              want, mag);
    const auto p = prior.to_vector();
    tol.assign(mag.size(), 0);
    for (std::size_t i = 0; i < mag.size(); ++i) {
      want[i] += p[i];
      tol[i] = 2.0 * (M + 1) * kU * (mag[i] + std::abs(p[i])) + 1e-30;
    }
    expect_close(grads.weight.to_vector(), want, tol, "bf16 dweight " + what);
    // db[n] = Σ_m dy[m, n] in f32, unrounded
    const auto g = dy.to_vector();
    std::vector<double> db(static_cast<std::size_t>(N), 0), dbm(db.size(), 0);
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t n = 0; n < N; ++n) db[n] += g[m * N + n], dbm[n] += std::abs(g[m * N + n]);
    for (auto& v : dbm) v = 2.0 * M * kU * v + 1e-30;
    expect_close(grads.bias.to_vector(), db, dbm, "db " + what);
  }
}

// Self-attention (causal) forward and backward under the scope against f32. Along the
// deepest path an output goes through 4 products (in_proj, q·kᵀ, p·v, out_proj), each term
// of each moved by ≤ 2^-8 of its magnitude by rounding, and p itself is rounded to bf16
// for p·v in the kernel (2^-9): to first order the output moves by ≤ (4·2^-8 + 2^-9)·Σ|terms|.
// Σ|terms| of these random layers is within 4× the output's own scale (measured: the ratio
// of Σ|terms| to |result| is below 3 for in_proj/out_proj on N(0,1) inputs), hence the bound
// 4·(4·2^-8 + 2^-9)·max|y32| on every output and, by the same count through the mirrored
// backward (6 products), 4·(6·2^-8 + 2^-9)·max|g32| on the gradients.
TEST(ProductPrecision, SelfAttentionFollowsF32WithinTheBf16Bound) {
  if (!has_bf16()) GTEST_SKIP() << "no bf16 dot product on this CPU";
  const std::int64_t B = 2, L = 37, E = 64, H = 2;
  const nn::MultiheadAttentionConfig config{.embed_dim = E, .num_heads = H};
  nn::MultiheadAttention mha(config, 5);
  perturb(mha.parameters(), 6, 0.05);
  const Tensor x = randn({B, L, E}, 7), dy = randn({B, L, E}, 8);
  nn::AttentionMasks masks;
  masks.is_causal = true;
  const auto run = [&](DType products, nn::MultiheadAttention::Record& rec, nn::MultiheadAttention& grads) {
    const nn::ProductPrecision scope(products);
    train::zero_grad(grads.parameters());
    const Tensor y = mha.forward(x, x, x, masks, {}, nullptr, nullptr, &rec);
    const Tensor dx = mha.backward(dy, rec, grads).query;
    return std::make_pair(y, dx);
  };
  nn::MultiheadAttention g16(config, 0), g32(config, 0);  // own tensors (a copy would share mha's)
  nn::MultiheadAttention::Record r16, r32;
  const auto [y16, dx16] = run(DType::bf16, r16, g16);
  const auto [y32, dx32] = run(DType::f32, r32, g32);
  EXPECT_EQ(r16.q.dtype(), DType::bf16);
  EXPECT_EQ(r32.q.dtype(), DType::f32);
  const auto compare = [](const Tensor& got, const Tensor& want, double products, const std::string& what) {
    const auto w = want.to_vector();
    std::vector<double> wd(w.begin(), w.end());
    const double tol = 4.0 * (products * kBf16Term + 0x1.0p-9) * max_abs(wd);
    expect_close(got, wd, tol, what);
    EXPECT_NE(got.to_vector(), w) << what << ": bf16 gave f32's bits";
  };
  compare(y16, y32, 4, "y");
  compare(dx16, dx32, 6, "dx");
  compare(g16.in_proj.weight, g32.in_proj.weight, 6, "d in_proj.weight");
  compare(g16.out_proj.weight, g32.out_proj.weight, 4, "d out_proj.weight");
}

}  // namespace
