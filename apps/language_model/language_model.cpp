// The language-model task: training a GPT-2 on a text (tokenizer, batches, AdamW,
// checkpoints, validation) and scoring a text under a model. See language_model/language_model.h.

#include "language_model/language_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/text_input.h"
#include "qkv/error.h"
#include "qkv/files.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/train.h"
#include "qkv/trainer.h"
#include "text/unicode.h"

namespace qkv::models {

namespace {

using Clock = std::chrono::steady_clock;

std::string number(double v) {
  std::ostringstream s;
  s.precision(6);
  s << v;
  return s.str();
}

// The tokenizer's two files, as text: kept in memory from the start of a run and written
// with the weights at every save, so that a run killed (or failing) before it saves leaves
// out_dir's previous model whole, tokenizer included.
struct TokenizerTexts {
  std::string vocab_json, merges_txt;
  std::string sha256() const { return sha256_hex(sha256_hex(vocab_json) + sha256_hex(merges_txt)); }
};

// The model directory (tokenizer, weights, config.json) changes as a whole (ModelFiles),
// at every checkpoint and at the end. The loop writes its checkpoint after it, with the
// tokenizer's digest in the run's identity, so a kill between the two leaves a checkpoint
// that --resume refuses as another run's, never one it would continue with another tokenizer.
void save_model(const LmTrainingOptions& o, const Gpt2Config& c, Gpt2Weights& w, const TokenizerTexts& tokenizer,
                std::int64_t step, double val_loss, double seconds) {
  std::map<std::string, std::string> model_meta = {{"trained_with", o.command},
                                                   {"steps", std::to_string(step)},
                                                   {"seed", std::to_string(o.seed)},
                                                   {"training_seconds", number(seconds)}};
  if (val_loss >= 0) model_meta["heldout_loss"] = number(val_loss);
  ModelFiles files(o.out_dir);
  files.add("vocab.json", tokenizer.vocab_json);
  files.add("merges.txt", tokenizer.merges_txt);
  add_gpt2_weights(files, w, model_meta);
  files.commit(c.to_json());
}

// Mean loss over the first whole windows of T + 1 tokens of `stream` (up to max_tokens
// predicted tokens), B windows per forward.
double validation_loss(const Gpt2Config& c, const Gpt2Weights& w,
                       const std::vector<std::int64_t>& stream, std::int64_t T, std::int64_t B,
                       std::int64_t max_tokens) {
  const auto N = static_cast<std::int64_t>(stream.size());
  const std::int64_t windows = std::max<std::int64_t>(1, std::min((N - 1) / T, max_tokens / T));
  double total = 0;
  std::int64_t counted = 0;
  for (std::int64_t first = 0; first < windows; first += B) {
    const std::int64_t b = std::min(B, windows - first);
    std::vector<std::int64_t> tokens;
    for (std::int64_t i = first; i < first + b; ++i)
      tokens.insert(tokens.end(), stream.begin() + i * T, stream.begin() + i * T + T + 1);
    const train::CrossEntropyResult r = gpt2_lm_loss(c, w, tokens, b, T);
    total += r.loss * static_cast<double>(r.counted);
    counted += r.counted;
  }
  return total / static_cast<double>(counted);
}

}  // namespace

Gpt2Config lm_model_config() {
  Gpt2Config c;
  c.n_layer = 4;
  c.n_embd = 256;
  c.n_head = 4;
  c.n_positions = 256;
  c.n_inner = 0;  // 4·E
  c.activation = nn::GeluApproximation::tanh;
  return c;
}

std::vector<std::int64_t> lm_tokens(const BpeTokenizer& tokenizer, std::string_view text) {
  const std::optional<std::int64_t> eos = tokenizer.eos_id();
  QKV_CHECK(eos.has_value(), "language model: the tokenizer has no <|endoftext|> token");
  std::vector<std::int64_t> ids = tokenizer.encode(text);
  ids.insert(ids.begin(), *eos);
  return ids;
}

std::vector<std::int64_t> lm_batch_offsets(std::uint64_t seed, std::int64_t step, std::int64_t B,
                                           std::int64_t T, std::int64_t num_tokens) {
  QKV_CHECK(B >= 1 && T >= 1 && num_tokens >= T + 1,
            "lm_batch_offsets: need B >= 1 windows of T + 1 tokens within " << num_tokens
                                                                            << " tokens, got B = "
                                                                            << B << ", T = " << T);
  const auto span = static_cast<std::uint64_t>(num_tokens - T);  // offsets [0, N - T - 1]
  Rng rng(mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(step) + 1));
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(B));
  // uniform() has 53 bits: floor(u · span) is uniform to within 2^-53 · span per offset.
  for (auto& o : offsets)
    o = rng.uniform_int(static_cast<std::int64_t>(span));
  return offsets;
}

LmTrainingResult train_lm(const LmTrainingOptions& o, const train::ProgressCallback& on_progress,
                          const std::atomic<bool>* stop) {
  QKV_CHECK(o.steps >= 1, "train lm: steps must be >= 1, got " << o.steps);
  QKV_CHECK(o.batch >= 1, "train lm: batch must be >= 1, got " << o.batch);
  QKV_CHECK(!o.out_dir.empty(), "train lm: an output directory is required");
  QKV_CHECK(!o.text.empty(), "train lm: a training text is required");
  QKV_CHECK(o.peak_lr > 0 && std::isfinite(o.peak_lr), "train lm: lr must be > 0, got " << o.peak_lr);
  QKV_CHECK(o.eval_every >= 0 && o.checkpoint_every >= 0 && o.stop_at >= 0,
            "train lm: eval_every, checkpoint_every and stop_at must be >= 0");
  QKV_CHECK(o.context >= 0 && o.context <= o.model.n_positions,
            "train lm: context must be in [1, n_positions = " << o.model.n_positions << "], got "
                                                               << o.context);
  const std::int64_t T = o.context == 0 ? o.model.n_positions : o.context;
  // Data-parallel over more than one rank (LmTrainingOptions::communicator): the loop checks
  // that the ranks agree; rank 0 writes the files.
  const int ranks = o.communicator != nullptr ? o.communicator->size() : 1;
  QKV_CHECK(o.batch >= ranks, "train lm: --batch " << o.batch << " gives some of the " << ranks
                                                  << " ranks no windows; it must be at least the number of ranks");
  const bool writer = o.communicator == nullptr || o.communicator->rank() == 0;
  // Made now, so an output path that cannot be a directory fails before training, not after.
  if (writer) std::filesystem::create_directories(o.out_dir);
  const std::string checkpoint = o.out_dir + "/checkpoint.safetensors";
  const std::filesystem::path out(o.out_dir);

  // The tokenizer: a resumed run reads back its own copy in out_dir; otherwise the files of
  // --tokenizer, or a BPE learned from the text. Every rank gets it the same way (learning
  // is deterministic), so no rank waits on another's files.
  const std::string text = io::read_text(o.text, "train lm: text");
  TokenizerTexts tokenizer_texts;
  std::filesystem::path tokenizer_dir;
  if (o.resume) {
    QKV_CHECK(std::filesystem::exists(checkpoint),
              "train lm: --resume: no checkpoint at " << checkpoint);
    tokenizer_dir = out;
  } else if (!o.tokenizer.empty()) {
    tokenizer_dir = o.tokenizer;
  }
  if (!tokenizer_dir.empty()) {
    for (const char* f : {"vocab.json", "merges.txt"})
      QKV_CHECK(std::filesystem::is_regular_file(tokenizer_dir / f),
                "train lm: tokenizer: " << (tokenizer_dir / f).string() << " does not exist");
    tokenizer_texts.vocab_json = text::read_text_file(tokenizer_dir / "vocab.json", "train lm: tokenizer");
    tokenizer_texts.merges_txt = text::read_text_file(tokenizer_dir / "merges.txt", "train lm: tokenizer");
  } else {
    QKV_CHECK(o.vocab_size >= 257, "train lm: vocab_size must be >= 257 (the 256 bytes and "
                                   "<|endoftext|>), got " << o.vocab_size);
    const BpeVocabulary vocabulary = train_bpe(text, {.vocab_size = o.vocab_size});
    tokenizer_texts = {vocabulary.vocab_json(), vocabulary.merges_txt()};
  }
  const std::filesystem::path named = tokenizer_dir.empty() ? out : tokenizer_dir;
  const BpeTokenizer tokenizer =
      BpeTokenizer::from_texts(tokenizer_texts.vocab_json, tokenizer_texts.merges_txt,
                               named / "vocab.json", named / "merges.txt");
  const std::vector<std::int64_t> stream = lm_tokens(tokenizer, text);
  const auto N = static_cast<std::int64_t>(stream.size());
  QKV_CHECK(N >= T + 1, "train lm: " << o.text << " is " << N - 1 << " tokens; one training window "
                                     << "needs " << T << " (the context) — give a longer text or "
                                     << "a shorter --context");
  std::vector<std::int64_t> heldout;
  if (!o.heldout.empty()) {
    heldout = lm_tokens(tokenizer, io::read_text(o.heldout, "train lm: held-out text"));
    QKV_CHECK(static_cast<std::int64_t>(heldout.size()) >= T + 1,
              "train lm: the held-out text " << o.heldout << " is " << heldout.size() - 1
                                             << " tokens, shorter than one window of " << T);
  }

  Gpt2Config c = o.model;
  c.vocab_size = static_cast<std::int64_t>(tokenizer.vocab_size());
  c.eos_token_id = tokenizer.eos_id();

  // One step: the step's windows (a pure function of seed and step), this rank's rows of
  // them; every window scores T targets.
  struct LmTask : train::Task {
    const LmTrainingOptions& o;
    const Gpt2Config& c;
    const std::vector<std::int64_t>& stream;
    const std::vector<std::int64_t>& heldout;
    std::int64_t T;
    Gpt2Weights w, grads;
    std::vector<std::int64_t> tokens;
    double val_loss = -1.0;
    LmTask(const LmTrainingOptions& options, const Gpt2Config& config, const std::vector<std::int64_t>& s,
           const std::vector<std::int64_t>& h, std::int64_t t)
        : o(options), c(config), stream(s), heldout(h), T(t), w(Gpt2Weights::initialized(config, options.seed)),
          grads(Gpt2Weights::zeros_like(config)), tokens(static_cast<std::size_t>(options.batch * (t + 1))) {}
    nn::ParameterList parameters() override { return w.parameters(); }
    nn::ParameterList gradients() override { return grads.parameters(); }
    train::StepResult step(const train::StepContext& ctx) override {
      const auto N = static_cast<std::int64_t>(stream.size());
      const std::vector<std::int64_t> offsets = lm_batch_offsets(o.seed, ctx.step, o.batch, T, N);
      for (std::int64_t b = 0; b < o.batch; ++b)
        std::copy_n(stream.begin() + offsets[static_cast<std::size_t>(b)], T + 1, tokens.begin() + b * (T + 1));
      const distributed::RowShare rows = ctx.share(o.batch);
      const std::int64_t B = rows.hi - rows.lo;
      const std::span<const std::int64_t> mine(tokens.data() + rows.lo * (T + 1), static_cast<std::size_t>(B * (T + 1)));
      ctx.weigh(static_cast<double>(B * T));
      const train::CrossEntropyResult ce = gpt2_lm_loss(c, w, mine, B, T, &grads, ctx.ready);
      return {.loss = ce.loss, .count = static_cast<double>(B * T), .items = static_cast<double>(B * T)};
    }
    double evaluate() override {
      val_loss = validation_loss(c, w, heldout, T, o.batch, o.eval_tokens);
      return val_loss;
    }
  };
  LmTask task(o, c, stream, heldout, T);
  const auto t0 = Clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  train::LoopOptions loop;
  loop.task = "lm";
  loop.steps = o.steps;
  loop.adam.weight_decay = o.weight_decay;
  loop.clip_norm = o.clip_norm;
  loop.lr = {o.peak_lr, o.warmup_steps, o.min_lr_ratio};
  if (!heldout.empty()) {
    loop.eval_every = o.eval_every;
    loop.eval_at_end = true;
  }
  loop.metric = "held-out loss";
  loop.higher_is_better = false;
  static_cast<train::RunOptions&>(loop) = train::run_options(o, checkpoint);
  loop.identity = {{"config", c.to_json()},
                   {"seed", std::to_string(o.seed)},
                   {"batch", std::to_string(o.batch)},
                   {"context", std::to_string(T)},
                   {"text", o.text},
                   {"tokenizer", tokenizer_texts.sha256()}};
  loop.before_checkpoint = [&](std::int64_t at) {
    save_model(o, c, task.w, tokenizer_texts, at, task.val_loss, seconds());
  };
  LmTrainingResult result;
  static_cast<train::LoopResult&>(result) = train::fit(task, loop, on_progress, stop);
  result.val_loss = task.val_loss;
  if (result.evaluations.size() > 0 && result.val_loss < 0) result.val_loss = result.evaluations.back().score;
  result.num_parameters = c.num_parameters();
  result.train_tokens = N;
  result.vocab_size = c.vocab_size;
  return result;
}

std::string LmTrainingResult::to_json(const LmTrainingOptions& o) const {
  nlohmann::ordered_json fields;
  if (val_loss >= 0) fields["heldout_loss"] = val_loss; else fields["heldout_loss"] = nullptr;
  fields["parameters"] = num_parameters;
  fields["vocab_size"] = vocab_size;
  fields["train_tokens"] = train_tokens;
  fields["out"] = o.out_dir;
  return LoopResult::to_json(fields.dump());
}

TextScore score_text(const Gpt2Model& model, const BpeTokenizer& tokenizer, std::string_view text,
                     std::int64_t stride) {
  QKV_CHECK(!text.empty(), "score: the text is empty");
  const std::int64_t P = model.config.n_positions;
  QKV_CHECK(P >= 2, "score: the model's context (n_positions = " << P << ") must be at least 2");
  if (stride == 0) stride = std::max<std::int64_t>(1, P / 2);
  QKV_CHECK(stride >= 1 && stride <= P - 1,
            "score: stride must be in [1, n_positions - 1 = " << P - 1 << "], got " << stride);
  QKV_CHECK(static_cast<std::int64_t>(tokenizer.vocab_size()) <= model.config.vocab_size,
            "score: the tokenizer has " << tokenizer.vocab_size() << " tokens, the model "
                                        << model.config.vocab_size);
  const std::vector<std::int64_t> ids = lm_tokens(tokenizer, text);
  const auto N = static_cast<std::int64_t>(ids.size());  // ids[0] is <|endoftext|>
  TextScore s;
  s.tokens = N - 1;
  s.bytes = static_cast<std::int64_t>(text.size());
  s.stride = stride;
  // The windows: [begin, end) scores the targets [from, end) (ids[t] predicted from row
  // t - 1 - begin): all after the first token in the first window, the last `stride`
  // (those not scored yet) in each later one.
  struct Window {
    std::int64_t begin, end, from;
  };
  std::vector<Window> windows;
  for (std::int64_t begin = 0, scored_to = 1; scored_to < N; begin += stride) {
    const std::int64_t end = std::min(begin + P, N);
    windows.push_back({begin, end, scored_to});
    scored_to = end;
  }
  s.windows = static_cast<std::int64_t>(windows.size());
  // Runs of windows of one length go through the model together, kBatch at a time; only
  // the rows they score reach the LM head, and their loss is cross_entropy's (rows in
  // parallel, summed in order).
  constexpr std::size_t kBatch = 16;
  double nll = 0;
  for (std::size_t first = 0; first < windows.size();) {
    const std::int64_t L = windows[first].end - windows[first].begin;
    std::size_t last = first;
    while (last < windows.size() && last - first < kBatch &&
           windows[last].end - windows[last].begin == L)
      ++last;
    const auto B = static_cast<std::int64_t>(last - first);
    std::vector<std::int64_t> batch, rows, targets;
    for (std::int64_t b = 0; b < B; ++b) {
      const Window& w = windows[first + static_cast<std::size_t>(b)];
      batch.insert(batch.end(), ids.begin() + w.begin, ids.begin() + w.end);
      for (std::int64_t t = w.from; t < w.end; ++t) {
        rows.push_back(b * L + (t - 1 - w.begin));
        targets.push_back(ids[static_cast<std::size_t>(t)]);
      }
    }
    const train::CrossEntropyResult r =
        train::cross_entropy(model.forward_rows(batch, B, L, rows), targets, nullptr);
    nll += r.loss * static_cast<double>(r.counted);
    first = last;
  }
  s.loss = nll / static_cast<double>(s.tokens);
  s.perplexity = std::exp(s.loss);
  s.bits_per_byte = nll / std::log(2.0) / static_cast<double>(s.bytes);
  return s;
}

}  // namespace qkv::models

namespace qkv::models {

TokenizerTrainingResult train_tokenizer(const TokenizerTrainingOptions& o) {
  const std::string text = io::read_text(o.text, "text");
  const auto start = std::chrono::steady_clock::now();
  const BpeVocabulary vocab = train_bpe(text, {.vocab_size = o.vocab_size, .min_frequency = o.min_frequency});
  TokenizerTrainingResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  vocab.save(o.out_dir);
  r.bytes = static_cast<std::int64_t>(text.size());
  r.vocab_size = static_cast<std::int64_t>(vocab.tokens.size());
  r.merges = static_cast<std::int64_t>(vocab.merges.size());
  r.tokens = static_cast<std::int64_t>(vocab.tokenizer().encode(text).size());
  r.out_dir = o.out_dir;
  return r;
}

std::string TokenizerTrainingResult::to_json() const {
  const nlohmann::ordered_json j = {{"bytes", bytes},   {"vocab_size", vocab_size}, {"merges", merges},
                                    {"tokens", tokens}, {"seconds", seconds},       {"out", out_dir}};
  return j.dump();
}

}  // namespace qkv::models
