// Training: the optimizer, its learning-rate schedule, gradient clipping and the loss.
//
// Parameters and gradients are nn::ParameterLists of the same module type: a module's
// gradients live in a second instance of that module (`grads`), so the i-th gradient has
// the i-th parameter's name and shape (llm.c keeps its gradients the same way).
//
//   AdamW opt(model.parameters(), {.weight_decay = 0.01});
//   zero_grad(grads.parameters());
//   double loss = model.forward_backward(batch, grads).loss;
//   double norm = clip_grad_norm(grads.parameters(), 1.0);
//   opt.step(grads.parameters(), cosine_schedule(step, {...}));
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qkv/nn.h"
#include "qkv/tensor.h"

namespace qkv::train {

// Sets every gradient to 0.
void zero_grad(const nn::ParameterList& grads);

// torch.nn.utils.clip_grad_norm_: the global L2 norm over every gradient; when it exceeds
// max_norm, every gradient is scaled by max_norm / (norm + 1e-6). Returns the norm before
// clipping. max_norm <= 0 only measures.
double clip_grad_norm(const nn::ParameterList& grads, double max_norm);

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // decoupled (Loshchilov & Hutter): θ −= lr·λ·θ
  // Parameters of rank < 2 (biases, LayerNorm gains) are not decayed, as most recipes do.
  bool decay_vectors = false;
};

// torch.optim.AdamW, step for step:
//   θ −= lr·λ·θ;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
//   θ −= lr · (m / (1−β1ᵗ)) / (sqrt(v / (1−β2ᵗ)) + eps)
class AdamW {
 public:
  AdamW(const nn::ParameterList& params, const AdamWOptions& options = {});
  void step(const nn::ParameterList& grads, double lr);
  std::int64_t steps() const { return t_; }

  // The moments, named "<param>.exp_avg" / "<param>.exp_avg_sq", for checkpoints.
  std::vector<std::pair<std::string, Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state, std::int64_t steps);

 private:
  nn::ParameterList params_;
  AdamWOptions options_;
  std::vector<Tensor> m_, v_;  // same shapes as the parameters
  std::int64_t t_ = 0;
};

struct Schedule {
  double peak_lr = 1e-3;
  std::int64_t warmup_steps = 100;
  std::int64_t total_steps = 1000;
  double min_lr_ratio = 0.0;  // the cosine ends at peak_lr · min_lr_ratio
};
// Linear warm-up from peak/warmup to peak over warmup_steps, then a half cosine down to
// peak·min_lr_ratio at total_steps. step counts from 0.
double cosine_schedule(std::int64_t step, const Schedule& schedule);

// Cross-entropy over rows of logits with optional label smoothing ε (torch's
// F.cross_entropy(label_smoothing=ε)): target row distribution (1−ε)·onehot + ε/V.
// Rows whose target is `ignore_index` count for nothing. Loss = mean over counted rows.
//   logits: (N, V) f32 contiguous   targets: N ids
//   -> the loss; dlogits (N, V) = ∂loss/∂logits (written, not accumulated).
struct CrossEntropyResult {
  double loss = 0.0;
  std::int64_t counted = 0;  // rows that were not ignored
  std::int64_t correct = 0;  // counted rows whose argmax equals the target
};
CrossEntropyResult cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets,
                                 Tensor* dlogits, double label_smoothing = 0.0,
                                 std::int64_t ignore_index = -100);

}  // namespace qkv::train
