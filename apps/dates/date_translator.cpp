// Training, checkpointing and greedy translation of the date model (dates/dates.h).

#include "dates/dates.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/error.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/train.h"
#include "qkv/trainer.h"
#include "text/unicode.h"

namespace qkv::models {

namespace {


// The batch of step `step`: a pure function of (seed, step), so a resumed run sees the
// same pairs as an uninterrupted one.
Seq2SeqBatch training_batch(std::uint64_t seed, std::int64_t step, std::int64_t B,
                            std::int64_t* tokens) {
  const dates::Vocabulary& vocab = dates::Vocabulary::dates();
  Rng rng(mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(step) + 1));
  std::vector<std::vector<std::int64_t>> sources, targets;
  Seq2SeqBatch b;
  b.batch = B;
  b.tgt_len = kDateOutputLength + 1;
  for (std::int64_t i = 0; i < B; ++i) {
    dates::Pair p = dates::sample_pair(rng, false);
    sources.push_back(vocab.encode(p.input));
    targets.push_back(vocab.encode(p.output));
    b.src_len = std::max<std::int64_t>(b.src_len, static_cast<std::int64_t>(sources.back().size()));
  }
  b.src.assign(static_cast<std::size_t>(B * b.src_len), dates::Vocabulary::pad);
  b.tgt_in.assign(static_cast<std::size_t>(B * b.tgt_len), dates::Vocabulary::pad);
  b.tgt_out.assign(static_cast<std::size_t>(B * b.tgt_len), -100);
  *tokens = 0;
  for (std::int64_t i = 0; i < B; ++i) {
    const auto& s = sources[static_cast<std::size_t>(i)];
    const auto& t = targets[static_cast<std::size_t>(i)];
    std::copy(s.begin(), s.end(), b.src.begin() + i * b.src_len);
    b.src_lengths.push_back(static_cast<std::int64_t>(s.size()));
    // tgt_in = BOS + target, tgt_out = target + EOS (targets are all 10 characters)
    b.tgt_in[static_cast<std::size_t>(i * b.tgt_len)] = dates::Vocabulary::bos;
    for (std::size_t j = 0; j < t.size() && static_cast<std::int64_t>(j) + 1 < b.tgt_len; ++j) {
      b.tgt_in[static_cast<std::size_t>(i * b.tgt_len) + j + 1] = t[j];
      b.tgt_out[static_cast<std::size_t>(i * b.tgt_len) + j] = t[j];
    }
    b.tgt_out[static_cast<std::size_t>(i * b.tgt_len) + std::min<std::size_t>(t.size(), kDateOutputLength)] =
        dates::Vocabulary::eos;
    *tokens += static_cast<std::int64_t>(s.size()) + b.tgt_len;
  }
  return b;
}

// Rows [lo, hi) of a batch, padded as the whole batch is (the same src_len and tgt_len),
// so each row computes exactly what it computes in the whole batch.
Seq2SeqBatch rows_of(const Seq2SeqBatch& b, std::int64_t lo, std::int64_t hi) {
  Seq2SeqBatch r;
  r.batch = hi - lo;
  r.src_len = b.src_len;
  r.tgt_len = b.tgt_len;
  const auto slice = [](const std::vector<std::int64_t>& v, std::int64_t from, std::int64_t to) {
    return std::vector<std::int64_t>(v.begin() + from, v.begin() + to);
  };
  r.src = slice(b.src, lo * b.src_len, hi * b.src_len);
  r.src_lengths = slice(b.src_lengths, lo, hi);
  r.tgt_in = slice(b.tgt_in, lo * b.tgt_len, hi * b.tgt_len);
  r.tgt_out = slice(b.tgt_out, lo * b.tgt_len, hi * b.tgt_len);
  return r;
}

// One step of the date translator for the training loop: the batch of the step (a pure
// function of seed and step), this rank's rows of it, teacher-forced cross-entropy.
struct DateTask : train::Task {
  const DateTrainingOptions& o;
  Seq2Seq model, grads;
  DateTask(const DateTrainingOptions& options)
      : o(options), model(options.model, options.seed), grads(options.model, options.seed) {}
  nn::ParameterList parameters() override { return model.parameters(); }
  nn::ParameterList gradients() override { return grads.parameters(); }
  train::StepResult step(const train::StepContext& ctx) override {
    std::int64_t tokens = 0;
    const Seq2SeqBatch batch = training_batch(o.seed, ctx.step, o.batch, &tokens);
    const distributed::RowShare rows = ctx.share(o.batch);
    const Seq2SeqBatch mine = ctx.ranks > 1 ? rows_of(batch, rows.lo, rows.hi) : batch;
    const auto counted = static_cast<double>(
        std::count_if(mine.tgt_out.begin(), mine.tgt_out.end(), [](std::int64_t t) { return t != -100; }));
    ctx.weigh(counted);
    const train::CrossEntropyResult ce = model.forward_backward(mine, grads, o.label_smoothing, ctx.ready);
    // Tokens (source + target, padding excluded) count once, on rank 0.
    return {.loss = ce.loss, .count = static_cast<double>(ce.counted), .correct = static_cast<double>(ce.correct),
            .items = ctx.rank == 0 ? static_cast<double>(tokens) : 0.0};
  }
};

}  // namespace

Seq2SeqConfig date_model_config() {
  Seq2SeqConfig c;
  c.vocab_size = dates::Vocabulary::dates().size();
  c.d_model = 128;
  c.nhead = 4;
  c.dim_feedforward = 256;
  c.num_encoder_layers = 2;
  c.num_decoder_layers = 2;
  c.max_len = 64;
  c.norm_first = true;
  return c;
}

DateTrainingResult train_dates(const DateTrainingOptions& o, const train::ProgressCallback& on_progress,
                               const std::atomic<bool>* stop) {
  QKV_CHECK(o.steps >= 1, "train dates: steps must be >= 1, got " << o.steps);
  QKV_CHECK(o.batch >= 1, "train dates: batch must be >= 1, got " << o.batch);
  QKV_CHECK(!o.out_dir.empty(), "train dates: an output directory is required");
  QKV_CHECK(o.model.vocab_size == dates::Vocabulary::dates().size(),
            "train dates: the model's vocab_size must be the date vocabulary's "
                << dates::Vocabulary::dates().size());
  const int ranks = o.communicator != nullptr ? o.communicator->size() : 1;
  QKV_CHECK(o.batch >= ranks, "train dates: --batch " << o.batch << " gives some of the " << ranks
                                                     << " ranks no pairs; it must be at least the number of ranks");
  DateTask task(o);
  train::LoopOptions loop;
  loop.task = "dates";
  loop.steps = o.steps;
  loop.adam.weight_decay = o.weight_decay;
  loop.clip_norm = o.clip_norm;
  loop.lr = {o.peak_lr, o.warmup_steps, o.min_lr_ratio};
  static_cast<train::RunOptions&>(loop) = train::run_options(o, o.out_dir + "/checkpoint.safetensors");
  loop.identity = {{"config", o.model.to_json()},
                   {"seed", std::to_string(o.seed)},
                   {"batch", std::to_string(o.batch)},
                   {"label_smoothing", train::identity_value(o.label_smoothing)}};
  DateTrainingResult result;
  static_cast<train::LoopResult&>(result) = train::fit(task, loop, on_progress, stop);
  result.num_parameters = task.model.num_parameters();
  if (result.interrupted) return result;
  const bool writer = o.communicator == nullptr || o.communicator->rank() == 0;
  if (!writer) {  // rank 0 scores and writes the model; the others learn its score
    result.exact_match = o.communicator->sum(0.0);
    return result;
  }
  Seq2Seq& model = task.model;
  result.exact_match = evaluate_dates(model, dates::held_out_set(o.eval_size, o.eval_seed));
  if (o.communicator != nullptr && o.communicator->size() > 1) o.communicator->sum(result.exact_match);
  std::ostringstream em;
  em.precision(6);
  em << result.exact_match;
  model.save(o.out_dir, {{"format", "pt"},
                         {"trained_with", o.command},
                         {"steps", std::to_string(result.steps)},
                         {"seed", std::to_string(o.seed)},
                         {"held_out_exact_match", em.str()},
                         {"held_out_size", std::to_string(o.eval_size)},
                         {"training_seconds", std::to_string(result.seconds)}});
  return result;
}

std::string DateTrainingResult::to_json(const DateTrainingOptions& o) const {
  nlohmann::ordered_json fields;
  if (!interrupted) {
    fields["exact_match"] = exact_match;
    fields["held_out"] = o.eval_size;
  }
  fields["parameters"] = num_parameters;
  fields["out"] = o.out_dir;
  return LoopResult::to_json(fields.dump());
}

namespace {

// Why the model cannot be run on `input`, as a phrase ("" when it can); its ids in *ids.
std::string input_problem(const Seq2Seq& model, const std::string& input,
                          std::vector<std::int64_t>* ids) {
  std::vector<char32_t> cps;
  try {
    cps = text::decode_utf8(input, "translate");
  } catch (const Error& e) {
    // "translate: text is not valid UTF-8 at byte offset N (byte 0xXX)": keep the where.
    const std::string message = e.what();
    const std::size_t at = message.find("is not valid UTF-8");
    return at == std::string::npos ? "is not valid UTF-8" : message.substr(at);
  }
  if (cps.empty()) return "is empty";
  for (std::size_t i = 0; i < cps.size(); ++i)
    if (u_charType(static_cast<UChar32>(cps[i])) == U_CONTROL_CHAR) {
      char code[16];
      std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(cps[i]));
      return "has a control character (" + std::string(code) + ") at character " +
             std::to_string(i + 1);
    }
  if (static_cast<std::int64_t>(cps.size()) > model.config.max_len)
    return "has " + std::to_string(cps.size()) + " characters; the model reads at most " +
           std::to_string(model.config.max_len);
  *ids = dates::Vocabulary::dates().encode(input);
  return {};
}

std::vector<std::string> decode_all(const Seq2Seq& model,
                                    const std::vector<std::vector<std::int64_t>>& sources) {
  const dates::Vocabulary& vocab = dates::Vocabulary::dates();
  // Another model's ids would index the date vocabulary wrongly: refused, not decoded.
  QKV_CHECK(model.config.vocab_size == vocab.size(),
            "translate: the model's vocab_size is " << model.config.vocab_size
                << ", the date vocabulary's " << vocab.size()
                << " (a model written by `qkv train dates` has that)");
  std::vector<std::string> out;
  constexpr std::size_t kChunk = 512;  // bounds the activations of one decoding batch
  for (std::size_t first = 0; first < sources.size(); first += kChunk) {
    std::vector<std::vector<std::int64_t>> chunk(
        sources.begin() + static_cast<std::ptrdiff_t>(first),
        sources.begin() + static_cast<std::ptrdiff_t>(std::min(sources.size(), first + kChunk)));
    for (const auto& ids : model.greedy_decode(chunk, dates::Vocabulary::bos, dates::Vocabulary::eos,
                                               kDateOutputLength + 1))
      out.push_back(vocab.decode(ids));
  }
  return out;
}

}  // namespace

std::vector<std::string> translate_dates(const Seq2Seq& model,
                                         const std::vector<std::string>& inputs) {
  std::vector<std::vector<std::int64_t>> sources(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string problem = input_problem(model, inputs[i], &sources[i]);
    QKV_CHECK(problem.empty(), "translate: input " << i + 1 << " " << problem);
  }
  return decode_all(model, sources);
}

// Why the answer is checked against the input rather than judged by the model's own
// confidence: the model was trained only on the 14 formats, and on anything else ("hello",
// "31 February 2023") its softmax is not calibrated: it can be sure of an invented date.
// Reading the input back (dates::disagreement) either confirms the answer (then confidence
// adds nothing) or refuses it, whatever the model believed.
std::vector<DateTranslation> translate_dates_checked(const Seq2Seq& model,
                                                     const std::vector<std::string>& inputs) {
  std::vector<DateTranslation> out(inputs.size());
  std::vector<std::vector<std::int64_t>> sources;
  std::vector<std::size_t> which;  // the inputs the model runs on
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::vector<std::int64_t> ids;
    const std::string problem = input_problem(model, inputs[i], &ids);
    if (!problem.empty()) {
      out[i].problem = "the input " + problem;
      continue;
    }
    sources.push_back(std::move(ids));
    which.push_back(i);
  }
  const std::vector<std::string> answers = decode_all(model, sources);
  for (std::size_t k = 0; k < which.size(); ++k) {
    DateTranslation& t = out[which[k]];
    t.output = answers[k];
    const std::optional<dates::Date> date = dates::parse_iso(t.output);
    if (!date) {
      t.problem = "the model's answer '" + t.output + "' is not a calendar date between " +
                  dates::to_iso(dates::kFirstDate) + " and " + dates::to_iso(dates::kLastDate);
      continue;
    }
    const std::string why = dates::disagreement(inputs[which[k]], *date);
    if (!why.empty()) t.problem = "the model's answer is " + t.output + "; " + why;
  }
  return out;
}

double evaluate_dates(const Seq2Seq& model, const std::vector<dates::Pair>& pairs,
                      std::vector<std::string>* outputs) {
  if (pairs.empty()) return 0.0;
  std::vector<std::string> inputs;
  for (const auto& p : pairs) inputs.push_back(p.input);
  std::vector<std::string> got = translate_dates(model, inputs);
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < pairs.size(); ++i) correct += got[i] == pairs[i].output;
  if (outputs) *outputs = std::move(got);
  return static_cast<double>(correct) / static_cast<double>(pairs.size());
}

namespace {

// The display tokens of ids (the space as "␣", so a label is never blank).
std::vector<std::string> display_tokens(const std::vector<std::int64_t>& ids) {
  const dates::Vocabulary& vocab = dates::Vocabulary::dates();
  std::vector<std::string> out;
  for (auto id : ids) {
    const std::string t = vocab.token(id);
    out.push_back(t == " " ? "␣" : t);
  }
  return out;
}

// (1, H, Lq, Lk) -> (H, Lq, Lk)
std::vector<Tensor> drop_batch(const std::vector<Tensor>& layers) {
  std::vector<Tensor> out;
  for (const auto& t : layers) out.push_back(t.select(0, 0));
  return out;
}

}  // namespace

DateAttention date_attention(const Seq2Seq& model, const std::string& input, const std::string& output) {
  const dates::Vocabulary& vocab = dates::Vocabulary::dates();
  DateAttention e;
  Seq2SeqBatch b;
  b.batch = 1;
  b.src = vocab.encode(input);
  b.src_len = static_cast<std::int64_t>(b.src.size());
  b.src_lengths = {b.src_len};
  std::vector<std::int64_t> out_ids = vocab.encode(output);
  b.tgt_in = {dates::Vocabulary::bos};
  b.tgt_in.insert(b.tgt_in.end(), out_ids.begin(), out_ids.end());
  b.tgt_len = static_cast<std::int64_t>(b.tgt_in.size());
  std::vector<std::int64_t> target_out = out_ids;
  target_out.push_back(dates::Vocabulary::eos);
  model.forward(b, &e.attention);
  e.source_tokens = display_tokens(b.src);
  e.target_in = display_tokens(b.tgt_in);
  e.target_out = display_tokens(target_out);
  return e;
}

viz::AttentionView date_attention_view(const DateAttention& e, const std::string& input,
                                       const std::string& output, const std::string& title) {
  viz::AttentionView v;
  v.title = title;
  v.subtitle = input + "  →  " + output;
  v.groups.push_back({"encoder self-attention", e.source_tokens, e.source_tokens,
                      drop_batch(e.attention.encoder_self)});
  v.groups.push_back({"decoder masked self-attention", e.target_in, e.target_in,
                      drop_batch(e.attention.decoder_self)});
  v.groups.push_back({"cross-attention", e.target_in, e.source_tokens, drop_batch(e.attention.cross)});
  v.initial_group = 2;  // cross-attention: what a translator is about (where each output looks)
  return v;
}

}  // namespace qkv::models
