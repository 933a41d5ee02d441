// qkv train dates: trains the date translator from scratch (or resumes it), with a
// progress bar, a checkpoint on Ctrl-C, and the held-out exact match at the end.
// qkv train tokenizer: a byte-level BPE vocabulary (qkv::train_bpe) learned from a text.
// qkv train lm: a GPT-2 language model (qkv::models::train_lm) on a text, with the same
// progress bar, Ctrl-C and --resume as dates.
// qkv train recommender: matrix factorisation or SASRec on movie ratings
// (qkv::recommender::train_recommender), with the split, the baselines and the test metrics.
// qkv train vision: a Vision Transformer or a Point Transformer on Fashion-MNIST
// (qkv::vision::train_vision), with the progress bar, Ctrl-C and --resume of dates, and
// validation accuracy every epoch.
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

// The options only some tasks take (besides --out, --json and --quiet, which all take);
// another task's is an error.
const std::vector<std::string> kDatesOnly = {"--label-smoothing", "--eval-size"};
const std::vector<std::string> kTrainingLoop = {"--steps", "--batch", "--lr", "--seed", "--resume",
                                                "--checkpoint-every", "--stop-at"};
const std::vector<std::string> kTokenizerOnly = {"--min-frequency"};
const std::vector<std::string> kLmOnly = {"--data-dir", "--heldout", "--tokenizer",
                                          "--embd", "--context", "--warmup"};
const std::vector<std::string> kLmOrRecommender = {"--data", "--layers", "--heads", "--eval-every"};
const std::vector<std::string> kRecommenderOnly = {"--l2", "--max-len"};
const std::vector<std::string> kRecommenderOrVision = {"--model", "--epochs", "--dim", "--patience"};
const std::vector<std::string> kVisionOnly = {"--patch-size", "--mlp-dim", "--train-limit", "--bf16", "--positions",
                                              "--points", "--neighbors", "--erase", "--patch-dropout",
                                              "--patch-dropout-epochs"};
const std::vector<std::string> kVitOnly = {"--mlp-dim", "--positions", "--heads",
                                           "--shifted-patches", "--erase", "--patch-dropout",
                                           "--patch-dropout-epochs"};
const std::vector<std::string> kPointOnly = {"--points", "--neighbors"};

void refuse_options_of(const std::vector<std::string>& others, const TrainOptions& o) {
  for (const std::string& option : o.given)
    if (std::find(others.begin(), others.end(), option) != others.end())
      throw UsageError(option, "does not apply to 'qkv train " + o.task + "'");
}

// The one progress printer (train::progress_printer) on stderr, or nothing with --quiet,
// --json or on a rank other than 0.
train::ProgressCallback progress_for(bool quiet) {
  if (quiet) return {};
  return train::progress_printer(std::cerr, isatty(STDERR_FILENO) != 0);
}

// What every task says when its loop stopped early: the step, the checkpoint, how to go on.
// 130 = 128 + SIGINT, as shells report an interrupted command: Ctrl-C and --stop-at alike.
int stopped(std::ostream& out, const train::LoopResult& r, const TrainOptions& o) {
  if (!o.quiet && isatty(STDERR_FILENO) != 0) std::cerr << '\n';  // after the progress line
  // The command again without --stop-at (it would stop at once) and with --resume.
  std::istringstream words(o.command_line);
  std::string again, word;
  for (bool skip = false; words >> word;) {
    if (skip || word == "--stop-at" || word.starts_with("--stop-at=")) {
      skip = !skip && word == "--stop-at";
      continue;
    }
    again += (again.empty() ? "" : " ") + word;
  }
  out << (g_interrupted.load() ? "interrupted at step " : "stopped at step ") << r.steps << " of " << r.total
      << "; checkpoint saved to " << r.checkpoint << "\ncontinue with: " << again << (o.resume ? "" : " --resume")
      << "\n";
  return 130;
}

bool given(const TrainOptions& o, const std::string& option) {
  return std::find(o.given.begin(), o.given.end(), option) != o.given.end();
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

int run_train_tokenizer(const TrainOptions& o, std::ostream& out) {
  refuse_options_of(kDatesOnly, o);
  refuse_options_of(kTrainingLoop, o);
  refuse_options_of(kLmOnly, o);
  refuse_options_of(kLmOrRecommender, o);
  refuse_options_of(kRecommenderOnly, o);
  refuse_options_of(kRecommenderOrVision, o);
  refuse_options_of(kVisionOnly, o);
  if (std::find(o.given.begin(), o.given.end(), "--text") == o.given.end())
    throw UsageError("--text", "'qkv train tokenizer' needs the training text (--text FILE)");
  const std::string out_dir =
      std::find(o.given.begin(), o.given.end(), "--out") == o.given.end() ? "tokenizer" : o.out;
  if (out_dir.empty()) throw UsageError("--out", "must not be empty");
  {
    Inputs inputs;
    add_input(inputs, "--text", o.text);
    check_output_dir("--out", out_dir, {"vocab.json", "merges.txt"}, inputs);
  }
  // Refuses binary data and text that is not UTF-8, naming the line.
  const std::string text = io::read_text(o.text, "--text");
  const auto start = std::chrono::steady_clock::now();
  const BpeVocabulary vocab = train_bpe(text, {.vocab_size = o.vocab_size,
                                               .min_frequency = o.min_frequency});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  vocab.save(out_dir);
  const std::size_t tokens = vocab.tokenizer().encode(text).size();
  if (o.json) {
    nlohmann::json j = {{"bytes", text.size()},          {"vocab_size", vocab.tokens.size()},
                        {"merges", vocab.merges.size()}, {"tokens", tokens},
                        {"seconds", seconds},            {"out", out_dir}};
    out << j.dump() << "\n";
    return 0;
  }
  out << format("%zu bytes -> %zu merges in %.1f s; vocabulary %zu tokens (the 256 bytes, the "
                "merges, <|endoftext|>)\n", text.size(), vocab.merges.size(), seconds,
                vocab.tokens.size());
  if (static_cast<std::int64_t>(vocab.tokens.size()) < o.vocab_size)
    out << format("stopped before %lld tokens: no pair of symbols occurs %lld times or more\n",
                  static_cast<long long>(o.vocab_size), static_cast<long long>(o.min_frequency));
  out << format("the text is %zu tokens, %.2f bytes per token\n", tokens,
                static_cast<double>(text.size()) / static_cast<double>(std::max<std::size_t>(tokens, 1)));
  out << "wrote " << out_dir << "/vocab.json and " << out_dir << "/merges.txt\n";
  return 0;
}

int run_train_lm(const TrainOptions& o, std::ostream& out, const distributed::Communicator* comm) {
  refuse_options_of(kDatesOnly, o);
  refuse_options_of(kTokenizerOnly, o);
  refuse_options_of(kRecommenderOnly, o);
  refuse_options_of(kRecommenderOrVision, o);
  refuse_options_of(kVisionOnly, o);
  models::LmTrainingOptions t;
  if (given(o, "--data") && o.data != "sotu" && o.data != "brown")
    throw UsageError("--data", "the corpora are 'sotu' and 'brown', got " + quote_value(o.data));
  if (!o.data.empty()) {
    if (given(o, "--text") || given(o, "--heldout"))
      throw UsageError("--data", "names the training and held-out texts itself: give either "
                                 "--data or --text/--heldout");
    t.text = o.data_dir + "/" + o.data + "-train.txt";
    t.heldout = o.data_dir + "/" + o.data + "-heldout.txt";
    for (const std::string& f : {t.text, t.heldout})
      if (!std::filesystem::exists(f))
        throw qkv::Error("train lm: " + f + " does not exist; write it with: scripts/fetch_data.sh " +
                    o.data + " " + o.data_dir);
  } else {
    if (!given(o, "--text"))
      throw UsageError("--text", "'qkv train lm' needs a training text (--text FILE or --data sotu)");
    if (o.text.empty()) throw UsageError("--text", "must name a file, got ''");
    t.text = o.text;
    t.heldout = o.heldout;
  }
  t.tokenizer = o.tokenizer;
  t.vocab_size = o.vocab_size;
  t.model.n_layer = o.layers;
  t.model.n_embd = o.embd;
  t.model.n_head = o.heads;
  t.model.n_positions = o.context;
  if (o.embd % o.heads != 0)
    throw UsageError("--heads", format("%lld must divide --embd %lld", static_cast<long long>(o.heads),
                                       static_cast<long long>(o.embd)));
  if (given(o, "--steps")) t.steps = o.steps;
  if (given(o, "--batch")) t.batch = o.batch;
  t.peak_lr = o.lr;
  t.warmup_steps = o.warmup;
  t.seed = o.seed;
  t.out_dir = given(o, "--out") ? o.out : "lm-model";
  t.resume = o.resume;
  t.checkpoint_every = o.checkpoint_every;
  t.stop_at = o.stop_at;
  t.eval_every = o.eval_every;
  t.command = o.command_line;
  t.communicator = comm;
  {  // what the run writes in --out is none of its inputs
    Inputs texts;
    add_input(texts, given(o, "--data") ? "--data" : "--text", t.text);
    add_input(texts, given(o, "--data") ? "--data" : "--heldout", t.heldout);
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

  if (!o.json)  // --json prints one JSON object and nothing else
    out << "training a GPT-2 language model on " << t.text << ": " << t.model.n_layer
      << " blocks, E " << t.model.n_embd << ", " << t.model.n_head << " heads, context "
      << t.model.n_positions << "; " << t.steps << " steps of " << t.batch << " windows, "
      << num_threads() << " threads"
      << (comm ? " on each of " + std::to_string(comm->size()) + " ranks (data-parallel, MPI)" : std::string())
      << "\n"
      << "(Ctrl-C saves a checkpoint and the model; continue with --resume)\n";
  out.flush();
  const models::LmTrainingResult r = with_interrupt([&] {
    return models::train_lm(t, progress_for(o.quiet || o.json || (comm && comm->rank() != 0)), &g_interrupted);
  });
  if (o.json) {
    out << r.to_json(t) << '\n';
    return r.interrupted ? 130 : 0;
  }
  if (r.interrupted) return stopped(out, r, o);
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

std::string metrics_line(const char* name, const recommender::RankingMetrics& m) {
  return format("  %-11s %7.4f %7.4f   %7.4f %7.4f   %7.4f %7.4f\n", name, m.hr10, m.ndcg10,
                m.hr10_catalogue, m.ndcg10_catalogue, m.hr10_all, m.ndcg10_all);
}

int run_train_recommender(const TrainOptions& o, std::ostream& out, const distributed::Communicator* comm) {
  refuse_options_of(kDatesOnly, o);
  refuse_options_of(kTokenizerOnly, o);
  refuse_options_of(kLmOnly, o);
  refuse_options_of({"--text", "--vocab-size", "--steps"}, o);
  refuse_options_of(kVisionOnly, o);
  if (given(o, "--model") && o.model != "mf" && o.model != "sasrec")
    throw UsageError("--model", "'qkv train recommender' trains mf or sasrec, got " + quote_value(o.model));
  if (!given(o, "--data"))
    throw UsageError("--data", "'qkv train recommender' needs the ratings: a CSV or a directory "
                               "holding ratings.csv (scripts/fetch_data.sh movielens DIR writes one)");
  recommender::RecommenderOptions t;
  std::error_code ec;  // a path the file system refuses (too long, say) reads as absent here
  const bool is_dir = std::filesystem::is_directory(o.data, ec);
  t.data = is_dir ? o.data + "/ratings.csv" : o.data;
  if (!std::filesystem::exists(t.data, ec))
    throw qkv::Error("train recommender: " + t.data + " does not exist; write it with: "
                     "scripts/fetch_data.sh movielens " + (is_dir ? o.data : std::string("DIR")));
  t.model = o.model;
  t.out_dir = given(o, "--out") ? o.out : "recommender-model";
  t.command = o.command_line;
  {
    Inputs inputs;
    add_input(inputs, "--data", t.data);
    check_output_dir("--out", t.out_dir,
                     {"config.json", "model.safetensors", "users.csv", "movies.csv", "history.csv", "checkpoint.safetensors"},
                     inputs);
  }
  const bool mf = o.model == "mf";
  for (const char* option : {"--layers", "--heads", "--max-len", "--eval-every", "--l2"})
    if (given(o, option) && (std::string(option) == "--l2") == !mf)
      throw UsageError(option, std::string("applies to 'qkv train recommender --model ") +
                                   (mf ? "sasrec" : "mf") + "' only");
  if (mf) {
    if (given(o, "--epochs")) t.mf.epochs = o.epochs;
    if (given(o, "--dim")) t.mf.dim = o.dim;
    if (given(o, "--batch")) t.mf.batch = o.batch;
    if (given(o, "--lr")) t.mf.lr = o.lr;
    if (given(o, "--l2")) t.mf.l2 = o.l2;
    t.mf.patience = o.patience;
    t.mf.seed = o.seed;
  } else {
    models::SasRecConfig& c = t.sasrec.model;
    if (given(o, "--epochs")) t.sasrec.epochs = o.epochs;
    if (given(o, "--dim")) c.dim = o.dim;
    if (given(o, "--layers")) c.layers = o.layers;
    if (given(o, "--heads")) c.heads = o.heads;
    c.max_len = o.max_len;
    if (c.dim < 1) throw UsageError("--dim", "sasrec needs a width >= 1");
    if (c.dim % c.heads != 0)
      throw UsageError("--heads", format("%lld must divide --dim %lld", static_cast<long long>(c.heads),
                                         static_cast<long long>(c.dim)));
    if (given(o, "--batch")) t.sasrec.batch = o.batch;
    if (given(o, "--lr")) t.sasrec.lr = o.lr;
    if (given(o, "--eval-every")) t.sasrec.eval_every = std::max<std::int64_t>(1, o.eval_every);
    t.sasrec.patience = o.patience;
    t.sasrec.seed = o.seed;
  }
  const std::int64_t epochs = mf ? t.mf.epochs : t.sasrec.epochs;
  if (!o.json)
    out << "training " << (mf ? "matrix factorisation" : "SASRec") << " on " << t.data << ": "
      << (mf ? format("dim %lld, L2 %g, batch %lld, lr %g", static_cast<long long>(t.mf.dim), t.mf.l2,
                      static_cast<long long>(t.mf.batch), t.mf.lr)
             : format("%lld blocks, dim %lld, %lld heads, max_len %lld, batch %lld, lr %g",
                      static_cast<long long>(t.sasrec.model.layers), static_cast<long long>(t.sasrec.model.dim),
                      static_cast<long long>(t.sasrec.model.heads), static_cast<long long>(t.sasrec.model.max_len),
                      static_cast<long long>(t.sasrec.batch), t.sasrec.lr))
      << "; " << epochs << " epochs, " << num_threads() << " threads\n";
  out.flush();
  t.resume = o.resume;
  t.checkpoint_every = o.checkpoint_every;
  t.stop_at = o.stop_at;
  t.communicator = comm;
  const recommender::RecommenderReport r = with_interrupt([&] {
    return recommender::train_recommender(t, progress_for(o.quiet || o.json || (comm && comm->rank() != 0)),
                                          &g_interrupted);
  });
  if (o.json) {
    out << r.to_json() << '\n';
    return r.interrupted() ? 130 : 0;
  }
  if (r.interrupted()) return stopped(out, r.training, o);
  out << r.ratings << " ratings by " << r.users << " users of " << r.movies << " movies\n"
      << r.split << "\n";
  if (mf)
    out << format("test RMSE: global mean %.4f, user + movie biases %.4f, matrix factorisation %.4f "
                  "(best validation epoch %lld)\n",
                  r.rmse_global_mean, r.rmse_biases, r.rmse_mf, static_cast<long long>(r.best_epoch));
  else
    out << format("best validation HR@10 at epoch %lld; %lld steps in %.1f s (%.1f ms/step)\n",
                  static_cast<long long>(r.best_epoch), static_cast<long long>(r.train_steps), r.train_seconds,
                  1e3 * r.train_seconds / static_cast<double>(std::max<std::int64_t>(1, r.train_steps)));
  out << "ranking on the test parts (" << r.trained.users << " users; HR@10 NDCG@10):\n"
      << "              next among 101    next, catalogue   all test movies\n"
      << metrics_line("popularity", r.popularity) << metrics_line(mf ? "mf" : "sasrec", r.trained)
      << "wrote " << t.out_dir << "/{config.json, model.safetensors, users.csv, movies.csv, history.csv}\n"
      << "try: qkv recommend --model " << t.out_dir << " --user 1" << (mf ? "" : " --show") << "\n";
  return 0;
}

int run_train_vision(const TrainOptions& o, std::ostream& out, const distributed::Communicator* comm) {
  refuse_options_of(kDatesOnly, o);
  refuse_options_of(kTokenizerOnly, o);
  refuse_options_of(kLmOnly, o);
  refuse_options_of(kRecommenderOnly, o);
  refuse_options_of({"--text", "--vocab-size", "--steps", "--eval-every"}, o);
  const std::string model = given(o, "--model") ? o.model : "vit";
  if (model != "vit" && model != "point")
    throw UsageError("--model", "'qkv train vision' trains vit or point, got " + quote_value(o.model));
  const std::vector<std::string>& other_models = model == "vit" ? kPointOnly : kVitOnly;
  for (const std::string& option : o.given)
    if (std::find(other_models.begin(), other_models.end(), option) != other_models.end())
      throw UsageError(option, "does not apply to --model " + model);
  if (!given(o, "--data"))
    throw UsageError("--data", "'qkv train vision' needs the Fashion-MNIST directory "
                               "(scripts/fetch_data.sh fashion-mnist DIR writes it)");
  vision::VisionTrainingOptions t;
  t.model = model;
  models::VitConfig& c = t.vit;
  models::PointTransformerConfig& pc = t.point;
  if (model == "vit") {
    if (given(o, "--dim")) c.dim = o.dim;
    if (given(o, "--layers")) c.layers = o.layers;
    if (given(o, "--heads")) c.heads = o.heads;
    if (given(o, "--patch-size")) c.patch_size = o.patch_size;
    if (given(o, "--mlp-dim")) c.mlp_dim = o.mlp_dim;
    c.learned_positions = o.positions == "learned";
    c.shifted_patches = o.shifted_patches;
    t.augment.erase = o.erase;
    t.patch_dropout = o.patch_dropout;
    t.patch_dropout_epochs = o.patch_dropout_epochs;
    if (t.patch_dropout_epochs > 0 && t.patch_dropout == 0)
      throw UsageError("--patch-dropout-epochs", "given without --patch-dropout (what would it limit?)");
    if (c.dim < 1) throw UsageError("--dim", "vit needs a width >= 1");
    if (c.dim % c.heads != 0)
      throw UsageError("--heads", format("%lld must divide --dim %lld", static_cast<long long>(c.heads),
                                         static_cast<long long>(c.dim)));
    if (28 % c.patch_size != 0)
      throw UsageError("--patch-size", format("must divide 28 (the images' side), got %lld",
                                              static_cast<long long>(c.patch_size)));
    if (!c.learned_positions && c.dim % 4 != 0)
      throw UsageError("--positions", "sincos needs --dim a multiple of 4");
    if (c.shifted_patches && c.patch_size < 2)
      throw UsageError("--shifted-patches", "needs --patch-size >= 2 (the shift is half a patch)");
  } else {
    if (given(o, "--dim")) pc.dim = o.dim;
    if (given(o, "--layers")) pc.blocks = o.layers;
    if (given(o, "--points")) pc.points = o.points;
    if (given(o, "--neighbors")) pc.neighbors = o.neighbors;
    if (given(o, "--patch-size")) pc.patch_size = o.patch_size;
    if (pc.dim < 1) throw UsageError("--dim", "point needs a width >= 1");
    if (!models::valid_point_patch(pc.patch_size))
      throw UsageError("--patch-size", format("point needs an odd side <= %lld (a window centred on each point), got %lld",
                                              static_cast<long long>(models::kMaxPointPatch),
                                              static_cast<long long>(pc.patch_size)));
    if (pc.neighbors > pc.points)
      throw UsageError("--neighbors", format("%lld exceeds --points %lld", static_cast<long long>(pc.neighbors),
                                             static_cast<long long>(pc.points)));
  }
  if (given(o, "--epochs")) t.epochs = o.epochs;
  if (t.patch_dropout_epochs > t.epochs)
    throw UsageError("--patch-dropout-epochs", format("%lld exceeds --epochs %lld",
                                                      static_cast<long long>(t.patch_dropout_epochs),
                                                      static_cast<long long>(t.epochs)));
  t.batch = o.batch;
  t.peak_lr = o.lr;
  if (given(o, "--label-smoothing")) t.label_smoothing = o.label_smoothing;
  t.seed = o.seed;
  t.train_limit = o.train_limit;
  t.patience = o.patience;
  t.out_dir = given(o, "--out") ? o.out : "vision-model";
  t.resume = o.resume;
  t.checkpoint_every = o.checkpoint_every;
  t.stop_at = o.stop_at;
  t.bf16 = o.bf16;
  t.command = o.command_line;
  {
    Inputs inputs;
    add_directory_inputs(inputs, "--data", o.data);
    check_output_dir("--out", t.out_dir, {"config.json", "model.safetensors", "checkpoint.safetensors"},
                     inputs);
  }
  const vision::FashionMnist data = vision::load_fashion_mnist(o.data);
  const std::int64_t train_images =
      t.train_limit > 0 ? std::min(t.train_limit, data.train.count) : data.train.count;
  if (!o.json && model == "point") {
    out << format("training a Point Transformer on %lld Fashion-MNIST images (%lld validation): %lld points "
                  "(each with its %lldx%lld pixels), %lld neighbours, %lld blocks, dim %lld, %lld parameters; "
                  "%lld epochs, batch %lld, lr %g, label smoothing %g, %d threads\n",
                  static_cast<long long>(train_images), static_cast<long long>(data.validation.count),
                  static_cast<long long>(pc.points), static_cast<long long>(pc.patch_size),
                  static_cast<long long>(pc.patch_size), static_cast<long long>(pc.neighbors),
                  static_cast<long long>(pc.blocks), static_cast<long long>(pc.dim),
                  static_cast<long long>(pc.num_parameters()), static_cast<long long>(t.epochs),
                  static_cast<long long>(t.batch), t.peak_lr, t.label_smoothing, num_threads());
  } else if (!o.json) {
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
  t.communicator = comm;
  const vision::VisionTrainingResult r = with_interrupt([&] {
    return vision::train_vision(t, data, progress_for(o.quiet || o.json || (comm && comm->rank() != 0)),
                                &g_interrupted);
  });
  if (o.json) {
    out << r.to_json() << '\n';
    return r.interrupted ? 130 : 0;
  }
  if (r.interrupted) return stopped(out, r, o);
  out << format("%lld steps in %s (%.0f images/s); best validation accuracy %.2f%% at epoch %lld\n",
                static_cast<long long>(r.steps), clock_time(r.seconds).c_str(), r.items_per_s(),
                100.0 * r.validation_accuracy[static_cast<std::size_t>(r.best_epoch - 1)],
                static_cast<long long>(r.best_epoch))
      << format("test accuracy %.2f%% (10,000 images, the best epoch's weights)\n", 100.0 * r.test_accuracy)
      << "wrote " << t.out_dir << "/{config.json, model.safetensors}\n"
      << "try: qkv classify --model " << t.out_dir << " --images " << o.data
      << "/t10k-images-idx3-ubyte.gz --labels " << o.data << "/t10k-labels-idx1-ubyte.gz\n";
  return 0;
}

int run_train_dates(const TrainOptions& o, std::ostream& out, const distributed::Communicator* comm);

}  // namespace

int run_train(const TrainOptions& o, std::ostream& out) {
  if (o.task == "tokenizer") return run_train_tokenizer(o, out);
  if (o.task == "lm") {
    DataParallel parallel("train lm");
    return parallel.run(out, [&](std::ostream& say) { return run_train_lm(o, say, parallel.comm()); });
  }
  if (o.task == "recommender") {
    DataParallel parallel("train recommender");
    return parallel.run(out, [&](std::ostream& say) { return run_train_recommender(o, say, parallel.comm()); });
  }
  if (o.task == "vision") {
    DataParallel parallel("train vision");
    return parallel.run(out, [&](std::ostream& say) { return run_train_vision(o, say, parallel.comm()); });
  }
  if (o.task != "dates")
    throw UsageError("TASK", "the tasks are 'dates', 'tokenizer', 'lm', 'recommender' and 'vision', got " +
                                 quote_value(o.task));
  refuse_options_of({"--text", "--vocab-size"}, o);
  refuse_options_of(kTokenizerOnly, o);
  refuse_options_of(kLmOnly, o);
  refuse_options_of(kLmOrRecommender, o);
  refuse_options_of(kRecommenderOnly, o);
  refuse_options_of(kRecommenderOrVision, o);
  refuse_options_of(kVisionOnly, o);
  DataParallel parallel("train dates");
  return parallel.run(out, [&](std::ostream& say) { return run_train_dates(o, say, parallel.comm()); });
}

namespace {

int run_train_dates(const TrainOptions& o, std::ostream& out, const distributed::Communicator* comm) {
  models::DateTrainingOptions t;
  t.communicator = comm;
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

  if (!o.json)  // --json prints one JSON object and nothing else
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
    return models::train_dates(t, progress_for(o.quiet || o.json || (comm && comm->rank() != 0)), &g_interrupted);
  });
  if (o.json) {
    out << r.to_json(t) << '\n';
    return r.interrupted ? 130 : 0;
  }
  if (r.interrupted) return stopped(out, r, o);
  print_reductions(out, r.reductions);
  out << format("done: %lld steps in %s (%.0f tokens/s), %lld parameters\n",
                static_cast<long long>(r.steps), clock_time(r.seconds).c_str(), r.items_per_s(),
                static_cast<long long>(r.num_parameters))
      << format("held-out exact match: %.2f%% of %lld dates never seen in training\n",
                100.0 * r.exact_match, static_cast<long long>(t.eval_size))
      << "wrote " << o.out << "/model.safetensors, " << o.out << "/config.json and "
      << r.checkpoint << "\n"
      << "try: qkv translate --model " << o.out << " --show \"Saturday, 21 November 2026\"\n";
  return 0;
}

}  // namespace

}  // namespace qkv::cli
