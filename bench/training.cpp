// qkv_bench_training — times training steps of qkv::models::Seq2Seq (the date translator's
// encoder–decoder) for scripts/bench_training.py, which runs the same model in PyTorch and
// interleaves the two.
//
// Usage: qkv_bench_training [--batch B] [--src-len S] [--tgt-len T] [--d-model E]
//          [--nhead H] [--ffn F] [--enc N] [--dec M] [--vocab V] [--steps K] [--warmup W]
//          [--threads N] [--seed X] [--json]
//
// One step, as `qkv train` runs it:
//   zero_grad(grads); model.forward_backward(batch, grads); clip_grad_norm(grads, 1.0);
//   opt.step(grads, 1e-3)                        (AdamW, weight_decay 0.01)
// on one fixed batch: B rows of S source and T target ids drawn uniformly from [4, V)
// (above the specials), every row full length (no padding), tgt_out random ids too.
// W warm-up steps are discarded, then K steps are timed one by one; the median is
// reported with tokens/s = B·(S+T) / median step time. --json prints one line:
//   {"impl": "qkv", "step_ms": median, "tokens_per_s": ..., "steps_ms": [...],
//    "loss_first": ..., "loss_last": ..., "losses": [every step's, warm-up included],
//    "batch": B, ..., "threads": N, "cpu": ...}
//
// --lm: instead, the language model at sotu-gpt's shape (models/sotu-gpt/config.json: 4
// layers, E 256, 4 heads, F 1024 with GELU's tanh form, V 8192, T 256; batch 16 unless
// --batch): one step as `qkv train lm` runs it,
//   zero_grad; gpt2_lm_loss(tokens, &grads); clip_grad_norm(grads, 1); AdamW(weight_decay 0.1)
// then, with --breakdown, each part of the step alone at the step's shapes (the best of K
// calls, times the calls a step makes) against the best step, and the rest (residual adds,
// copies, head splits) as the step less the parts. Best, not median: on a shared machine a
// parallel region waits a whole scheduler tick (4 ms) for a preempted thread, which the
// medians of short parts carry and the best of K mostly does not (the steps' medians are
// printed too). The pointwise
// kernels (GELU tanh forward and backward, the cross-entropy, AdamW, the clipping norm:
// src/nn/kernels/pointwise.h) are timed both ways, their naive twins ("before") and the
// vectorised loops ("after"), alternating call by call; so are whole steps.
// --lm --bf16: "before" is the step with f32 products and "after" with bf16 products
// (nn::ProductPrecision, as `qkv train lm --precision bf16`), alternating step by step; the
// breakdown times the products and the attention both ways, the rest (vectorised) once.
//
// A benchmark, not a test: nothing here asserts a time.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/kernels/pointwise.h"  // force_naive_pointwise: the before/after of --lm
#include "qkv/attention.h"
#include "qkv/cpu.h"
#include "qkv/gpt2.h"
#include "qkv/memory.h"
#include "qkv/rng.h"
#include "qkv/seq2seq.h"
#include "qkv/threads.h"
#include "qkv/nn.h"
#include "qkv/train.h"
#include "qkv/version.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::int64_t batch = 128, src_len = 32, tgt_len = 11;
  std::int64_t d_model = 128, nhead = 4, ffn = 256, enc = 2, dec = 2, vocab = 64;
  std::int64_t steps = 20, warmup = 3;
  int threads = 0;  // 0: qkv's default (QKV_NUM_THREADS or the cores)
  std::uint64_t seed = 0;
  bool json = false;
  bool lm = false, breakdown = false;
  bool bf16 = false;  // --lm --bf16: before = f32 products, after = bf16 (nn::ProductPrecision)
  bool batch_given = false;
};

const char* kUsage =
    "usage: qkv_bench_training [--batch B] [--src-len S] [--tgt-len T] [--d-model E] "
    "[--nhead H] [--ffn F] [--enc N] [--dec M] [--vocab V] [--steps K] [--warmup W] "
    "[--threads N] [--seed X] [--json]\n"
    "       qkv_bench_training --lm [--bf16] [--breakdown] [--batch B] [--steps K] [--warmup W] [--threads N]\n";

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--json" || flag == "--lm" || flag == "--breakdown" || flag == "--bf16") {
      (flag == "--json" ? o.json : flag == "--lm" ? o.lm : flag == "--bf16" ? o.bf16 : o.breakdown) = true;
      continue;
    }
    if (flag == "--batch") o.batch_given = true;
    if (i + 1 >= argc) return false;
    const std::string value = argv[++i];
    std::int64_t* target = flag == "--batch"     ? &o.batch
                           : flag == "--src-len" ? &o.src_len
                           : flag == "--tgt-len" ? &o.tgt_len
                           : flag == "--d-model" ? &o.d_model
                           : flag == "--nhead"   ? &o.nhead
                           : flag == "--ffn"     ? &o.ffn
                           : flag == "--enc"     ? &o.enc
                           : flag == "--dec"     ? &o.dec
                           : flag == "--vocab"   ? &o.vocab
                           : flag == "--steps"   ? &o.steps
                           : flag == "--warmup"  ? &o.warmup
                                                 : nullptr;
    if (target != nullptr) *target = std::stoll(value);
    else if (flag == "--threads") o.threads = std::stoi(value);
    else if (flag == "--seed") o.seed = std::stoull(value);
    else return false;
  }
  return o.batch >= 1 && o.src_len >= 1 && o.tgt_len >= 1 && o.vocab > 4 && o.steps >= 1 &&
         o.warmup >= 0;
}

// B rows, every one full length: ids uniform in [4, V), so no pad/BOS/EOS/UNK.
qkv::models::Seq2SeqBatch random_batch(const Options& o, qkv::Rng& rng) {
  qkv::models::Seq2SeqBatch b;
  b.batch = o.batch, b.src_len = o.src_len, b.tgt_len = o.tgt_len;
  const auto draw = [&](std::int64_t n) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
    for (auto& id : ids) id = 4 + static_cast<std::int64_t>(rng.next_u64() % static_cast<std::uint64_t>(o.vocab - 4));
    return ids;
  };
  b.src = draw(o.batch * o.src_len);
  b.src_lengths.assign(static_cast<std::size_t>(o.batch), o.src_len);
  b.tgt_in = draw(o.batch * o.tgt_len);
  b.tgt_out = draw(o.batch * o.tgt_len);
  return b;
}


double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

qkv::Tensor random_tensor(const qkv::Shape& shape, qkv::Rng& rng, double scale) {
  qkv::Tensor t = qkv::Tensor::empty(shape);
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(scale * rng.normal());
  return t;
}

// What "before" and "after" compare: the naive twins of the pointwise kernels against the
// vectorised ones (both in f32), or with --bf16 the step's products in f32 against bf16.
bool compare_bf16 = false;

// Runs fn in the "before" or the "after" configuration.
template <class F>
void in_mode(bool before, F&& fn) {
  if (compare_bf16) {
    const qkv::nn::ProductPrecision products(before ? qkv::DType::f32 : qkv::DType::bf16);
    fn();
  } else {
    qkv::nn::detail::force_naive_pointwise(before);
    fn();
    qkv::nn::detail::force_naive_pointwise(false);
  }
}

// One row of the breakdown: the milliseconds of one call, before and after.
struct Part {
  std::string name;
  std::int64_t calls;  // per step
  double before_ms, after_ms;
};

// Best ms of `fn` over `reps` calls; when `both`, calls alternate between the "before"
// configuration (first of each pair) and the "after" one, else every call runs "after".
template <class F>
Part time_part(const std::string& name, std::int64_t calls, int reps, bool both, F&& fn) {
  std::vector<double> before, after;
  for (int r = -1; r < reps; ++r) {  // r = −1: warm-up
    for (int naive = both ? 1 : 0; naive >= 0; --naive) {
      double ms = 0;
      in_mode(naive == 1, [&] {
        const auto start = Clock::now();
        fn();
        ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      });
      if (r >= 0) (naive == 1 ? before : after).push_back(ms);
    }
  }
  const double a = *std::min_element(after.begin(), after.end());
  return {name, calls, both ? *std::min_element(before.begin(), before.end()) : a, a};
}

int run_lm(const Options& o) {
  namespace nn = qkv::nn;
  qkv::retain_freed_memory();  // as `qkv train` does
  compare_bf16 = o.bf16;
  if (o.bf16) nn::check_bf16_products("qkv_bench_training --bf16");
  if (o.threads > 0) qkv::set_num_threads(o.threads);
  qkv::models::Gpt2Config c;  // models/sotu-gpt/config.json
  c.vocab_size = 8192, c.n_positions = 256, c.n_embd = 256, c.n_layer = 4, c.n_head = 4;
  c.activation = nn::GeluApproximation::tanh;
  const std::int64_t B = o.batch_given ? o.batch : 16, T = c.n_positions, E = c.n_embd, F = c.inner(),
                     V = c.vocab_size, H = c.n_head, L = c.n_layer, N = B * T;
  qkv::models::Gpt2Weights w = qkv::models::Gpt2Weights::initialized(c, o.seed);
  qkv::models::Gpt2Weights grads = qkv::models::Gpt2Weights::zeros_like(c);
  qkv::train::AdamW opt(w.parameters(), {.weight_decay = 0.1});
  qkv::Rng rng(o.seed + 1);
  std::vector<std::int64_t> tokens(static_cast<std::size_t>(B * (T + 1)));  // (B, T + 1)
  for (auto& id : tokens) id = rng.uniform_int(V);

  // Whole steps, "before" and "after" alternating step by step.
  std::vector<double> step_before, step_after;
  double loss = 0.0;
  for (std::int64_t s = 0; s < o.warmup + o.steps; ++s) {
    for (int naive = 1; naive >= 0; --naive) {
      double ms = 0;
      in_mode(naive == 1, [&] {
        const auto start = Clock::now();
        qkv::train::zero_grad(grads.parameters());
        loss = qkv::models::gpt2_lm_loss(c, w, tokens, B, T, &grads).loss;
        qkv::train::clip_grad_norm(grads.parameters(), 1.0);
        opt.step(grads.parameters(), 1e-4);
        ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      });
      if (s >= o.warmup) (naive == 1 ? step_before : step_after).push_back(ms);
    }
  }
  const double before_median = median_of(step_before), after_median = median_of(step_after);
  const double before = *std::min_element(step_before.begin(), step_before.end()),
               after = *std::min_element(step_after.begin(), step_after.end());
  std::printf("qkv %s, %d threads, %s\n", qkv::kVersion, qkv::num_threads(), qkv::cpu_summary().c_str());
  std::printf("GPT-2 LM B=%lld T=%lld E=%lld H=%lld F=%lld layers=%lld V=%lld, loss %.4f\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(E),
              static_cast<long long>(H), static_cast<long long>(F), static_cast<long long>(L),
              static_cast<long long>(V), loss);
  std::printf("before: %s; after: %s\n", o.bf16 ? "f32 products" : "naive pointwise twins",
              o.bf16 ? "bf16 products (f32 accumulation)" : "vectorised pointwise kernels");
  std::printf("step (%lld each, alternating): median before %.1f ms, after %.1f ms (%.2fx); "
              "best before %.1f ms, after %.1f ms (%.2fx)\n",
              static_cast<long long>(o.steps), before_median, after_median, before_median / after_median, before,
              after, before / after);
  if (!o.breakdown) return 0;

  const int reps = static_cast<int>(std::max<std::int64_t>(o.steps, 5));
  std::vector<Part> parts;
  // The products: nn::Linear forward and backward (dx, dW and the bias's gradient) at every
  // shape of the step, the tied head without bias.
  struct Product { const char* name; std::int64_t in, out, calls; bool bias; };
  const Product products[] = {{"linear qkv E->3E", E, 3 * E, L, true}, {"linear out E->E", E, E, L, true},
                              {"linear fc E->F", E, F, L, true},      {"linear proj F->E", F, E, L, true},
                              {"lm head E->V (tied)", E, V, 1, false}};
  for (const Product& p : products) {
    nn::Linear lin(p.in, p.out, p.bias, 7), lin_grads(p.in, p.out, p.bias, 8);
    const qkv::Tensor x = random_tensor({N, p.in}, rng, 1.0), dy = random_tensor({N, p.out}, rng, 1e-3);
    nn::Linear::Record rec;
    // The backward reads the record its own mode's forward kept (bf16 x under bf16).
    nn::Linear::Record rec16;
    parts.push_back(time_part(std::string(p.name) + " fwd", p.calls, reps, o.bf16, [&] {
      lin.forward(x, {}, nn::product_dtype() == qkv::DType::bf16 ? &rec16 : &rec);
    }));
    parts.push_back(time_part(std::string(p.name) + " bwd", p.calls, reps, o.bf16, [&] {
      lin.backward(dy, nn::product_dtype() == qkv::DType::bf16 ? rec16 : rec, lin_grads);
    }));
  }
  {  // attention's core: causal SDPA (B, H, T, E/H), forward keeping lse, and backward
    const qkv::Tensor q = random_tensor({B, H, T, E / H}, rng, 1.0), k = random_tensor({B, H, T, E / H}, rng, 1.0),
                      v = random_tensor({B, H, T, E / H}, rng, 1.0), dout = random_tensor({B, H, T, E / H}, rng, 1e-3);
    qkv::AttentionOptions opts;
    opts.causal = true;
    opts.return_lse = true;
    // Under bf16 products MultiheadAttention hands the kernel q, k, v in bf16.
    const qkv::Tensor q16 = q.to(qkv::DType::bf16), k16 = k.to(qkv::DType::bf16), v16 = v.to(qkv::DType::bf16);
    const auto bf16 = [] { return nn::product_dtype() == qkv::DType::bf16; };
    qkv::AttentionResult res, res16;
    parts.push_back(time_part("attention (causal) fwd", L, reps, o.bf16, [&] {
      if (bf16()) res16 = qkv::attention(q16, k16, v16, opts);
      else res = qkv::attention(q, k, v, opts);
    }));
    parts.push_back(time_part("attention (causal) bwd", L, reps, o.bf16, [&] {
      if (bf16()) qkv::attention_backward(dout, q16, k16, v16, res16.out, res16.lse, opts);
      else qkv::attention_backward(dout, q, k, v, res.out, res.lse, opts);
    }));
  }
  {
    const qkv::Tensor x = random_tensor({N, F}, rng, 1.0), dy = random_tensor({N, F}, rng, 1e-3);
    parts.push_back(time_part("gelu tanh fwd", L, reps, !o.bf16, [&] { nn::gelu(x, nn::GeluApproximation::tanh); }));
    parts.push_back(time_part("gelu tanh bwd", L, reps, !o.bf16,
                              [&] { nn::gelu_backward(dy, x, nn::GeluApproximation::tanh); }));
  }
  {
    nn::LayerNorm ln({E}), ln_grads({E});
    const qkv::Tensor x = random_tensor({N, E}, rng, 1.0), dy = random_tensor({N, E}, rng, 1e-3);
    nn::LayerNorm::Record rec;
    parts.push_back(time_part("layer norm fwd", 2 * L + 1, reps, false, [&] { ln.forward(x, &rec); }));
    parts.push_back(time_part("layer norm bwd", 2 * L + 1, reps, false, [&] { ln.backward(dy, rec, ln_grads); }));
  }
  {
    const qkv::Tensor logits = random_tensor({N, V}, rng, 1.0);
    std::vector<std::int64_t> targets(tokens.begin(), tokens.begin() + N);
    qkv::Tensor dlogits;
    parts.push_back(time_part("cross-entropy + grad", 1, reps, !o.bf16,
                              [&] { qkv::train::cross_entropy(logits, targets, &dlogits); }));
  }
  {
    nn::Embedding wte = w.wte, wte_grads = grads.wte;
    std::vector<std::int64_t> ids(tokens.begin(), tokens.begin() + N);
    nn::Embedding::Record rec;
    const qkv::Tensor dy = random_tensor({N, E}, rng, 1e-3);
    parts.push_back(time_part("embedding wte fwd", 1, reps, false, [&] { wte.forward(ids, {B, T}, &rec); }));
    parts.push_back(time_part("embedding wte bwd", 1, reps, false, [&] { wte.backward(dy, rec, wte_grads); }));
  }
  parts.push_back(time_part("zero_grad", 1, reps, false, [&] { qkv::train::zero_grad(grads.parameters()); }));
  parts.push_back(time_part("clip_grad_norm (norm)", 1, reps, !o.bf16,
                            [&] { qkv::train::clip_grad_norm(grads.parameters(), 1e30); }));
  parts.push_back(time_part("AdamW step", 1, reps, !o.bf16, [&] { opt.step(grads.parameters(), 1e-4); }));

  std::printf("\nbest of %d calls each; step_*: ms a step spends there, %%: of the best step\n", reps);
  std::printf("%-26s %5s %10s %10s %10s %10s %7s %7s %6s\n", "part", "calls", "before/ms", "after/ms",
              "step_bef", "step_aft", "%bef", "%aft", "ratio");
  double sum_before = 0, sum_after = 0;
  for (const Part& p : parts) {
    const double sb = p.before_ms * static_cast<double>(p.calls), sa = p.after_ms * static_cast<double>(p.calls);
    sum_before += sb, sum_after += sa;
    std::printf("%-26s %5lld %10.3f %10.3f %10.2f %10.2f %6.1f%% %6.1f%% %5.2fx\n", p.name.c_str(),
                static_cast<long long>(p.calls), p.before_ms, p.after_ms, sb, sa, 100 * sb / before,
                100 * sa / after, p.before_ms / p.after_ms);
  }
  std::printf("%-26s %5s %10s %10s %10.2f %10.2f %6.1f%% %6.1f%%\n", "rest (step - parts)", "", "", "",
              before - sum_before, after - sum_after, 100 * (before - sum_before) / before,
              100 * (after - sum_after) / after);
  std::printf("%-26s %5s %10s %10s %10.2f %10.2f %6.1f%% %6.1f%% %5.2fx\n", "step (best)", "", "", "", before,
              after, 100.0, 100.0, before / after);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    if (!parse(argc, argv, o)) {
      std::fputs(kUsage, stderr);
      return 2;
    }
  } catch (const std::exception&) {  // std::stoll on a non-number
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (o.lm) {
    try {
      return run_lm(o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "qkv_bench_training: %s\n", e.what());
      return 1;
    }
  }
  try {
    qkv::retain_freed_memory();  // as `qkv train` does
    if (o.threads > 0) qkv::set_num_threads(o.threads);
    qkv::models::Seq2SeqConfig config;
    config.vocab_size = o.vocab;
    config.d_model = o.d_model;
    config.nhead = o.nhead;
    config.dim_feedforward = o.ffn;
    config.num_encoder_layers = o.enc;
    config.num_decoder_layers = o.dec;
    config.max_len = std::max(o.src_len, o.tgt_len);

    qkv::models::Seq2Seq model(config, o.seed);
    qkv::models::Seq2Seq grads(config, o.seed);
    qkv::train::AdamW opt(model.parameters(), {.weight_decay = 0.01});
    qkv::Rng rng(o.seed + 1);
    const qkv::models::Seq2SeqBatch batch = random_batch(o, rng);

    std::vector<double> steps_ms;
    std::vector<double> losses;  // every step's, warm-up included: the loss curve
    double loss_first = 0.0, loss_last = 0.0;
    for (std::int64_t step = 0; step < o.warmup + o.steps; ++step) {
      const auto start = Clock::now();
      qkv::train::zero_grad(grads.parameters());
      const qkv::train::CrossEntropyResult r = model.forward_backward(batch, grads);
      qkv::train::clip_grad_norm(grads.parameters(), 1.0);
      opt.step(grads.parameters(), 1e-3);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (step == 0) loss_first = r.loss;
      loss_last = r.loss;
      losses.push_back(r.loss);
      if (step >= o.warmup) steps_ms.push_back(ms);
    }
    std::vector<double> sorted = steps_ms;
    std::sort(sorted.begin(), sorted.end());
    const std::size_t n = sorted.size();
    const double median = n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    const double tokens_per_s =
        static_cast<double>(o.batch * (o.src_len + o.tgt_len)) / (median * 1e-3);

    if (o.json) {
      std::cout << Json{{"impl", "qkv"},           {"step_ms", median},
                        {"tokens_per_s", tokens_per_s}, {"steps_ms", steps_ms},
                        {"loss_first", loss_first},     {"loss_last", loss_last},
                        {"losses", losses},             {"batch", o.batch},             {"src_len", o.src_len},
                        {"tgt_len", o.tgt_len},         {"d_model", o.d_model},
                        {"nhead", o.nhead},             {"ffn", o.ffn},
                        {"enc", o.enc},                 {"dec", o.dec},
                        {"vocab", o.vocab},             {"steps", o.steps},
                        {"warmup", o.warmup},           {"threads", qkv::num_threads()},
                        {"parameters", model.num_parameters()},
                        {"qkv", qkv::kVersion},         {"cpu", qkv::cpu_summary()}}
                       .dump()
                << std::endl;
    } else {
      std::printf("qkv %s, %d threads, %s\n", qkv::kVersion, qkv::num_threads(),
                  qkv::cpu_summary().c_str());
      std::printf("Seq2Seq B=%lld S=%lld T=%lld E=%lld H=%lld F=%lld enc=%lld dec=%lld V=%lld "
                  "(%lld parameters)\n",
                  static_cast<long long>(o.batch), static_cast<long long>(o.src_len),
                  static_cast<long long>(o.tgt_len), static_cast<long long>(o.d_model),
                  static_cast<long long>(o.nhead), static_cast<long long>(o.ffn),
                  static_cast<long long>(o.enc), static_cast<long long>(o.dec),
                  static_cast<long long>(o.vocab), static_cast<long long>(model.num_parameters()));
      std::printf("step %.2f ms (median of %lld, %lld warm-up), %.0f tokens/s, loss %.4f -> %.4f\n",
                  median, static_cast<long long>(o.steps), static_cast<long long>(o.warmup),
                  tokens_per_s, loss_first, loss_last);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_bench_training: %s\n", e.what());
    return 1;
  }
  return 0;
}
