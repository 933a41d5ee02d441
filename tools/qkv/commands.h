// The qkv command-line tool: one function per subcommand, called by main.cpp once
// CLI11 has parsed and validated the options.
//
// Exit statuses (as git and most Unix tools): 0 success, 1 a failure while running
// (qkv::Error from the library), 2 a usage error
// (a bad option value or a bad combination of options).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "qkv/gpt2.h"
#include "qkv/options.h"

namespace CLI {
class App;
}
// The options the library and the applications declare (qkv/options.h), each parsed by the
// CLI from that declaration and passed to its command beside the CLI's own.
namespace qkv {
struct SearchQueryOptions;  // search/search.h
namespace recommender {
struct RecommendQueryOptions;  // recommender/recommender.h
}
namespace vision {
struct ClassifyQueryOptions;  // vision/vision.h
}
namespace models {
struct ScoreOptions;  // language_model/language_model.h
}
}  // namespace qkv

namespace qkv::cli {

// A usage error found after CLI11's own parsing (e.g. --kv-heads not dividing --heads):
// main prints "qkv <command>: <option>: <message>" and exits 2.
class UsageError : public std::runtime_error {
 public:
  UsageError(std::string option, const std::string& message)
      : std::runtime_error(message), option_(std::move(option)) {}
  const std::string& option() const noexcept { return option_; }

 private:
  std::string option_;
};

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// An input file of a command, for check_output_path: the option that named it and its
// path; `dir` is the directory given to `option` when the file is one of its files
// (add_directory_inputs: every regular file of --model DIR).
struct InputFile {
  std::string option;  // "--images"
  std::string path;
  std::string dir;     // "" for a file named by the option itself
};
using Inputs = std::vector<InputFile>;

// Adds the file `path` given to `option` ("" and "-", standard input, add nothing).
void add_input(Inputs& inputs, const std::string& option, const std::string& path);
// Adds every regular file (symlinks followed) directly in `dir` (a model directory, say);
// a missing or unreadable directory adds nothing: the command reports it when it reads it.
void add_directory_inputs(Inputs& inputs, const std::string& option, const std::string& dir);

// Refuses, before any work is done, an output file that could not be written: a
// directory, a missing parent, a name too long, no permission (qkv::Error naming `option`);
// and one that is the same file as any of `inputs` (the same device and inode once symlinks
// are followed: a symlink, a hard link, another spelling of the path), naming both
// ("--html 'x.png' is the same file as --images 'x.png'"). Only a regular file counts as
// the same: /dev/null or /dev/stdout as both an input and an output is not refused.
// It opens the path for appending, which changes no existing file, and removes the file
// again if that created it. (A write can still fail later, e.g. on a full disk: that is
// reported then.)
void check_output_path(const std::string& option, const std::string& path, const Inputs& inputs);
// The same-file rule for the files `names` a command writes in directory `dir` (qkv train
// --out DIR): refuses one that exists and is the same file as any of `inputs`.
void check_output_dir(const std::string& option, const std::string& dir,
                      const std::vector<std::string>& names, const Inputs& inputs);

// qkv version
int run_version(std::ostream& out);

// qkv explain
struct ExplainOptions {
  std::string text = "the cat sat";  // tokens: the whitespace-separated words
  std::uint64_t seed = 0;            // embeddings and weights
  // --model: one layer of a real model on `text` (explain_model.cpp) instead of the toy walk.
  std::string model;
  std::string token;       // token A, as qkv run --token names it; "" = the last token
  std::int64_t layer = 0;  // 0-based
  std::int64_t head = 0;   // 0-based
  bool json = false;       // the steps' values as one JSON object
};
inline constexpr int kExplainMaxTokens = 12;  // wider matrices no longer fit 100 columns
int run_explain(const ExplainOptions& options, std::ostream& out);
int run_explain_model(const ExplainOptions& options, std::ostream& out);

// qkv bench
struct BenchOptions {
  std::int64_t batch = 0;     // B
  std::int64_t heads = 0;     // Hq
  std::int64_t kv_heads = 0;  // Hkv; 0 = not given (= heads)
  std::int64_t seq = 0;       // Lq
  std::int64_t kv_seq = 0;    // Lk; 0 = not given (= seq)
  std::int64_t dim = 0;       // Dk
  std::int64_t dim_v = 0;     // Dv; 0 = not given (= dim)
  bool causal = false;
  std::string dtype = "f32";  // f32 | bf16 | f16
  int threads = 0;            // 0 = not given (qkv's default)
  std::string impl = "auto";  // auto | reference | fast (qkv::AttentionImpl)
  int repeats = 5;            // timed runs; the median is reported
  int warmup = 1;             // discarded runs before timing
  std::uint64_t seed = 0;     // inputs
  bool json = false;
  std::string device = "cpu";  // cpu | cuda (bench_cuda.cpp)
  bool ring = false;      // ring attention across the ranks of mpirun (bench_ring.cpp)
  bool backward = false;  // with ring: forward + backward
  bool no_check = false;  // with ring: each rank draws only its shards; no single-process comparison
};
int run_bench(const BenchOptions& options, std::ostream& out);
// This process's peak resident set so far, in MiB (bench.cpp): what --json reports.
double peak_resident_mib();
int run_bench_cuda(const BenchOptions& options, std::ostream& out);
int run_bench_ring(const BenchOptions& options, std::ostream& out);

// qkv run, qkv tokenize (BERT, tokenizers)
// The model is any type of the model registry (qkv/model_registry.h); its input is the one
// its attention reads: --text, --image (and --index), or --user.
struct RunOptions {
  std::string model;   // directory: config.json, model.safetensors (or shards), tokenizer
  std::string text;    // segment A
  bool has_text = false;
  std::string pair;    // segment B; empty = none
  std::string image;   // image models: an IDX file or one PNG/PGM image
  std::int64_t index = 0;
  bool has_index = false;
  std::int64_t user = 0;  // SASRec: the user id
  bool has_user = false;
  std::int64_t layer = -1;  // attention shown; -1 = the last layer
  std::int64_t head = 0;
  std::string output;  // .safetensors to write; empty = none
  std::string html;    // attention page (qkv::viz) to write; empty = none
  bool json = false;   // one JSON object on stdout
  std::string token;   // --token T: the keys T attends to most; empty = none
  std::int64_t top = 5;
};
int run_run(const RunOptions& options, std::ostream& out);

// qkv heads (heads.cpp): every layer and head of a text model ranked by the weight a token
// or word A of a text puts on B (--text, --from, --to), or by its mean over the lines of
// --file (sentence<TAB>A<TAB>B each)
struct HeadsOptions {
  std::string model;
  std::string text;
  bool has_text = false;
  std::string from, to;  // token or word names (src/models/token_choice.h)
  bool has_from = false, has_to = false;
  std::string file;
  bool has_file = false;
  std::int64_t top = 10;  // heads listed by the text output; 0 = all
  bool json = false;      // every head, the tokens and the positions of A and B
};
int run_heads(const HeadsOptions& options, std::ostream& out);

// qkv embed, qkv search (the Universal Sentence Encoder lite; embed.cpp)
struct EmbedOptions {
  std::string model;               // directory from scripts/fetch_model.sh use-lite
  std::vector<std::string> texts;  // --text, any number
  std::string file;                // one text per line ("-": standard input)
  bool has_file = false;
  bool json = false;
};
int run_embed(const EmbedOptions& options, std::ostream& out);

struct SearchOptions {
  std::string model;
  std::string corpus;  // one document per line
  std::string query;
  bool json = false;
};
int run_search(const SearchOptions& options, const SearchQueryOptions& query, std::ostream& out);

struct TokenizeOptions {
  std::string model;  // directory with tokenizer.json, vocab.txt or vocab.json + merges.txt
  std::string text;
  std::string file;   // one encoding per line ("-": standard input); exclusive with text
  bool has_file = false;  // --file was given (an empty path is then a usage error)
  bool json = false;
};
int run_tokenize(const TokenizeOptions& options, std::ostream& out);

// qkv generate (GPT-2)
struct GenerateOptions {
  std::string model;                 // directory: config.json, *.safetensors, tokenizer
  std::string prompt;
  models::SamplingOptions sampling;  // max_new_tokens, temperature (0 = greedy), top_k, top_p, seed
  bool json = false;
  std::string html;  // attention page of prompt + continuation to write; empty = none
  std::string weights = "f32";  // the products' weights: "f32" (exact) or "bf16"
};
int run_generate(const GenerateOptions& options, std::ostream& out);

// qkv train <task> (train.cpp): one subcommand per task, its options from the task's one
// declaration (qkv/options.h), --json and --quiet for all.
struct TrainFlags {
  bool json = false;
  bool quiet = false;          // no progress bar
  std::string command_line;    // recorded in the weights' metadata; "continue with" repeats it
};
class TrainTask {
 public:
  explicit TrainTask(CLI::App* app);
  virtual ~TrainTask() = default;
  CLI::App* app() const { return app_; }
  // After CLI11 parsed this subcommand: its options checked and set, then the training.
  int run_parsed(std::ostream& out, const std::string& command_line);
  virtual const std::vector<options::Spec>& specs() const = 0;

 protected:
  virtual int run(std::ostream& out) = 0;
  void add_flags();
  CLI::App* app_;
  TrainFlags flags_;
};
// Adds dates, tokenizer, lm, mf, sasrec, vit and point under `train`.
std::vector<std::unique_ptr<TrainTask>> add_train_tasks(CLI::App* train);

// qkv score: loss, perplexity and bits per byte of a text under a GPT-2 directory
struct ScoreOptions {
  std::string model;
  std::string file;                  // the text ("-": standard input)
  bool json = false;
};
int run_score(const ScoreOptions& options, const models::ScoreOptions& score, std::ostream& out);

// qkv recommend: a trained recommender's top movies for a user, the movies nearest a liked
// one, the attention behind a recommendation, or predicted ratings for a CSV of pairs
struct RecommendOptions {
  std::string model;                 // directory written by qkv train mf or sasrec
  std::int64_t user = 0;
  bool has_user = false;
  std::string like;                  // a title, with the year where it is needed, or a movieId
  bool has_like = false;
  std::string predict;               // CSV of userId,movieId lines ("-": standard input)
  bool has_predict = false;
  bool json = false;
  bool show = false;                 // the attention over the user's history, in the terminal
  std::string html;                  // the same as a page
};
int run_recommend(const RecommendOptions& options, const recommender::RecommendQueryOptions& query,
                  std::ostream& out);

// qkv classify: a model of qkv train vit or point on an IDX image file or one PNG/PGM image
struct ClassifyOptions {
  std::string model;                 // directory written by qkv train vit or point
  std::string images;                // IDX (gzip or plain), PNG or PGM
  std::string labels;                // IDX labels: accuracy and the confusion matrix
  std::int64_t list = 20;            // text output: images listed
  bool json = false;
  std::string html;                  // page with the attention rollout of the first images
  std::int64_t html_images = 32;
};
int run_classify(const ClassifyOptions& options, const vision::ClassifyQueryOptions& query, std::ostream& out);

// qkv translate (dates -> ISO 8601)
struct TranslateOptions {
  std::vector<std::string> texts;    // dates to translate
  std::string file;                  // one date per line ("-": standard input)
  bool has_file = false;             // --file was given (an empty path is then a usage error)
  std::string model;                 // directory; empty = the embedded model
  bool json = false;
  bool raw = false;                  // also print refused answers, marked as guesses
  bool show = false;                 // the cross-attention as a terminal heatmap
  std::int64_t layer = -1;           // decoder layer shown; -1 = the last
  std::int64_t head = -1;            // -1 = the mean over heads
  std::string html;                  // every attention of the first input
  std::string svg;                   // the shown cross-attention head as SVG
};
int run_translate(const TranslateOptions& options, std::ostream& out);

}  // namespace qkv::cli
