// AdamW, the learning-rate schedule, gradient clipping and the cross-entropy loss.

#include "qkv/train.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/common.h"
#include "nn/kernels/pointwise.h"  // the vectorised loops
#include "core/parallel.h"
#include "qkv/threads.h"

namespace qkv::train {

namespace {

float* grad_data(const Tensor* t, const char* fn, const std::string& name) {
  QKV_CHECK(t && t->defined() && t->dtype() == DType::f32 && t->is_contiguous(),
            fn << ": '" << name << "' must be a contiguous f32 tensor");
  return const_cast<Tensor*>(t)->data_as<float>();
}

}  // namespace

void zero_grad(const nn::ParameterList& grads) {
  for (const auto& [name, g] : grads) {
    float* p = grad_data(g, "zero_grad", name);
    std::fill_n(p, g->numel(), 0.f);
  }
}

double clip_grad_norm(const nn::ParameterList& grads, double max_norm) {
  const nn::detail::PointwiseKernels& k = nn::detail::pointwise_kernels();
  double sum = 0.0;
  for (const auto& [name, g] : grads) {
    const float* p = grad_data(g, "clip_grad_norm", name);
    const std::int64_t n = g->numel();
    // f32 partial sums of 1024 squares (no cancellation: every term is >= 0; each over 16
    // lanes in a fixed order, whatever the ISA), added in double in a fixed order, so the
    // norm depends on neither the thread count nor the ISA.
    const std::int64_t chunks = (n + 1023) / 1024;
    std::vector<double> partial(static_cast<std::size_t>(chunks));
    qkv::detail::parallel_chunks("nn.clip_grad_norm", chunks, n > 16384, num_threads(), [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t c = c0; c < c1; ++c)
        partial[static_cast<std::size_t>(c)] = k.sum_squares(p + c * 1024, std::min(n, (c + 1) * 1024) - c * 1024);
    });
    for (double s : partial) sum += s;
  }
  const double norm = std::sqrt(sum);
  if (max_norm > 0 && norm > max_norm) {
    const auto factor = static_cast<float>(max_norm / (norm + 1e-6));
    for (const auto& [name, g] : grads) {
      float* p = grad_data(g, "clip_grad_norm", name);
      const std::int64_t n = g->numel();
      qkv::detail::parallel_chunks("nn.clip_grad_norm", n, n > 16384, num_threads(), [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) p[i] *= factor;
      });
    }
  }
  return norm;
}

AdamW::AdamW(const nn::ParameterList& params, const AdamWOptions& options)
    : params_(params), options_(options) {
  QKV_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
            "AdamW: betas must be in [0, 1), got " << options.beta1 << ", " << options.beta2);
  QKV_CHECK(options.eps > 0 && options.weight_decay >= 0,
            "AdamW: eps must be > 0 and weight_decay >= 0");
  for (const auto& [name, p] : params_) {
    grad_data(p, "AdamW", name);
    m_.push_back(Tensor::zeros(p->shape()));
    v_.push_back(Tensor::zeros(p->shape()));
  }
}

void AdamW::step(const nn::ParameterList& grads, double lr) {
  QKV_CHECK(grads.size() == params_.size(),
            "AdamW::step: " << grads.size() << " gradients for " << params_.size() << " parameters");
  ++t_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t_));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(t_));
  // θ −= lr·(m/bias1)/(sqrt(v/bias2) + eps), written as torch does:
  // step_size = lr/bias1, denom = sqrt(v)/sqrt(bias2) + eps.
  const auto step_size = static_cast<float>(lr / bias1);
  const auto inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  const auto eps = static_cast<float>(options_.eps);
  const auto fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
  const nn::detail::PointwiseKernels& k = nn::detail::pointwise_kernels();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = *params_[i].second;
    const Tensor* g = grads[i].second;
    QKV_CHECK(g && g->shape() == p.shape(), "AdamW::step: gradient '" << grads[i].first
                                                << "' does not match parameter '"
                                                << params_[i].first << "' " << p.shape_string());
    const float* pg = grad_data(g, "AdamW::step", grads[i].first);
    float* pp = p.data_as<float>();
    float* pm = m_[i].data_as<float>();
    float* pv = v_[i].data_as<float>();
    const bool decay = options_.decay_vectors || p.dim() >= 2;
    const auto keep = static_cast<float>(1.0 - lr * (decay ? options_.weight_decay : 0.0));
    const std::int64_t n = p.numel();
    // θ·keep; m = β1·m + (1 − β1)·g; v = β2·v + (1 − β2)·g²; θ −= step_size·m/(√v·inv_sqrt_bias2 + eps)
    const nn::detail::AdamWScalars s{keep, fb1, fb2, step_size, inv_sqrt_bias2, eps};
    qkv::detail::parallel_chunks("nn.adamw", n, n > 4096, num_threads(), [&](std::int64_t j0, std::int64_t j1) {
      k.adamw(s, pp + j0, pm + j0, pv + j0, pg + j0, j1 - j0);
    });
  }
}

std::vector<std::pair<std::string, Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(params_[i].first + ".exp_avg", m_[i]);
    out.emplace_back(params_[i].first + ".exp_avg_sq", v_[i]);
  }
  return out;
}

void AdamW::load_state(const std::vector<std::pair<std::string, Tensor>>& state, std::int64_t steps) {
  QKV_CHECK(steps >= 0, "AdamW::load_state: steps must be >= 0, got " << steps);
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : state) by_name[name] = &t;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (int which = 0; which < 2; ++which) {
      const std::string name = params_[i].first + (which == 0 ? ".exp_avg" : ".exp_avg_sq");
      auto it = by_name.find(name);
      QKV_CHECK(it != by_name.end(), "AdamW::load_state: missing '" << name << "'");
      QKV_CHECK(it->second->shape() == params_[i].second->shape(),
                "AdamW::load_state: '" << name << "' must be " << params_[i].second->shape_string()
                                       << ", got " << it->second->shape_string());
      (which == 0 ? m_[i] : v_[i]).copy_from(*it->second);
    }
  }
  t_ = steps;
}

double cosine_schedule(std::int64_t step, const Schedule& s) {
  QKV_CHECK(s.total_steps >= 1 && s.warmup_steps >= 0 && s.peak_lr >= 0,
            "cosine_schedule: total_steps must be >= 1, warmup_steps >= 0, peak_lr >= 0");
  if (step < s.warmup_steps)
    return s.peak_lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  const double span = static_cast<double>(std::max<std::int64_t>(s.total_steps - s.warmup_steps, 1));
  const double progress = std::min(1.0, static_cast<double>(step - s.warmup_steps) / span);
  const double floor = s.peak_lr * s.min_lr_ratio;
  return floor + (s.peak_lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

// loss_r = −Σ_v t_v·log p_v with t = (1−ε)·onehot + ε/V; mean over counted rows.
// ∂loss/∂logit_v = (p_v − t_v) / counted.
CrossEntropyResult cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets,
                                 Tensor* dlogits, double label_smoothing,
                                 std::int64_t ignore_index) {
  QKV_CHECK(logits.defined() && logits.dim() == 2, "cross_entropy: logits must be (N, V)");
  QKV_CHECK(label_smoothing >= 0 && label_smoothing <= 1,
            "cross_entropy: label_smoothing must be in [0, 1], got " << label_smoothing);
  const std::int64_t N = logits.size(0), V = logits.size(1);
  QKV_CHECK(static_cast<std::int64_t>(targets.size()) == N,
            "cross_entropy: " << targets.size() << " targets for " << N << " rows");
  Tensor x = nn::detail::contiguous_f32(logits, "cross_entropy", "logits");
  CrossEntropyResult result;
  for (std::int64_t r = 0; r < N; ++r) {
    const std::int64_t t = targets[static_cast<std::size_t>(r)];
    if (t == ignore_index) continue;
    QKV_CHECK(t >= 0 && t < V, "cross_entropy: targets[" << r << "] = " << t
                                                         << " is out of range [0, " << V << ")");
    ++result.counted;
  }
  if (dlogits) *dlogits = Tensor::empty({N, V});
  const float* px = x.data_as<float>();
  const double eps = label_smoothing;
  const double scale = result.counted > 0 ? 1.0 / static_cast<double>(result.counted) : 0.0;
  // Rows are independent: split across threads, each row's loss kept apart and summed in
  // row order afterwards, so the loss does not depend on the thread count. exp runs in
  // float (the products that made the logits are float); the sums run in double. Each row
  // is one call of a vectorised kernel (nn/kernels/pointwise.h).
  const nn::detail::PointwiseKernels& k = nn::detail::pointwise_kernels();
  std::vector<double> row_loss(static_cast<std::size_t>(N), 0.0);
  std::vector<char> row_correct(static_cast<std::size_t>(N), 0);
  qkv::detail::parallel_chunks("train.cross_entropy", N, N * V >= (1 << 16), num_threads(),
                               [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t t = targets[static_cast<std::size_t>(r)];
      float* d = dlogits ? dlogits->data_as<float>() + r * V : nullptr;  // (V)
      if (t == ignore_index) {
        if (d) std::fill_n(d, V, 0.f);
        continue;
      }
      const nn::detail::CrossEntropyRow row = k.cross_entropy_row(px + r * V, V, t, eps, scale, d);
      row_loss[static_cast<std::size_t>(r)] = row.loss;
      row_correct[static_cast<std::size_t>(r)] = row.argmax == t;
    }
  });
  double total = 0.0;
  for (std::int64_t r = 0; r < N; ++r) {
    total += row_loss[static_cast<std::size_t>(r)];
    result.correct += row_correct[static_cast<std::size_t>(r)];
  }
  result.loss = result.counted > 0 ? total / static_cast<double>(result.counted) : 0.0;
  return result;
}

}  // namespace qkv::train
