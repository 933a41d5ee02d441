// qkv explain's step-by-step arithmetic (plain loops in double, on small dense matrices)
// and its check of each library result against it: shared by the toy walk (explain.cpp)
// and the walk of a real model's layer (explain_model.cpp).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "print.h"
#include "qkv/nn/transformer.h"
#include "qkv/tensor.h"

namespace qkv::cli {

Matrix matmul(const Matrix& a, const Matrix& b);  // (n, m)·(m, p) -> (n, p)
Matrix transpose(const Matrix& a);
Matrix scaled(Matrix a, double s);
Matrix add(Matrix a, const Matrix& b);  // same shapes
// Each row: exp(s − max) / Σ exp(s − max); −∞ entries get weight 0, a fully masked row 0s.
Matrix softmax_rows(const Matrix& s);
// Sets the scores above the diagonal to −∞: token i sees tokens 0..i.
Matrix causal_masked(Matrix s);
// The library stores f32: the step-by-step path gives it the same f32 inputs.
Matrix round_to_f32(Matrix a);
Matrix columns(const Matrix& a, std::int64_t first, std::int64_t count);  // [first, first + count)
Matrix rows(const Matrix& a, std::int64_t first, std::int64_t count);
Matrix hconcat(const std::vector<Matrix>& parts);
// x·Wᵀ + b: x (n, in), weight (out, in) in torch's layout, bias (1, out) or empty.
Matrix linear(const Matrix& x, const Matrix& weight, const Matrix& bias);
// Every row normalised to mean 0 and (biased) variance 1, then ·γ + β: γ, β (1, cols).
Matrix layer_norm(const Matrix& x, const Matrix& gamma, const Matrix& beta, double eps);
Matrix activation(Matrix x, nn::Activation a);  // elementwise: relu, gelu (erf), gelu_tanh

// The library bridge: Matrix <-> f32 tensors.
Tensor to_tensor(const Matrix& m, const Shape& shape);
Matrix to_matrix(const Tensor& t, std::int64_t rows, std::int64_t cols);
Matrix to_matrix(const Tensor& t);  // a 1-D tensor as one row, else (numel / last, last)

// Compares a library result with the step-by-step one and prints the verdict: "✓ what (max
// |difference| ...)" or "✗ MISMATCH: what: ...". The tolerance is relative_tolerance times
// the larger of 1 and the result's largest magnitude.
class Checker {
 public:
  struct Result {
    std::string what;
    double max_diff = 0.0;
    double tolerance = 0.0;
    bool ok = false;
  };
  Checker(std::ostream& out, double relative_tolerance) : out_(out), relative_(relative_tolerance) {}
  bool check(const std::string& what, const Matrix& library, const Matrix& by_hand);
  const std::vector<Result>& results() const { return results_; }
  int failures() const;
  double max_diff() const;
  // Throws qkv::Error (exit 1) naming the first mismatch, if any.
  void throw_on_mismatch() const;

 private:
  std::ostream& out_;
  double relative_;
  std::vector<Result> results_;
};

std::vector<std::string> indexed(const std::string& prefix, std::int64_t n);  // prefix0, prefix1, ...
void heading(std::ostream& out, const std::string& title);  // the title, underlined

}  // namespace qkv::cli
