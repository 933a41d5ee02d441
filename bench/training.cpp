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
// A benchmark, not a test: nothing here asserts a time.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/cpu.h"
#include "qkv/memory.h"
#include "qkv/rng.h"
#include "qkv/seq2seq.h"
#include "qkv/threads.h"
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
};

const char* kUsage =
    "usage: qkv_bench_training [--batch B] [--src-len S] [--tgt-len T] [--d-model E] "
    "[--nhead H] [--ffn F] [--enc N] [--dec M] [--vocab V] [--steps K] [--warmup W] "
    "[--threads N] [--seed X] [--json]\n";

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--json") {
      o.json = true;
      continue;
    }
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
