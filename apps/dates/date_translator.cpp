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

#include "models/checkpoint.h"
#include "qkv/error.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/train.h"
#include "text/unicode.h"

namespace qkv::models {

namespace {

using Clock = std::chrono::steady_clock;

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

// Every option that changes the run, written out: ranks must agree on all of them.
std::string options_key(const DateTrainingOptions& o) {
  std::ostringstream key;
  key.precision(17);
  key << o.steps << ' ' << o.batch << ' ' << o.peak_lr << ' ' << o.warmup_steps << ' ' << o.min_lr_ratio << ' '
      << o.weight_decay << ' ' << o.clip_norm << ' ' << o.label_smoothing << ' ' << o.seed << ' ' << o.out_dir
      << ' ' << o.resume << ' ' << o.checkpoint_every << ' ' << o.stop_at << ' ' << o.eval_size << ' '
      << o.eval_seed << ' ' << o.model.to_json();
  return key.str();
}

void save_checkpoint(const std::string& path, Seq2Seq& model, const train::AdamW& opt,
                     std::int64_t step, const DateTrainingOptions& o) {
  detail::save_training_checkpoint(path, model.parameters(), opt, step,
                                   {{"total_steps", std::to_string(o.steps)},
                                    {"seed", std::to_string(o.seed)},
                                    {"config", model.config.to_json()}});
}

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

DateTrainingResult train_dates(const DateTrainingOptions& o,
                               const std::function<void(const TrainingProgress&)>& on_progress,
                               const std::atomic<bool>* stop) {
  QKV_CHECK(o.steps >= 1, "train dates: steps must be >= 1, got " << o.steps);
  QKV_CHECK(o.batch >= 1, "train dates: batch must be >= 1, got " << o.batch);
  QKV_CHECK(!o.out_dir.empty(), "train dates: an output directory is required");
  QKV_CHECK(o.model.vocab_size == dates::Vocabulary::dates().size(),
            "train dates: the model's vocab_size must be the date vocabulary's "
                << dates::Vocabulary::dates().size());
  // Data-parallel over more than one rank (DateTrainingOptions::communicator).
  const distributed::Communicator* comm =
      o.communicator != nullptr && o.communicator->size() > 1 ? o.communicator : nullptr;
  const int rank = comm ? comm->rank() : 0, ranks = comm ? comm->size() : 1;
  if (comm) {
    distributed::check_same_everywhere(options_key(o), *comm, "train dates");
    QKV_CHECK(o.batch >= ranks, "train dates: --batch " << o.batch << " gives some of the " << ranks
                                                       << " ranks no pairs; it must be at least the number of ranks");
  }
  const bool writer = rank == 0;  // the rank that writes files and reports progress
  std::filesystem::create_directories(o.out_dir);
  const std::string checkpoint = o.out_dir + "/checkpoint.safetensors";

  Seq2Seq model(o.model, o.seed);
  Seq2Seq grads(o.model, o.seed);
  const nn::ParameterList grad_list = grads.parameters();
  train::AdamWOptions adam;
  adam.weight_decay = o.weight_decay;
  train::AdamW opt(model.parameters(), adam);
  std::int64_t start = 0;
  if (o.resume) {
    QKV_CHECK(std::filesystem::exists(checkpoint),
              "train dates: --resume: no checkpoint at " << checkpoint);
    SafeTensors ck = SafeTensors::open(checkpoint);
    const auto& meta = ck.metadata();
    QKV_CHECK(meta.count("step") && meta.count("config"),
              checkpoint << ": not a qkv training checkpoint (no step/config metadata)");
    const Seq2SeqConfig saved = Seq2SeqConfig::from_json(meta.at("config"), checkpoint);
    QKV_CHECK(saved.to_json() == o.model.to_json(),
              checkpoint << ": was trained with a different model configuration");
    model = Seq2Seq::load(ck, o.model);
    opt = train::AdamW(model.parameters(), adam);
    start = detail::load_training_state(ck, checkpoint, opt);
    QKV_CHECK(start <= o.steps, checkpoint << ": is at step " << start << ", past --steps " << o.steps);
  }
  std::optional<distributed::GradientReducer> reducer;
  if (comm) {
    distributed::broadcast(model.parameters(), *comm, 0);
    reducer.emplace(grad_list, *comm);
  }
  const distributed::RowShare rows = distributed::row_share(o.batch, rank, ranks);  // of every batch

  // A run shorter than the warm-up (a quick test) warms up over its first tenth instead,
  // so the learning rate still reaches its peak and decays.
  const std::int64_t warmup = o.warmup_steps < o.steps ? o.warmup_steps : o.steps / 10;
  const train::Schedule schedule{o.peak_lr, warmup, o.steps, o.min_lr_ratio};
  DateTrainingResult result;
  result.num_parameters = model.num_parameters();
  result.reductions.ranks = ranks;
  const auto t0 = Clock::now();
  std::int64_t tokens_total = 0;
  std::int64_t step = start;
  for (; step < o.steps; ++step) {
    bool stopping = (stop && stop->load()) || (o.stop_at > 0 && step >= o.stop_at);
    if (comm) stopping = comm->max(stopping ? 1.0 : 0.0) > 0.0;  // every rank stops at the same step
    if (stopping) {
      result.interrupted = true;
      break;
    }
    std::int64_t tokens = 0;
    const Seq2SeqBatch batch = training_batch(o.seed, step, o.batch, &tokens);
    train::zero_grad(grad_list);
    train::CrossEntropyResult ce;
    if (comm) {
      const Seq2SeqBatch mine = rows_of(batch, rows.lo, rows.hi);
      const auto counted = static_cast<double>(std::count_if(
          mine.tgt_out.begin(), mine.tgt_out.end(), [](std::int64_t t) { return t != -100; }));
      const double all_counted = comm->sum(counted);
      // Each rank's loss is the mean over its own counted targets; weighted by its share of
      // all of them, the sum over ranks is the whole batch's mean and its gradient.
      reducer->begin(all_counted > 0 ? counted / all_counted : 0.0);
      ce = model.forward_backward(mine, grads, o.label_smoothing, &reducer->hook());
      result.reductions.add(reducer->finish());
      ce.loss = all_counted > 0 ? comm->sum(ce.loss * counted) / all_counted : 0.0;
      ce.correct = static_cast<std::int64_t>(comm->sum(static_cast<double>(ce.correct)));
      ce.counted = static_cast<std::int64_t>(all_counted);
    } else {
      ce = model.forward_backward(batch, grads, o.label_smoothing);
    }
    train::clip_grad_norm(grad_list, o.clip_norm);
    const double lr = train::cosine_schedule(step, schedule);
    opt.step(grad_list, lr);
    tokens_total += tokens;
    if (writer && o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0 && step + 1 < o.steps)
      save_checkpoint(checkpoint, model, opt, step + 1, o);
    if (writer && on_progress) {
      TrainingProgress p;
      p.step = step + 1;
      p.total = o.steps;
      p.loss = ce.loss;
      p.token_accuracy = ce.counted ? static_cast<double>(ce.correct) / ce.counted : 0.0;
      p.lr = lr;
      p.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
      p.tokens_per_s = p.elapsed_s > 0 ? tokens_total / p.elapsed_s : 0.0;
      on_progress(p);
    }
  }
  result.steps = step;
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  result.tokens_per_s = result.seconds > 0 ? tokens_total / result.seconds : 0.0;
  if (writer) save_checkpoint(checkpoint, model, opt, step, o);
  result.checkpoint = checkpoint;
  if (result.interrupted) return result;

  if (!writer) {  // rank 0 scores and writes the model; the others learn its score
    result.exact_match = comm->sum(0.0);
    return result;
  }
  result.exact_match = evaluate_dates(model, dates::held_out_set(o.eval_size, o.eval_seed));
  if (comm) comm->sum(result.exact_match);
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

}  // namespace qkv::models
