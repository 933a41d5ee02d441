// qkv train dates: trains the date translator from scratch (or resumes it), with a
// progress bar, a checkpoint on Ctrl-C, and the held-out exact match at the end.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "print.h"
#include "qkv/dates.h"
#include "qkv/threads.h"

namespace qkv::cli {
namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) { g_interrupted.store(true); }

std::string clock_time(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  return s >= 3600 ? format("%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60)
                   : format("%lld:%02lld", s / 60, s % 60);
}

std::string progress_line(const models::TrainingProgress& p) {
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * p.step / std::max<std::int64_t>(p.total, 1));
  std::string bar;
  for (int i = 0; i < kWidth; ++i) bar += i < filled ? "█" : "·";
  const double eta = p.step > 0 ? p.elapsed_s / static_cast<double>(p.step) *
                                      static_cast<double>(p.total - p.step)
                                : 0.0;
  return format("step %lld/%lld %s loss %.4f  acc %5.1f%%  lr %.2e  %.0f tok/s  %s elapsed, ETA %s",
                static_cast<long long>(p.step), static_cast<long long>(p.total), bar.c_str(), p.loss,
                100.0 * p.token_accuracy, p.lr, p.tokens_per_s, clock_time(p.elapsed_s).c_str(),
                clock_time(eta).c_str());
}

}  // namespace

int run_train(const TrainOptions& o, std::ostream& out) {
  if (o.task != "dates")
    throw UsageError("TASK", "the only task is 'dates', got " + quote_value(o.task));
  models::DateTrainingOptions t;
  t.steps = o.steps;
  t.batch = o.batch;
  t.peak_lr = o.lr;
  t.seed = o.seed;
  t.out_dir = o.out;
  t.resume = o.resume;
  t.label_smoothing = o.label_smoothing;
  t.checkpoint_every = o.checkpoint_every;
  t.stop_at = o.stop_at;
  t.eval_size = o.eval_size;
  t.command = o.command_line;

  out << "training the date translator: " << t.model.num_encoder_layers << "+"
      << t.model.num_decoder_layers << " layers, d_model " << t.model.d_model << ", "
      << t.model.nhead << " heads, feed-forward " << t.model.dim_feedforward << ", vocabulary "
      << t.model.vocab_size << "; " << t.steps << " steps of " << t.batch << " pairs, "
      << num_threads() << " threads\n"
      << "(Ctrl-C saves a checkpoint; continue with --resume)\n";
  out.flush();

  const bool tty = isatty(STDERR_FILENO) != 0;
  const std::int64_t every = std::max<std::int64_t>(1, t.steps / 20);
  auto on_progress = [&](const models::TrainingProgress& p) {
    if (o.quiet) return;
    if (tty) {
      std::cerr << "\r\033[K" << progress_line(p) << std::flush;
    } else if (p.step % every == 0 || p.step == p.total) {
      std::cerr << progress_line(p) << '\n';
    }
  };
  g_interrupted.store(false);
  struct sigaction action {};
  action.sa_handler = on_sigint;
  struct sigaction previous {};
  sigaction(SIGINT, &action, &previous);
  models::DateTrainingResult r;
  try {
    r = models::train_dates(t, on_progress, &g_interrupted);
  } catch (...) {
    sigaction(SIGINT, &previous, nullptr);
    throw;
  }
  sigaction(SIGINT, &previous, nullptr);
  if (tty && !o.quiet) std::cerr << '\n';

  if (r.interrupted) {
    const bool asked = !g_interrupted.load();  // --stop-at, not Ctrl-C
    out << (asked ? "stopped at step " : "interrupted at step ") << r.steps << " of " << t.steps << "; checkpoint saved to "
        << r.checkpoint << "\ncontinue with: qkv train dates --out " << o.out << " --steps "
        << t.steps << " --seed " << t.seed << " --resume\n";
    return asked ? 0 : 130;  // 130 = 128 + SIGINT, as shells report an interrupted command
  }
  if (o.json) {
    nlohmann::ordered_json j;
    j["steps"] = r.steps;
    j["seconds"] = r.seconds;
    j["tokens_per_s"] = r.tokens_per_s;
    j["exact_match"] = r.exact_match;
    j["held_out"] = t.eval_size;
    j["parameters"] = r.num_parameters;
    j["out"] = o.out;
    out << j.dump() << '\n';
    return 0;
  }
  out << format("done: %lld steps in %s (%.0f tokens/s), %lld parameters\n",
                static_cast<long long>(r.steps), clock_time(r.seconds).c_str(), r.tokens_per_s,
                static_cast<long long>(r.num_parameters))
      << format("held-out exact match: %.2f%% of %lld dates never seen in training\n",
                100.0 * r.exact_match, static_cast<long long>(t.eval_size))
      << "wrote " << o.out << "/model.safetensors, " << o.out << "/config.json and "
      << r.checkpoint << "\n"
      << "try: qkv translate --model " << o.out << " --show \"Saturday, 21 November 2026\"\n";
  return 0;
}

}  // namespace qkv::cli
