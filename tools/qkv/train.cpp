// qkv train <task>: one subcommand per task, each with only its own options, made from the
// task's one option declaration (its training_options() set, qkv/options.h):
//   dates      the date translator from scratch (or resumed): the held-out exact match
//   tokenizer  a byte-level BPE vocabulary learned from a text
//   lm         a GPT-2 language model on a text
//   mf, sasrec matrix factorisation or SASRec on movie ratings: the split, the baselines and
//              the test metrics
//   vit, point a Vision Transformer or a Point Transformer on Fashion-MNIST
// Every task but tokenizer runs the one training loop (qkv/trainer.h): the progress bar,
// Ctrl-C and --stop-at (a checkpoint, exit 130), --resume, and data-parallel under mpirun.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "options_cli.h"
#include "io/text_input.h"
#include "print.h"
#include "dates/dates.h"
#include "qkv/distributed.h"
#include "qkv/error.h"
#include "language_model/language_model.h"
#include "recommender/recommender.h"
#include "qkv/threads.h"
#include "qkv/tokenizer.h"
#include "qkv/trainer.h"
#include "vision/vision.h"

namespace qkv::cli {
namespace {

// The number of processes mpirun (Open MPI, or a PMI launcher) started for this job: 1
// when run directly.
int launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::max(1, std::atoi(value));
  }
  return 1;
}

// A data-parallel run's gradient sums (rank 0's view) in the text output (--json has them
// from the loop); nothing for a single process.
void print_reductions(std::ostream& out, const distributed::ReductionTotals& r) {
  if (r.ranks <= 1) return;
  out << format("gradient sums over %d ranks (rank 0): %lld of %lld reductions started during the backward; "
                "%.2f s waiting after it, %.2f s testing during it, %.2f s copying\n",
                r.ranks, static_cast<long long>(r.started_early), static_cast<long long>(r.total), r.wait_s,
                r.progress_s, r.pack_s);
}

// A stream that drops what it is given: the output of every rank but 0.
struct NullStream : std::ostream {
  NullStream() : std::ostream(nullptr) {}
};

// Under mpirun with more than one process, a training task runs data-parallel over all of
// them: the MPI session and its world communicator; nothing when run directly.
class DataParallel {
 public:
  explicit DataParallel(const std::string& task) {
    if (launched_ranks() <= 1) return;
    if (!distributed::available())
      throw qkv::Error(task + ": started by mpirun as one of " + std::to_string(launched_ranks()) +
                       " processes, but this qkv was built without MPI (each would train alone and "
                       "write the same files); rebuild with -DQKV_MPI=ON");
    session_.emplace();
    world_.emplace(distributed::Communicator::world());
  }
  const distributed::Communicator* comm() const { return world_ ? &*world_ : nullptr; }
  // body(out) on this rank, with rank 0's output only. An error on one rank ends the job:
  // the others may be waiting for it in a collective, where a plain exit (and
  // MPI_Finalize) would leave them.
  template <class Body>
  int run(std::ostream& out, const Body& body) {
    if (!world_) return body(out);
    NullStream quiet;
    try {
      return body(world_->rank() == 0 ? out : static_cast<std::ostream&>(quiet));
    } catch (const std::exception& e) {
      std::cerr << "qkv: error on rank " << world_->rank() << " of " << world_->size() << ": " << e.what()
                << std::endl;
      world_->abort(1);
    }
  }

 private:
  std::optional<distributed::Session> session_;
  std::optional<distributed::Communicator> world_;  // freed before the session ends
};


std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) { g_interrupted.store(true); }

std::string clock_time(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  return s >= 3600 ? format("%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60)
                   : format("%lld:%02lld", s / 60, s % 60);
}

// The one progress printer (train::progress_printer) on stderr, or nothing with --quiet,
// --json or on a rank other than 0.
train::ProgressCallback progress_for(bool quiet) {
  if (quiet) return {};
  return train::progress_printer(std::cerr, isatty(STDERR_FILENO) != 0);
}

// Runs `train` with Ctrl-C setting g_interrupted (checked once per step), restoring the
// previous handler however it ends.
template <class Train>
auto with_interrupt(Train train) {
  g_interrupted.store(false);
  struct sigaction action {};
  action.sa_handler = on_sigint;
  struct sigaction previous {};
  sigaction(SIGINT, &action, &previous);
  try {
    auto result = train();
    sigaction(SIGINT, &previous, nullptr);
    return result;
  } catch (...) {
    sigaction(SIGINT, &previous, nullptr);
    throw;
  }
}

std::string metrics_line(const char* name, const recommender::RankingMetrics& m) {
  return format("  %-11s %7.4f %7.4f   %7.4f %7.4f   %7.4f %7.4f\n", name, m.hr10, m.ndcg10,
                m.hr10_catalogue, m.ndcg10_catalogue, m.hr10_all, m.ndcg10_all);
}

// What every task says when its loop stopped early: the step, the checkpoint, how to go on.
// 130 = 128 + SIGINT, as shells report an interrupted command: Ctrl-C and --stop-at alike.
int stopped(std::ostream& out, const train::LoopResult& r, const TrainFlags& f, bool resumed) {
  if (!f.quiet && isatty(STDERR_FILENO) != 0) std::cerr << '\n';  // after the progress line
  // The command again without --stop-at (it would stop at once) and with --resume.
  std::istringstream words(f.command_line);
  std::string again, word;
  for (bool skip = false; words >> word;) {
    if (skip || word == "--stop-at" || word.starts_with("--stop-at=")) {
      skip = !skip && word == "--stop-at";
      continue;
    }
    again += (again.empty() ? "" : " ") + word;
  }
  out << (g_interrupted.load() ? "interrupted at step " : "stopped at step ") << r.steps << " of " << r.total
      << "; checkpoint saved to " << r.checkpoint << "\ncontinue with: " << again << (resumed ? "" : " --resume")
      << "\n";
  return 130;
}

// The progress printer on stderr unless --quiet, --json or a rank other than 0 says not to.
train::ProgressCallback progress_for(const TrainFlags& f, const distributed::Communicator* comm) {
  return progress_for(f.quiet || f.json || (comm && comm->rank() != 0));
}

int run_train_tokenizer(const models::TokenizerTrainingOptions& t, const TrainFlags& f, std::ostream& out) {
  {
    Inputs inputs;
    add_input(inputs, "--text", t.text);
    check_output_dir("--out", t.out_dir, {"vocab.json", "merges.txt"}, inputs);
  }
  const models::TokenizerTrainingResult r = models::train_tokenizer(t);
  if (f.json) {
    out << r.to_json() << "\n";
    return 0;
  }
  out << format("%lld bytes -> %lld merges in %.1f s; vocabulary %lld tokens (the 256 bytes, the "
                "merges, <|endoftext|>)\n", static_cast<long long>(r.bytes), static_cast<long long>(r.merges),
                r.seconds, static_cast<long long>(r.vocab_size));
  if (r.vocab_size < t.vocab_size)
    out << format("stopped before %lld tokens: no pair of symbols occurs %lld times or more\n",
                  static_cast<long long>(t.vocab_size), static_cast<long long>(t.min_frequency));
  out << format("the text is %lld tokens, %.2f bytes per token\n", static_cast<long long>(r.tokens),
                static_cast<double>(r.bytes) / static_cast<double>(std::max<std::int64_t>(r.tokens, 1)));
  out << "wrote " << t.out_dir << "/vocab.json and " << t.out_dir << "/merges.txt\n";
  return 0;
}

int run_train_lm(models::LmTrainingOptions t, const TrainFlags& f, std::ostream& out,
                 const distributed::Communicator* comm) {
  t.command = f.command_line;
  t.communicator = comm;
  {  // what the run writes in --out is none of its inputs
    const bool corpus = !t.corpus.empty();
    Inputs texts;
    add_input(texts, corpus ? "--data" : "--text", t.text);
    add_input(texts, corpus ? "--data" : "--heldout", t.heldout);
    check_output_dir("--out", t.out_dir, {"config.json", "model.safetensors", "vocab.json", "merges.txt",
                                          "checkpoint.safetensors"}, texts);
    // --tokenizer DIR and --out DIR may be one directory (the run then keeps its tokenizer
    // files as they are); its vocab.json and merges.txt are no other output.
    Inputs tokenizer;
    if (!t.tokenizer.empty()) {
      add_input(tokenizer, "--tokenizer", t.tokenizer + "/vocab.json");
      add_input(tokenizer, "--tokenizer", t.tokenizer + "/merges.txt");
    }
    check_output_dir("--out", t.out_dir, {"config.json", "model.safetensors", "checkpoint.safetensors"},
                     tokenizer);
  }

  if (!f.json)  // --json prints one JSON object and nothing else
    out << "training a GPT-2 language model on " << t.text << ": " << t.model.n_layer
      << " blocks, E " << t.model.n_embd << ", " << t.model.n_head << " heads, context "
      << t.model.n_positions << "; " << t.steps << " steps of " << t.batch << " windows, "
      << num_threads() << " threads"
      << (comm ? " on each of " + std::to_string(comm->size()) + " ranks (data-parallel, MPI)" : std::string())
      << "\n"
      << "(Ctrl-C saves a checkpoint and the model; continue with --resume)\n";
  out.flush();
  const models::LmTrainingResult r = with_interrupt([&] {
    return models::train_lm(t, progress_for(f, comm), &g_interrupted);
  });
  if (f.json) {
    out << r.to_json(t) << '\n';
    return r.interrupted ? 130 : 0;
  }
  if (r.interrupted) return stopped(out, r, f, t.resume);
  print_reductions(out, r.reductions);
  out << format("done: %lld steps in %s (%.0f tokens/s), %lld parameters, vocabulary %lld; "
                "the training text is %lld tokens\n",
                static_cast<long long>(r.steps), clock_time(r.seconds).c_str(), r.items_per_s(),
                static_cast<long long>(r.num_parameters), static_cast<long long>(r.vocab_size),
                static_cast<long long>(r.train_tokens))
      << format("training loss %.4f", r.loss)
      << (r.val_loss >= 0 ? format(", held-out loss %.4f (whole windows; qkv score measures "
                                   "bits per byte)", r.val_loss)
                          : std::string())
      << "\nwrote " << t.out_dir << "/{config.json, model.safetensors, vocab.json, merges.txt} and "
      << r.checkpoint << "\n"
      << "try: qkv generate --model " << t.out_dir << " --prompt \"My fellow citizens\"\n";
  return 0;
}


int run_train_recommender(recommender::RecommenderOptions t, const TrainFlags& f, std::ostream& out,
                          const distributed::Communicator* comm) {
  t.command = f.command_line;
  {
    Inputs inputs;
    add_input(inputs, "--data", t.data);
    check_output_dir("--out", t.out_dir,
                     {"config.json", "model.safetensors", "users.csv", "movies.csv", "history.csv", "checkpoint.safetensors"},
                     inputs);
  }
  const bool mf = t.model == "mf";
  const std::int64_t epochs = mf ? t.mf.epochs : t.sasrec.epochs;
  if (!f.json)
    out << "training " << (mf ? "matrix factorisation" : "SASRec") << " on " << t.data << ": "
      << (mf && t.mf.solver == "als"
              ? format("dim %lld, alternating least squares, λ %g", static_cast<long long>(t.mf.dim), t.mf.als_l2)
          : mf ? format("dim %lld, AdamW, L2 %g, batch %lld, lr %g", static_cast<long long>(t.mf.dim), t.mf.l2,
                        static_cast<long long>(t.mf.batch), t.mf.lr)
             : format("%lld blocks, dim %lld, %lld heads, max_len %lld, batch %lld, lr %g",
                      static_cast<long long>(t.sasrec.model.layers), static_cast<long long>(t.sasrec.model.dim),
                      static_cast<long long>(t.sasrec.model.heads), static_cast<long long>(t.sasrec.model.max_len),
                      static_cast<long long>(t.sasrec.batch), t.sasrec.lr))
      << "; " << epochs << " epochs, " << num_threads() << " threads\n";
  out.flush();
  t.communicator = comm;
  const recommender::RecommenderReport r = with_interrupt([&] {
    return recommender::train_recommender(t, progress_for(f, comm),
                                          &g_interrupted);
  });
  // A weak model (recommender/model_health.h) is written all the same, and a warning after
  // the results says what is weak and what to do; --json carries them too, as "warnings".
  const auto warn_if_weak = [&] {
    out.flush();
    if (comm == nullptr || comm->rank() == 0)
      for (const std::string& w : r.health.warnings()) warn(quote_path(t.out_dir) + ": " + w);
  };
  if (f.json) {
    out << r.to_json() << '\n';
    warn_if_weak();
    return r.interrupted() ? 130 : 0;
  }
  if (r.interrupted()) return stopped(out, r.training, f, t.resume);
  out << r.ratings << " ratings by " << r.users << " users of " << r.movies << " movies\n"
      << r.split << "\n";
  if (mf)
    out << format("test RMSE: global mean %.4f, user + movie biases %.4f (λ %g by validation), "
                  "matrix factorisation %.4f (best validation epoch %lld)\n",
                  r.rmse_global_mean, r.rmse_biases, r.biases_l2, r.rmse_mf, static_cast<long long>(r.best_epoch));
  else
    out << format("best validation HR@10 at epoch %lld; %lld steps in %.1f s (%.1f ms/step)\n",
                  static_cast<long long>(r.best_epoch), static_cast<long long>(r.train_steps), r.train_seconds,
                  1e3 * r.train_seconds / static_cast<double>(std::max<std::int64_t>(1, r.train_steps)));
  out << "ranking on the test parts (" << r.trained.users << " users; HR@10 NDCG@10):\n"
      << "              next among 101    next, catalogue   all test movies\n"
      << metrics_line("popularity", r.popularity) << metrics_line(mf ? "mf" : "sasrec", r.trained)
      << "wrote " << t.out_dir << "/{config.json, model.safetensors, users.csv, movies.csv, history.csv}\n"
      << "try: qkv recommend --model " << t.out_dir << " --user 1" << (mf ? "" : " --show") << "\n";
  warn_if_weak();
  return 0;
}


int run_train_vision(vision::VisionTrainingOptions t, const TrainFlags& f, std::ostream& out,
                     const distributed::Communicator* comm) {
  t.command = f.command_line;
  t.communicator = comm;
  {
    Inputs inputs;
    add_directory_inputs(inputs, "--data", t.data);
    check_output_dir("--out", t.out_dir, {"config.json", "model.safetensors", "checkpoint.safetensors"},
                     inputs);
  }
  const models::VitConfig& c = t.vit;
  const models::PointTransformerConfig& pc = t.point;
  const vision::FashionMnist data = vision::load_fashion_mnist(t.data);
  const std::int64_t train_images =
      t.train_limit > 0 ? std::min(t.train_limit, data.train.count) : data.train.count;
  if (!f.json && t.model == "point") {
    out << format("training a Point Transformer on %lld Fashion-MNIST images (%lld validation): %lld points "
                  "(each with its %lldx%lld pixels), %lld neighbours, %lld blocks, dim %lld, %lld parameters; "
                  "%lld epochs, batch %lld, lr %g, label smoothing %g, %d threads\n",
                  static_cast<long long>(train_images), static_cast<long long>(data.validation.count),
                  static_cast<long long>(pc.points), static_cast<long long>(pc.patch_size),
                  static_cast<long long>(pc.patch_size), static_cast<long long>(pc.neighbors),
                  static_cast<long long>(pc.blocks), static_cast<long long>(pc.dim),
                  static_cast<long long>(pc.num_parameters()), static_cast<long long>(t.epochs),
                  static_cast<long long>(t.batch), t.peak_lr, t.label_smoothing, num_threads());
  } else if (!f.json) {
    const std::string patch_dropout_text =
        t.patch_dropout == 0 ? ""
        : t.patch_dropout_epochs == 0
            ? format(", patch dropout %g", t.patch_dropout)
            : format(", patch dropout %g in the first %lld epochs", t.patch_dropout,
                     static_cast<long long>(t.patch_dropout_epochs));
    out << format("training a Vision Transformer on %lld Fashion-MNIST images (%lld validation): patch %lld "
                  "(%lld tokens%s), %lld blocks, dim %lld, %lld heads, mlp %lld, %s positions, %lld parameters; "
                  "%lld epochs, batch %lld, lr %g, label smoothing %g%s%s, %d threads\n",
                  static_cast<long long>(train_images), static_cast<long long>(data.validation.count),
                  static_cast<long long>(c.patch_size), static_cast<long long>(c.tokens()),
                  c.shifted_patches ? ", shifted patches" : "", static_cast<long long>(c.layers), static_cast<long long>(c.dim), static_cast<long long>(c.heads),
                  static_cast<long long>(c.mlp_dim), c.learned_positions ? "learned" : "sine-cosine",
                  static_cast<long long>(c.num_parameters()), static_cast<long long>(t.epochs),
                  static_cast<long long>(t.batch), t.peak_lr, t.label_smoothing,
                  t.augment.erase > 0 ? format(", random erasing %g", t.augment.erase).c_str() : "",
                  patch_dropout_text.c_str(), num_threads());
  }
  out.flush();
  const vision::VisionTrainingResult r = with_interrupt([&] {
    return vision::train_vision(t, data, progress_for(f, comm),
                                &g_interrupted);
  });
  if (f.json) {
    out << r.to_json() << '\n';
    return r.interrupted ? 130 : 0;
  }
  if (r.interrupted) return stopped(out, r, f, t.resume);
  out << format("%lld steps in %s (%.0f images/s); best validation accuracy %.2f%% at epoch %lld\n",
                static_cast<long long>(r.steps), clock_time(r.seconds).c_str(), r.items_per_s(),
                100.0 * r.validation_accuracy[static_cast<std::size_t>(r.best_epoch - 1)],
                static_cast<long long>(r.best_epoch))
      << format("test accuracy %.2f%% (10,000 images, the best epoch's weights)\n", 100.0 * r.test_accuracy)
      << "wrote " << t.out_dir << "/{config.json, model.safetensors}\n"
      << "try: qkv classify --model " << t.out_dir << " --images " << t.data
      << "/t10k-images-idx3-ubyte.gz --labels " << t.data << "/t10k-labels-idx1-ubyte.gz\n";
  return 0;
}


int run_train_dates(models::DateTrainingOptions t, const TrainFlags& f, std::ostream& out,
                    const distributed::Communicator* comm) {
  t.command = f.command_line;
  t.communicator = comm;
  if (!f.json)  // --json prints one JSON object and nothing else
    out << "training the date translator: " << t.model.num_encoder_layers << "+"
      << t.model.num_decoder_layers << " layers, d_model " << t.model.d_model << ", "
      << t.model.nhead << " heads, feed-forward " << t.model.dim_feedforward << ", vocabulary "
      << t.model.vocab_size << "; " << t.steps << " steps of " << t.batch << " pairs, "
      << num_threads() << " threads"
      << (comm ? " on each of " + std::to_string(comm->size()) + " ranks (data-parallel, MPI)" : std::string())
      << "\n"
      << "(Ctrl-C saves a checkpoint; continue with --resume)\n";
  out.flush();

  const models::DateTrainingResult r = with_interrupt([&] {
    return models::train_dates(t, progress_for(f, comm), &g_interrupted);
  });
  if (f.json) {
    out << r.to_json(t) << '\n';
    return r.interrupted ? 130 : 0;
  }
  if (r.interrupted) return stopped(out, r, f, t.resume);
  print_reductions(out, r.reductions);
  out << format("done: %lld steps in %s (%.0f tokens/s), %lld parameters\n",
                static_cast<long long>(r.steps), clock_time(r.seconds).c_str(), r.items_per_s(),
                static_cast<long long>(r.num_parameters))
      << format("held-out exact match: %.2f%% of %lld dates never seen in training\n",
                100.0 * r.exact_match, static_cast<long long>(t.eval_size))
      << "wrote " << t.out_dir << "/model.safetensors, " << t.out_dir << "/config.json and "
      << r.checkpoint << "\n"
      << "try: qkv translate --model " << t.out_dir << " --show \"Saturday, 21 November 2026\"\n";
  return 0;
}


// One `qkv train <task>` subcommand: its declared options as CLI11 options, and the run.
template <class T>
class TrainTaskOf : public TrainTask {
 public:
  using Body = int (*)(T, const TrainFlags&, std::ostream&, const distributed::Communicator*);
  TrainTaskOf(CLI::App* train, const options::OptionSet<T>& set, Body body, const std::string& footer)
      : TrainTask(add(train, set, footer)), options_(app_, set), body_(body) {
    add_flags();
  }
  int run(std::ostream& out) override {
    const T options = options_.parse();
    DataParallel parallel(app_->get_parent()->get_name() + " " + app_->get_name());
    return parallel.run(out, [&](std::ostream& say) { return body_(options, flags_, say, parallel.comm()); });
  }
  const std::vector<options::Spec>& specs() const override { return options_.specs(); }

 private:
  static CLI::App* add(CLI::App* train, const options::OptionSet<T>& set, const std::string& footer) {
    CLI::App* app = train->add_subcommand(set.command().substr(set.command().find(' ') + 1), set.about());
    app->footer(footer);
    return app;
  }
  CliOptions<T> options_;
  Body body_;
};

}  // namespace

TrainTask::TrainTask(CLI::App* app) : app_(app) {}

void TrainTask::add_flags() {
  app_->add_flag("--json", flags_.json, "Print the result as one JSON object");
  app_->add_flag("--quiet", flags_.quiet, "No progress bar");
}

int TrainTask::run_parsed(std::ostream& out, const std::string& command_line) {
  flags_.command_line = command_line;
  return run(out);
}

std::vector<std::unique_ptr<TrainTask>> add_train_tasks(CLI::App* train) {
  const std::string mpi =
      "Under mpirun (qkv built with MPI) training is data-parallel: each rank its share of every\n"
      "--batch, gradients summed across the ranks; rank 0 prints and writes the files.\n";
  std::vector<std::unique_ptr<TrainTask>> tasks;
  tasks.push_back(std::make_unique<TrainTaskOf<models::DateTrainingOptions>>(
      train, models::date_training_options(), run_train_dates,
      "Example: qkv train dates --steps 1500 --out dates-model --seed 0\n"
      "         mpirun -np 2 --bind-to none qkv train dates --steps 1500 --out dates-model\n" + mpi));
  tasks.push_back(std::make_unique<TrainTaskOf<models::TokenizerTrainingOptions>>(
      train, models::tokenizer_training_options(),
      [](models::TokenizerTrainingOptions t, const TrainFlags& f, std::ostream& out,
         const distributed::Communicator*) { return run_train_tokenizer(t, f, out); },
      "Example: qkv train tokenizer --text speeches.txt --vocab-size 8192 --out sotu-bpe"));
  tasks.push_back(std::make_unique<TrainTaskOf<models::LmTrainingOptions>>(
      train, models::lm_training_options(), run_train_lm,
      "Example: scripts/fetch_data.sh sotu data && qkv train lm --data sotu --steps 2000 --out sotu-gpt\n"
      "The model is a GPT-2 directory (config.json, model.safetensors, vocab.json, merges.txt) that\n"
      "qkv generate, qkv score and qkv run read.\n" + mpi));
  const std::string split =
      "Every user's ratings are split by time (last 20% test, 10% of the rest validation; printed).\n";
  tasks.push_back(std::make_unique<TrainTaskOf<recommender::RecommenderOptions>>(
      train, recommender::mf_training_options(), run_train_recommender,
      "Example: scripts/fetch_data.sh movielens data && qkv train mf --data data --out mf-model\n" + split));
  tasks.push_back(std::make_unique<TrainTaskOf<recommender::RecommenderOptions>>(
      train, recommender::sasrec_training_options(), run_train_recommender,
      "Example: scripts/fetch_data.sh movielens data && qkv train sasrec --data data --out sasrec-model\n" + split));
  tasks.push_back(std::make_unique<TrainTaskOf<vision::VisionTrainingOptions>>(
      train, vision::vit_training_options(), run_train_vision,
      "Example: scripts/fetch_data.sh fashion-mnist data && qkv train vit --data data --out vit-model\n"));
  tasks.push_back(std::make_unique<TrainTaskOf<vision::VisionTrainingOptions>>(
      train, vision::point_training_options(), run_train_vision,
      "Example: qkv train point --data data --dim 48 --lr 3e-3 --out point-model\n"));
  return tasks;
}

}  // namespace qkv::cli
