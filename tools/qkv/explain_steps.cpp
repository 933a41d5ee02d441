// qkv explain's step-by-step arithmetic and checks (explain_steps.h).
#include "explain_steps.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "qkv/error.h"

namespace qkv::cli {

Matrix matmul(const Matrix& a, const Matrix& b) {  // (n, m)·(m, p) -> (n, p)
  Matrix c(a.rows, b.cols);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < b.cols; ++j) {
      double s = 0.0;
      for (std::int64_t t = 0; t < a.cols; ++t) s += a(i, t) * b(t, j);
      c(i, j) = s;
    }
  }
  return c;
}

Matrix transpose(const Matrix& a) {
  Matrix t(a.cols, a.rows);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < a.cols; ++j) t(j, i) = a(i, j);
  }
  return t;
}

Matrix scaled(Matrix a, double s) {
  for (double& x : a.data) x *= s;
  return a;
}

Matrix add(Matrix a, const Matrix& b) {
  QKV_CHECK(a.rows == b.rows && a.cols == b.cols, "explain: adding matrices of different shapes");
  for (std::size_t i = 0; i < a.data.size(); ++i) a.data[i] += b.data[i];
  return a;
}

// Subtracting the row maximum changes nothing mathematically and keeps exp from
// overflowing.
Matrix softmax_rows(const Matrix& s) {
  Matrix p(s.rows, s.cols);
  for (std::int64_t i = 0; i < s.rows; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < s.cols; ++j) m = std::max(m, s(i, j));
    if (std::isinf(m)) continue;  // a fully masked row: zeros, as the library
    double sum = 0.0;
    for (std::int64_t j = 0; j < s.cols; ++j) sum += (p(i, j) = std::exp(s(i, j) - m));
    for (std::int64_t j = 0; j < s.cols; ++j) p(i, j) /= sum;
  }
  return p;
}

Matrix causal_masked(Matrix s) {
  for (std::int64_t i = 0; i < s.rows; ++i) {
    for (std::int64_t j = i + 1; j < s.cols; ++j) s(i, j) = -std::numeric_limits<double>::infinity();
  }
  return s;
}

Matrix round_to_f32(Matrix a) {
  for (double& x : a.data) x = static_cast<float>(x);
  return a;
}

Matrix columns(const Matrix& a, std::int64_t first, std::int64_t count) {
  Matrix c(a.rows, count);
  for (std::int64_t i = 0; i < a.rows; ++i) {
    for (std::int64_t j = 0; j < count; ++j) c(i, j) = a(i, first + j);
  }
  return c;
}

Matrix rows(const Matrix& a, std::int64_t first, std::int64_t count) {
  return transpose(columns(transpose(a), first, count));
}

Matrix hconcat(const std::vector<Matrix>& parts) {
  std::int64_t cols = 0;
  for (const auto& p : parts) cols += p.cols;
  Matrix c(parts.front().rows, cols);
  std::int64_t first = 0;
  for (const auto& p : parts) {
    for (std::int64_t i = 0; i < p.rows; ++i) {
      for (std::int64_t j = 0; j < p.cols; ++j) c(i, first + j) = p(i, j);
    }
    first += p.cols;
  }
  return c;
}

Matrix linear(const Matrix& x, const Matrix& weight, const Matrix& bias) {
  Matrix y(x.rows, weight.rows);  // (n, out)
  for (std::int64_t i = 0; i < x.rows; ++i) {
    for (std::int64_t o = 0; o < weight.rows; ++o) {
      double s = bias.data.empty() ? 0.0 : bias(0, o);
      for (std::int64_t t = 0; t < x.cols; ++t) s += x(i, t) * weight(o, t);
      y(i, o) = s;
    }
  }
  return y;
}

Matrix layer_norm(const Matrix& x, const Matrix& gamma, const Matrix& beta, double eps) {
  Matrix y(x.rows, x.cols);
  for (std::int64_t i = 0; i < x.rows; ++i) {
    double mean = 0.0, variance = 0.0;
    for (std::int64_t j = 0; j < x.cols; ++j) mean += x(i, j);
    mean /= static_cast<double>(x.cols);
    for (std::int64_t j = 0; j < x.cols; ++j) variance += (x(i, j) - mean) * (x(i, j) - mean);
    variance /= static_cast<double>(x.cols);  // biased, as torch's LayerNorm
    const double inv = 1.0 / std::sqrt(variance + eps);
    for (std::int64_t j = 0; j < x.cols; ++j) y(i, j) = (x(i, j) - mean) * inv * gamma(0, j) + beta(0, j);
  }
  return y;
}

Matrix activation(Matrix x, nn::Activation a) {
  for (double& v : x.data) {
    switch (a) {
      case nn::Activation::relu: v = v > 0 ? v : 0.0; break;
      case nn::Activation::gelu: v = 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)); break;
      case nn::Activation::gelu_tanh:
        v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
        break;
    }
  }
  return x;
}

Tensor to_tensor(const Matrix& m, const Shape& shape) {
  std::vector<float> values(m.data.begin(), m.data.end());
  return Tensor::from_vector(shape, values);
}

Matrix to_matrix(const Tensor& t, std::int64_t rows, std::int64_t cols) {
  const std::vector<float> values = t.to_vector();
  QKV_CHECK(static_cast<std::int64_t>(values.size()) == rows * cols,
            "explain: expected a tensor of " << rows * cols << " elements, got shape " << t.shape_string());
  Matrix m(rows, cols);
  std::copy(values.begin(), values.end(), m.data.begin());
  return m;
}

Matrix to_matrix(const Tensor& t) {
  const std::int64_t cols = t.dim() == 0 ? 1 : t.size(t.dim() - 1);
  return to_matrix(t, cols == 0 ? 0 : t.numel() / cols, cols);
}

bool Checker::check(const std::string& what, const Matrix& library, const Matrix& by_hand) {
  double diff = 0.0, magnitude = 0.0;
  const bool same_shape = library.rows == by_hand.rows && library.cols == by_hand.cols;
  for (std::size_t i = 0; same_shape && i < library.data.size(); ++i) {
    // −∞ (a masked score) on both sides is no difference.
    if (library.data[i] == by_hand.data[i]) continue;
    const double d = std::abs(library.data[i] - by_hand.data[i]);
    diff = std::isnan(d) ? d : std::max(diff, d);
    if (std::isnan(d)) break;
  }
  for (const double v : by_hand.data)
    if (std::isfinite(v)) magnitude = std::max(magnitude, std::abs(v));
  Result r{what, diff, relative_ * std::max(1.0, magnitude), false};
  r.ok = same_shape && diff <= r.tolerance;
  if (r.ok) {
    out_ << "   ✓ " << what << format(" (max |difference| %.1e)", diff) << '\n';
  } else {
    const std::string why =
        same_shape ? format("differs from the step-by-step result by %.3g (tolerance %.1e)", diff, r.tolerance)
                   : "has the wrong shape";
    out_ << "   ✗ MISMATCH: " << what << ": " << why << '\n';
    r.what += ": " + why;
  }
  results_.push_back(r);
  return r.ok;
}

int Checker::failures() const {
  return static_cast<int>(std::count_if(results_.begin(), results_.end(), [](const Result& r) { return !r.ok; }));
}

double Checker::max_diff() const {
  double m = 0.0;
  for (const Result& r : results_)
    if (r.ok) m = std::max(m, r.max_diff);
  return m;
}

void Checker::throw_on_mismatch() const {
  for (const Result& r : results_) {
    if (r.ok) continue;
    out_.flush();
    throw Error(format("explain: %d of %zu library results differ from the step-by-step computation; first: %s",
                       failures(), results_.size(), r.what.c_str()));
  }
}

std::vector<std::string> indexed(const std::string& prefix, std::int64_t n) {
  std::vector<std::string> labels;
  for (std::int64_t i = 0; i < n; ++i) labels.push_back(prefix + std::to_string(i));
  return labels;
}

void heading(std::ostream& out, const std::string& title) {
  out << '\n' << title << '\n' << std::string(static_cast<std::size_t>(display_width(title)), '-') << '\n';
}

}  // namespace qkv::cli
