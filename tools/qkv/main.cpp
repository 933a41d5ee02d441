// qkv — the command-line front end: CLI11 wiring and error reporting only; each
// subcommand lives in its own file (version.cpp, explain.cpp, bench.cpp).
//
// Errors: a bad option prints one line naming the option on stderr and exits 2;
// qkv::Error (and any other exception) prints "qkv: error: <message>" and exits 1.
// No subcommand prints the help and exits 1, as git does.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "options_cli.h"
#include "model_types.h"
#include "print.h"
#include "qkv/model_registry.h"
#include "qkv/qkv.h"
#include "language_model/language_model.h"
#include "recommender/recommender.h"
#include "search/search.h"
#include "vision/vision.h"

namespace qkv::cli {
namespace {

// Validators run on the option's text before CLI11 converts it, so they also catch
// "abc", "1.5", "", "nan" and values beyond the type's range, with a message of our own
// that states the allowed range, as --help does: each is a declared option's parser
// (qkv/options.h), the one the train tasks' options use.

CLI::Validator integer_in(std::int64_t min, std::int64_t max) {
  options::Spec s;
  s.type = options::Type::integer;
  s.min = min;
  s.max = max;
  return validator_of(s, "in " + options::integer_range(min, max));
}

CLI::Validator seed_integer() {
  options::Spec s;
  s.type = options::Type::seed;
  return validator_of(s, "in [0, 2^64)");
}

CLI::Validator one_of(std::vector<std::string> choices) {
  options::Spec s;
  s.type = options::Type::choice;
  s.choices = std::move(choices);
  std::string list;
  for (const std::string& c : s.choices) list += (list.empty() ? "" : ", ") + c;
  return validator_of(s, "{" + list + "}");
}

const auto kPositive = integer_in(1, std::numeric_limits<std::int64_t>::max());
const auto kNonNegative = integer_in(0, std::numeric_limits<std::int64_t>::max());
const auto kSeed = seed_integer();
// Timed and warm-up runs of bench: each keeps its time, and a million runs of the
// smallest problem already take minutes.
constexpr std::int64_t kMaxRuns = 1000000;
// set_num_threads' limit (src/core/threads.cpp), stated here so that --help shows it.
constexpr std::int64_t kMaxThreads = 4096;

// The environment variables qkv reads, each checked before any command runs, so that a
// malformed one is an error whichever command runs (the library reads each only where it
// is first used): QKV_NUM_THREADS and QKV_BIND_THREADS by num_threads(),
// QKV_STORAGE_CACHE_MB by storage_cache_limit(), QKV_ISA by fast_kernel_isa().
// OMP_NUM_THREADS, whose first entry is the thread count when QKV_NUM_THREADS is not set,
// the library skips when it does not parse (programs that embed it may set it for other
// libraries); the tool refuses it instead.
void check_environment() {
  const char* qkv_threads = std::getenv("QKV_NUM_THREADS");
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if ((qkv_threads == nullptr || *qkv_threads == '\0') && omp != nullptr && *omp != '\0') {
    const std::string_view text(omp);
    const std::string_view first = text.substr(0, text.find(','));
    std::int64_t value = 0;
    const char* end = first.data() + first.size();
    const auto [ptr, ec] = std::from_chars(first.data(), end, value);
    if (ec != std::errc() || ptr != end || value < 1 || value > kMaxThreads)
      throw Error("OMP_NUM_THREADS must be an integer in " + options::integer_range(1, kMaxThreads) +
                  " (or a comma-separated list of them, of which qkv uses the first), got " +
                  quote_value(text));
  }
  qkv::num_threads();
  qkv::storage_cache_limit();
  qkv::fast_kernel_isa();
}

// "qkv bench" when the error arose inside the bench subcommand ("qkv train lm" inside a
// train task), else "qkv".
std::string command_name(const CLI::App& app) {
  std::string name = "qkv";
  for (const CLI::App* c = &app; !c->get_subcommands().empty();) {
    c = c->get_subcommands().front();
    name += " " + c->get_name();
  }
  return name;
}

int usage_error(const CLI::App& app, const std::string& message) {
  std::cerr << command_name(app) << ": " << printable(message) << " (see '" << command_name(app)
            << " --help')\n";
  return kExitUsage;
}

// Options that name a file or directory. Given as "", each would read as not given (no
// page written, the embedded model), so "" is refused instead.
const std::vector<std::string> kPathOptions = {"--model", "--file", "--output", "--html", "--svg", "--image",
                                               "--out", "--corpus", "--index",
                                               "--heldout", "--tokenizer", "--data-dir", "--predict",
                                               "--images", "--labels"};

// The model registry's types, for the help: "bert, gpt2, ...".
std::string join_model_types() {
  std::string s;
  for (const std::string& t : qkv::models::model_types()) s += (s.empty() ? "" : ", ") + t;
  return s;
}

int run(int argc, char** argv) {
  CLI::App app("qkv: Transformer attention, explained and measured.", "qkv");
  app.footer(
      "Run 'qkv <command> --help' for the options of a command.\n\n"
      "Exit status: 0 success; 1 a failure while running (the message starts 'qkv: error:'),\n"
      "including input that is refused; 2 a usage error (a bad option, value or combination).\n\n"
      "Environment (a value that does not parse is an error): QKV_NUM_THREADS, OMP_NUM_THREADS\n"
      "(threads), QKV_BIND_THREADS (0: do not pin threads), QKV_ISA (the fast kernel's\n"
      "instruction set), QKV_STORAGE_CACHE_MB (the tensor storage cache).");
  app.require_subcommand(0, 1);
  // Extras are reported by run() itself, with messages that say what was wrong.
  app.allow_extras();

  CLI::App* version =
      app.add_subcommand("version", "Print the version, compiler, CPU and thread count");
  version->footer("");

  ExplainOptions explain_options;
  CLI::App* explain = app.add_subcommand(
      "explain", "Walk through one self-attention computation on a tiny example");
  explain
      ->add_option("--text", explain_options.text,
                   "Words to attend over (split at whitespace; 1 to " +
                       std::to_string(kExplainMaxTokens) + "); with --model, the model's tokens of it")
      ->capture_default_str();
  explain->add_option("--seed", explain_options.seed, "Seed of the random embeddings and weights")
      ->capture_default_str()
      ->check(kSeed);
  explain->add_option("--model", explain_options.model,
                      "Walk one layer of this model directory on --text instead of the toy example: "
                      "a model whose input is a text, as qkv run --model reads it");
  CLI::Option* explain_token = explain->add_option(
      "--token", explain_options.token, "With --model: token A, whose softmax row is shown, named as qkv run --token "
                                        "names it (default: the last token)");
  CLI::Option* explain_layer = explain->add_option("--layer", explain_options.layer, "With --model: the layer walked (0-based)")
                                   ->capture_default_str()
                                   ->check(kNonNegative);
  CLI::Option* explain_head = explain->add_option("--head", explain_options.head, "With --model: the head whose Q, K, V and "
                                                  "scores are shown (0-based)")
                                  ->capture_default_str()
                                  ->check(kNonNegative);
  CLI::Option* explain_json = explain->add_flag("--json", explain_options.json, "With --model: print the steps' values "
                                                "and the checks as one JSON object");
  explain->footer("Examples: qkv explain --text \"the cat sat on the mat\" --seed 3\n"
                  "          qkv explain --model models/sotu-gpt --text \"The animal didn't cross the street "
                  "because it was too tired\" --token it\n"
                  "The walk of a model checks every step against the library and exits 1 on a mismatch.");

  BenchOptions b;
  CLI::App* bench = app.add_subcommand(
      "bench", "Time scaled_dot_product_attention on random inputs: the forward, or forward + "
             "backward (--backward); in one process, or across MPI ranks (--ring)");
  bench->add_option("--batch", b.batch, "Batch size B")->required()->check(kPositive);
  bench->add_option("--heads", b.heads, "Query heads Hq")->required()->check(kPositive);
  bench->add_option("--kv-heads", b.kv_heads, "Key/value heads Hkv, dividing Hq (default: Hq)")
      ->check(kPositive);
  bench->add_option("--seq", b.seq, "Query length Lq")->required()->check(kPositive);
  bench->add_option("--kv-seq", b.kv_seq, "Key/value length Lk (default: Lq)")->check(kPositive);
  bench->add_option("--dim", b.dim, "Query/key head width Dk")->required()->check(kPositive);
  bench->add_option("--dim-v", b.dim_v, "Value head width Dv (default: Dk)")->check(kPositive);
  bench->add_flag("--causal", b.causal, "Causal mask (top-left diagonal, as PyTorch)");
  bench->add_option("--dtype", b.dtype, "Element type of q, k and v")
      ->capture_default_str()
      ->check(one_of({"f32", "bf16", "f16"}));
  bench->add_option("--threads", b.threads, "Threads (default: QKV_NUM_THREADS, else OMP_NUM_THREADS, else all CPUs the process may use)")
      ->check(integer_in(1, kMaxThreads));
  bench
      ->add_option("--impl", b.impl,
                   "auto, reference (the naive twin) or fast (the fused kernel; QKV_ISA picks "
                   "its instruction set)")
      ->capture_default_str()
      ->check(one_of({"auto", "reference", "fast"}));
  bench->add_option("--repeats", b.repeats, "Timed runs; the median is reported")
      ->capture_default_str()
      ->check(integer_in(1, kMaxRuns));
  bench->add_option("--warmup", b.warmup, "Untimed runs first")
      ->capture_default_str()
      ->check(integer_in(0, kMaxRuns));
  bench->add_option("--seed", b.seed, "Seed of the random inputs")
      ->capture_default_str()
      ->check(kSeed);
  bench->add_flag("--json", b.json, "Print one JSON object instead of text");
  bench->add_option("--device", b.device,
                    "cpu, or cuda (the GPU kernels on device memory, CUDA events; bf16/f16; "
                    "needs qkv built with CUDA and a GPU)")
      ->capture_default_str()
      ->check(one_of({"cpu", "cuda"}));
  bench->add_flag("--ring", b.ring,
                  "Ring attention across the ranks of mpirun (qkv built with MPI): the sequence "
                  "split zigzag over the ranks, --seq divisible by 2 x ranks, one thread per rank "
                  "unless --threads; prints each rank's compute and communication time and the "
                  "largest difference from a single-process run (rank 0 prints)");
  bench->add_flag("--no-check", b.no_check,
                  "With --ring: each rank draws only its own shards (never the whole sequence) and "
                  "the comparison with one process is skipped, for sequences one process cannot "
                  "hold; --json then reports each rank's peak memory");
  bench->add_flag("--backward", b.backward,
                  "Time forward + backward (attention_backward from the forward's log-sum-exp; "
                  "GFLOP/s count the backward as 2.5 forwards); with --ring compare dq, dk, dv too");
  bench->footer(
      "Example: qkv bench --batch 1 --heads 12 --seq 512 --dim 64 --causal\n"
      "Ring attention on 4 processes (as root add --allow-run-as-root; on fewer cores than\n"
      "ranks add --oversubscribe):\n"
      "  mpirun -np 4 --bind-to none qkv bench --ring --batch 1 --heads 8 --seq 4096 --dim 64 --causal");

  // Model commands (run, tokenize: BERT and tokenizers).
  RunOptions ro;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "Run a model on its input (a text, an image or a user) and show its attention");
  run_cmd->add_option("--model", ro.model, "Model directory; config.json's model_type picks the "
                      "model: " + join_model_types() + " (bert when absent)")->required();
  CLI::Option* ro_text = run_cmd->add_option("--text", ro.text, "Text (bert: segment A; gpt2, use_lite; "
                                             "qkv-seq2seq: a date, its tokens its characters)");
  run_cmd->add_option("--pair", ro.pair, "Second segment B: [CLS] A [SEP] B [SEP] (BERT)");
  run_cmd->add_option("--image", ro.image, "qkv-vision: an image file (IDX, PNG or PGM); the tokens are "
                      "[CLS] and the patches r0c0, r0c1, ... (vit) or the points pt0, pt1, ... (point)");
  CLI::Option* ro_index = run_cmd->add_option("--index", ro.index, "qkv-vision: the image of --image's file "
                                              "(0-based)")->check(kNonNegative);
  CLI::Option* ro_user = run_cmd->add_option("--user", ro.user, "qkv-recommender (sasrec): the userId whose "
                                             "history is attended over (the tokens: its movies)");
  run_cmd->add_option("--layer", ro.layer, "Layer whose attention is shown (default: the last)")
      ->check(kNonNegative);
  run_cmd->add_option("--head", ro.head, "Head whose attention is shown")
      ->capture_default_str()
      ->check(kNonNegative);
  run_cmd->add_option("--token", ro.token,
                      "List, for every layer and head (and group), the keys this token attends to "
                      "most: a token of the input, or a word matching a token without its marks "
                      "(GPT-2's Ġ, WordPiece's ##, SentencePiece's ▁), an exact match first; T@N picks "
                      "the N-th token (from 1) that is T or T without its marks");
  run_cmd->add_option("--top", ro.top, "Keys listed per head by --token (those of weight > 0)")
      ->capture_default_str()
      ->check(integer_in(1, 1 << 20));
  run_cmd->add_flag("--json", ro.json, "Print one JSON object: model_type, tokens, and every group's "
                    "attention [layer][head][query][key]; with --token only its listing");
  run_cmd->add_option("--output", ro.output,
                      "bert and use_lite: write input_ids and token_type_ids (B, L) as F32 values "
                      "(exact below 2^24), last_hidden_state (B, L, E), pooler_output (B, E) and "
                      "attentions.N (B, H, L, L) for every layer N to this .safetensors file "
                      "(use_lite: input_ids, embedding (1, 512), attentions.N)");
  run_cmd->add_option("--html", ro.html,
                      "Write a self-contained HTML page to explore the attention of every group, layer "
                      "and head (head view, model view, heatmaps; opens offline)");
  run_cmd->footer("Examples: qkv run --model bert-base-uncased/ --text \"the cat sat\" "
                  "--layer 5 --head 3\n"
                  "          qkv run --model use-lite/ --text \"the cat sat\" --html attention.html\n"
                  "          qkv run --model models/sotu-gpt --text \"The animal didn't cross the street "
                  "because it was too tired\" --token it\n"
                  "          qkv run --model models/fashion-vit --image shoe.png --json\n"
                  "A matrix factorisation recommender has no attention: qkv run says so (exit 1).");

  // Which heads attend from a token or word to another (heads.cpp).
  HeadsOptions ho;
  CLI::App* heads = app.add_subcommand(
      "heads", "Rank every layer and head of a text model by the weight a token or word puts on another");
  heads->add_option("--model", ho.model, "Model directory of a text model: bert, gpt2, use_lite or "
                    "qkv-seq2seq")->required();
  CLI::Option* ho_text = heads->add_option("--text", ho.text, "The text whose attention is probed");
  CLI::Option* ho_from = heads->add_option("--from", ho.from, "The token or word of --text that attends (A; "
                                           "looked up among each group's queries)");
  CLI::Option* ho_to = heads->add_option("--to", ho.to, "The token or word of --text attended to (B; "
                                         "looked up among each group's keys)");
  CLI::Option* ho_file = heads->add_option("--file", ho.file, "Rank the heads by their mean weight over the "
                                           "lines of this file, each sentence<TAB>A<TAB>B ('-': standard "
                                           "input; blank lines and lines starting with '#' are skipped)");
  heads->add_option("--top", ho.top, "Heads listed in the text output (0: all)")
      ->capture_default_str()
      ->check(kNonNegative);
  heads->add_flag("--json", ho.json, "Print one JSON object: every head ranked (rank, group, layer, head, "
                  "weight; with --file the mean as weight and min, max, lines, weights per line) and per "
                  "probe its tokens and the positions of A and B in each group (and the groups skipped)");
  heads->footer(
      "A and B name a token or word of the text, the first in its order (NAME@N: the N-th, from\n"
      "1): a token spelled so, or so without its mark (GPT-2's Ġ, WordPiece's ##, SentencePiece's\n"
      "▁); or a word: the shortest run of tokens that starts a word, continues it, and joins to\n"
      "the name without marks (GPT-2's 'Ġanim' 'al' is \"animal\"). A split word attends with the\n"
      "mean of its tokens' rows and is attended to with the sum of its tokens' columns (Clark et\n"
      "al. 2019). A group whose queries lack A or whose keys lack B (seq2seq: the decoder's\n"
      "tokens are not the encoder's) is skipped, and named. Layers and heads count from 0.\n\n"
      "Examples: qkv heads --model models/sotu-gpt --text \"The animal didn't cross the street "
      "because it was too tired\" --from it --to animal\n"
      "          qkv heads --model models/sotu-gpt --file pairs.tsv --top 5");

  // Sentence embeddings and semantic search (the Universal Sentence Encoder lite).
  EmbedOptions eo;
  CLI::App* embed = app.add_subcommand(
      "embed", "Sentence embeddings (512 values, unit length) of the Universal Sentence Encoder lite");
  embed->add_option("--model", eo.model, "Model directory from scripts/fetch_model.sh use-lite DIR")
      ->required();
  CLI::Option* eo_text = embed->add_option("--text", eo.texts, "Texts to embed (any number)");
  CLI::Option* eo_file = embed->add_option("--file", eo.file,
                                           "Embed every line of this file ('-': standard input)");
  eo_text->excludes(eo_file);
  eo_file->excludes(eo_text);
  embed->add_flag("--json", eo.json, "Print {\"text\": ..., \"embedding\": [...]} per input");
  embed->footer("Texts longer than 128 tokens are clipped to their first 128, as the published "
                "model does (a warning on stderr).\n\n"
                "Example: qkv embed --model use-lite/ --text \"How old are you?\" --json");

  SearchOptions so;
  CLI::App* search = app.add_subcommand(
      "search", "Rank the lines of a corpus by cosine similarity to a query (semantic search), by BM25 "
                "(--lexical), or by both fused (--hybrid)");
  search->add_option("--model", so.model, "Model directory from scripts/fetch_model.sh use-lite DIR")
      ->required();
  search->add_option("--corpus", so.corpus, "Corpus file: one document per line (UTF-8)")->required();
  search->add_option("--query", so.query, "The query")->required();
  // --top, --index, --reindex, --hybrid, --lexical: declared once with qkv.search's (search_options).
  const CliOptions<SearchQueryOptions> search_query(search, search_options());
  search->add_flag("--json", so.json,
                   "Print {\"rank\", \"score\", \"scoring\" (cosine, bm25 or rrf), \"line\" (1-based), "
                   "\"text\"} per hit");
  search->footer("The first query of a corpus embeds all of its lines (a progress bar on stderr);\n"
                 "later ones read the index. A changed corpus is indexed again; an index built\n"
                 "by another model, or damaged, is an error unless --reindex. The index holds the\n"
                 "lines' BM25 index too (an index made before it gets it added).\n\n"
                 "Example: scripts/fetch_data.sh debian-packages data &&\n"
                 "  qkv search --model use-lite/ --corpus data/debian-packages.txt "
                 "--query \"play chess against the computer\"");

  TokenizeOptions to;
  CLI::App* tokenize = app.add_subcommand(
      "tokenize", "Print the token ids of a text (BERT WordPiece, GPT-2 BPE or SentencePiece directory)");
  tokenize->add_option("--model", to.model, "Directory with tokenizer.json, vocab.txt, or "
                       "vocab.json + merges.txt")->required();
  CLI::Option* to_text = tokenize->add_option("--text", to.text, "Text to encode");
  CLI::Option* to_file =
      tokenize->add_option("--file", to.file,
                           "Encode every line of this file ('-': standard input), one output "
                           "line each");
  to_text->excludes(to_file);
  to_file->excludes(to_text);
  tokenize->add_flag("--json", to.json,
                     "Print {\"ids\": [...], \"tokens\": [...]} per line instead of the ids");
  tokenize->footer("Example: qkv tokenize --model bert-base-uncased/ --text \"Hello, world\"");

  // Model commands (generate: GPT-2).
  GenerateOptions g;
  CLI::App* generate = app.add_subcommand("generate", "Generate text with a GPT-2 checkpoint");
  generate->add_option("--model", g.model, "Model directory (config.json, model.safetensors, "
                       "vocab.json + merges.txt or tokenizer.json)")->required();
  generate->add_option("--prompt", g.prompt, "Text to continue")->required();
  // The sampling options, declared once with GPT2Model.generate's (models::sampling_options).
  const CliOptions<models::SamplingOptions> sampling(generate, models::sampling_options());
  generate->add_flag("--json", g.json,
                     "Print {\"prompt_ids\": [...], \"ids\": [...], \"text\": \"...\"}: ids are "
                     "the generated continuation only (ending with <|endoftext|> when it "
                     "stopped generation), text is that continuation decoded");
  generate->add_option("--html", g.html,
                       "After generating, write a self-contained HTML page with the causal "
                       "self-attention of every layer and head over prompt + continuation "
                       "(\"wrote FILE\" goes to stderr with --json)");
  generate->add_option("--weights", g.weights,
                       "dtype of the layer and LM-head products' weights: f32 (exact) or bf16 "
                       "(half the memory read per token, about 1.6-2x the tokens/s of f32 "
                       "on the development machine; weights and the products' inputs rounded "
                       "to bf16, so logits move by ~1e-2 and greedy ids may differ; needs "
                       "AVX512-BF16 or AMX)")
      ->capture_default_str()
      ->check(one_of({"f32", "bf16"}));
  generate->footer("Example: qkv generate --model gpt2/ --prompt \"Hello\" --max-new-tokens 20");

  // Training: qkv train <task>, one subcommand per task (train.cpp).
  CLI::App* train = app.add_subcommand(
      "train", "Train a model: the date translator (dates), a byte-level BPE tokenizer, a GPT-2 "
               "language model (lm), a movie recommender (mf, sasrec) or an image classifier (vit, point)");
  train->require_subcommand(0, 1);
  train->footer("Run 'qkv train <task> --help' for the options of a task.");
  const std::vector<std::unique_ptr<TrainTask>> train_tasks = add_train_tasks(train);
  std::vector<std::string> task_names;
  for (const auto& task : train_tasks) task_names.push_back(task->app()->get_name());
  // The spellings before each task was its own subcommand: refused, naming the new one.
  CLI::App* train_recommender = train->add_subcommand("recommender", "")->group("");
  CLI::App* train_vision = train->add_subcommand("vision", "")->group("");
  for (CLI::App* old : {train_recommender, train_vision}) old->allow_extras()->prefix_command();

  ClassifyOptions cl;
  CLI::App* classify = app.add_subcommand(
      "classify", "Classify images with a model of qkv train vit or point: an IDX image file (gzip or "
                  "plain) or one PNG or PGM image of the model's size");
  classify->add_option("--model", cl.model, "Model directory (config.json, model.safetensors)")->required();
  classify->add_option("--images", cl.images, "IDX images (e.g. t10k-images-idx3-ubyte.gz), or a PNG or PGM "
                       "image; every image must be the model's size (28x28 for Fashion-MNIST)")->required();
  classify->add_option("--labels", cl.labels, "IDX labels of the images: prints accuracy and the confusion matrix");
  // --batch, --tta: declared once with Classifier.classify's (vision::classify_options).
  const CliOptions<vision::ClassifyQueryOptions> classify_query(classify, vision::classify_options());
  classify->add_option("--list", cl.list, "Images listed in the text output")
      ->capture_default_str()->check(integer_in(0, std::numeric_limits<std::int32_t>::max()));
  classify->add_flag("--json", cl.json, "One JSON line per image, in input order: index, label, class, score "
                     "(+ truth with --labels; the accuracy then goes to standard error)");
  classify->add_option("--html", cl.html, "Write a self-contained HTML page: the first --html-images images "
                       "with the class token's attention rollout over their patches (a ViT) or their points "
                       "coloured by the attention they receive, a hovered point's neighbours by its weights "
                       "(a point model)");
  classify->add_option("--html-images", cl.html_images, "Images on the --html page")
      ->capture_default_str()->check(integer_in(1, 1000));
  classify->footer("Example: qkv classify --model models/fashion-vit --images data/t10k-images-idx3-ubyte.gz "
                   "--labels data/t10k-labels-idx1-ubyte.gz --html vit.html");

  RecommendOptions rc;
  CLI::App* recommend = app.add_subcommand(
      "recommend", "Movies for a user, movies like a liked one, or predicted ratings, from a "
                   "model of qkv train mf or sasrec");
  recommend->add_option("--model", rc.model, "Model directory (config.json, model.safetensors, "
                        "movies.csv, history.csv)")->required();
  CLI::Option* rc_user = recommend->add_option("--user", rc.user, "A userId: the top movies the "
                                               "user has not rated")
      ->check(integer_in(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
  CLI::Option* rc_like = recommend->add_option("--like", rc.like, "A title, e.g. \"Toy Story\" or \"Toy Story (1995)\": "
                        "the movies nearest it in embedding space (the liked movie is the query, "
                        "every movie a key); or a movieId where titles are shared");
  CLI::Option* rc_predict = recommend->add_option("--predict", rc.predict, "mf: a CSV of userId,movieId lines ('-': standard "
                        "input; a header line userId,movieId is allowed); prints "
                        "userId,movieId,rating for each, in input order");
  // --top, --min-ratings, --temperature: declared once with Recommender.recommend's and
  // similar's (recommender::recommend_options).
  const CliOptions<recommender::RecommendQueryOptions> recommend_query(recommend, recommender::recommend_options());
  recommend->add_flag("--json", rc.json, "Print one JSON object");
  recommend->add_flag("--show", rc.show, "sasrec, with --user: which movies of the user's history "
                      "the recommendation attended to (each block and head), in the terminal");
  recommend->add_option("--html", rc.html, "sasrec, with --user: write that attention as a "
                        "self-contained HTML page");
  recommend->footer("Examples: qkv recommend --model mf-model --user 1 --top 10\n"
                    "          qkv recommend --model mf-model --like \"Toy Story\"\n"
                    "          qkv recommend --model sasrec-model --user 1 --show\n"
                    "          qkv recommend --model mf-model --predict pairs.csv");

  ScoreOptions sc;
  CLI::App* score = app.add_subcommand(
      "score", "Loss, perplexity and bits per byte of a text under a GPT-2 model");
  score->add_option("--model", sc.model, "Model directory (config.json, model.safetensors, "
                    "vocab.json + merges.txt)")->required();
  score->add_option("--file", sc.file, "The text ('-': standard input)")->required();
  // --stride: declared once with GPT2Model.score's (models::score_options).
  const CliOptions<models::ScoreOptions> score_query(score, models::score_options());
  score->add_flag("--json", sc.json, "Print {\"tokens\", \"bytes\", \"loss\", \"perplexity\", "
                  "\"bits_per_byte\", \"stride\", \"windows\"} as one line (loss in nats per "
                  "token)");
  score->footer("The text is scored after an <|endoftext|> token, so every byte counts. Texts "
                "longer than the\ncontext are read in windows of n_positions tokens, STRIDE "
                "apart; each window scores only\nits last STRIDE tokens (all of them in the "
                "first), so every token is predicted once with\nat least n_positions - STRIDE "
                "tokens of context after the first window.\n\n"
                "Example: qkv score --model models/sotu-gpt --file data/sotu-heldout.txt --json");

  TranslateOptions tl;
  CLI::App* translate = app.add_subcommand(
      "translate", "Translate dates written by people into ISO 8601 (YYYY-MM-DD)");
  translate->add_option("text", tl.texts, "Dates to translate");
  translate->add_option("--file", tl.file,
                        "Translate every non-empty line of this file ('-': standard input)");
  translate->add_option("--model", tl.model,
                        "Model directory (config.json, model.safetensors) from qkv train dates; "
                        "default: the embedded model");
  translate->add_flag("--json", tl.json,
                      "Print {\"input\": ..., \"output\": ...} per input; a refused input "
                      "has \"output\": null and \"error\"");
  translate->add_flag("--raw", tl.raw,
                      "Also print the model's answer for inputs that are refused, marked as "
                      "a guess (the exit status stays 1)");
  translate->add_flag("--show", tl.show,
                      "Show the cross-attention (output characters x input characters) as a "
                      "terminal heatmap");
  translate->add_option("--layer", tl.layer, "Decoder layer shown by --show and --svg (0-based; default: the last)")
      ->check(kNonNegative);
  translate->add_option("--head", tl.head, "Head shown by --show and --svg (default: the mean over heads; --svg: head 0)")
      ->check(kNonNegative);
  translate->add_option("--html", tl.html,
                        "Write a self-contained HTML page with every layer and head of the "
                        "encoder self-, decoder masked self- and cross-attention of the first date");
  translate->add_option("--svg", tl.svg, "Write the cross-attention heatmap of the first date as SVG");
  translate->footer(
      "An answer is printed only when it is a calendar date between 1900-01-01 and 2099-12-31\n"
      "that the input itself names, read in its family of forms (the 14 formats the model\n"
      "learnt, English words in any order and case, DD.MM.YYYY, YYYY/MM/DD, YYYY-MM-DD, or\n"
      "Chinese); any other input is refused on stderr with the reason, and the exit status\n"
      "is 1.\n\n"
      "Example: qkv translate --show \"Saturday, 21 November 2026\"");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e.what());
  }

  for (CLI::App* old : {train_recommender, train_vision}) {
    if (!old->parsed()) continue;
    // The task the old --model named (mf and vit were the defaults): "--model X" or
    // "--model=X"; a value that was never a model names both tasks.
    const bool recommender = old == train_recommender;
    const std::vector<std::string> known = recommender ? std::vector<std::string>{"mf", "sasrec"}
                                                       : std::vector<std::string>{"vit", "point"};
    std::string model = known[0];
    const std::vector<std::string> rest = old->remaining();
    for (std::size_t i = 0; i < rest.size(); ++i) {
      if (rest[i] == "--model" && i + 1 < rest.size()) model = rest[i + 1];
      if (rest[i].starts_with("--model=")) model = rest[i].substr(8);
    }
    const bool named = std::find(known.begin(), known.end(), model) != known.end();
    std::cerr << "qkv train: 'qkv train " << old->get_name() << "' is now "
              << (named ? "'qkv train " + model + "'"
                        : "'qkv train " + known[0] + "' or 'qkv train " + known[1] + "'")
              << " (each model its own task, without --model; see 'qkv train --help')\n";
    return kExitUsage;
  }

  const std::vector<std::string> extras = app.remaining(true);
  if (!extras.empty()) {
    const std::string& first = extras.front();
    for (const auto& task : train_tasks) {
      if (!task->app()->parsed() || !first.starts_with("--")) continue;
      std::string name = first.substr(2, first.find('=') == std::string::npos ? std::string::npos : first.find('=') - 2);
      for (char& c : name)
        if (c == '-') c = '_';
      // Another task's option says whose it is ("--l2 is an option of 'qkv train mf'").
      std::vector<std::string> tasks;
      for (const auto& other : train_tasks)
        if (const options::Spec* spec = options::find(other->specs(), name); spec != nullptr && spec->fronts & options::kCli)
          tasks.push_back("'qkv train " + other->app()->get_name() + "'");
      const std::string owners = english_list(tasks);
      return usage_error(app, options::unknown_option_message(task->specs(), name, true) +
                                  (owners.empty() ? "" : "; " + first.substr(0, first.find('=')) + " is an option of " + owners));
    }
    if (first.size() > 1 && first[0] == '-')
      return usage_error(app, "unknown option " + quote_value(first));
    if (train->parsed() && app.get_subcommands().front()->get_subcommands().empty())
      return usage_error(app, quote_value(first) + " is not a task; the tasks are " + english_list(task_names));
    if (app.get_subcommands().empty()) {
      // The commands as --help lists them (classify was missing from a hand-written list).
      std::vector<std::string> names;
      for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; }))
        names.push_back(command->get_name());
      return usage_error(app, quote_value(first) + " is not a command; the commands are " + english_list(names));
    }
    return usage_error(app, "unexpected argument " + quote_value(first));
  }

  if (app.get_subcommands().empty()) {
    std::cout << app.help();
    return kExitFailure;
  }
  for (const std::string& name : kPathOptions) {
    const CLI::Option* option = app.get_subcommands().front()->get_option_no_throw(name);
    if (option == nullptr || option->count() == 0) continue;
    for (const std::string& value : option->results())
      if (value.empty()) return usage_error(app, name + ": must name a file or directory, got ''");
  }
  check_environment();
  try {
    if (version->parsed()) return run_version(std::cout);
    if (explain->parsed()) {
      if (explain_options.model.empty()) {
        for (const CLI::Option* opt : {explain_token, explain_layer, explain_head, explain_json})
          if (opt->count() > 0) throw UsageError(opt->get_name(), "is for --model (the walk of a model's layer)");
      }
      return run_explain(explain_options, std::cout);
    }
    if (bench->parsed()) {
      if (b.backward && b.device == "cuda") throw UsageError("--backward", "is for --device cpu");
      if (b.no_check && !b.ring) throw UsageError("--no-check", "is for --ring");
      if (b.ring) return run_bench_ring(b, std::cout);
      return b.device == "cuda" ? run_bench_cuda(b, std::cout) : run_bench(b, std::cout);
    }
    // Dispatch: run, tokenize.
    if (run_cmd->parsed()) {
      ro.has_text = ro_text->count() > 0;
      ro.has_index = ro_index->count() > 0;
      ro.has_user = ro_user->count() > 0;
      return run_run(ro, std::cout);
    }
    if (heads->parsed()) {
      ho.has_text = ho_text->count() > 0;
      ho.has_from = ho_from->count() > 0;
      ho.has_to = ho_to->count() > 0;
      ho.has_file = ho_file->count() > 0;
      return run_heads(ho, std::cout);
    }
    if (embed->parsed()) {
      eo.has_file = eo_file->count() > 0;
      return run_embed(eo, std::cout);
    }
    if (search->parsed()) return run_search(so, search_query.parse(), std::cout);
    if (tokenize->parsed()) {
      if (to_text->count() == 0 && to_file->count() == 0)
        throw UsageError("--text", "one of --text or --file is required");
      to.has_file = to_file->count() > 0;
      return run_tokenize(to, std::cout);
    }
    // Dispatch: generate.
    if (generate->parsed()) {
      g.sampling = sampling.parse();
      return run_generate(g, std::cout);
    }
    // Dispatch: train, translate.
    if (train->parsed()) {
      std::string command_line = "qkv";  // argv[0] would record where the binary happened to be
      for (int i = 1; i < argc; ++i) command_line += " " + std::string(argv[i]);
      for (const auto& task : train_tasks)
        if (task->app()->parsed()) return task->run_parsed(std::cout, command_line);
      throw UsageError("TASK", "name what to train (qkv train TASK): the tasks are " + english_list(task_names));
    }
    if (score->parsed()) return run_score(sc, score_query.parse(), std::cout);
    if (classify->parsed()) return run_classify(cl, classify_query.parse(), std::cout);
    if (recommend->parsed()) {
      rc.has_user = rc_user->count() > 0;
      rc.has_like = rc_like->count() > 0;
      rc.has_predict = rc_predict->count() > 0;
      return run_recommend(rc, recommend_query.parse(), std::cout);
    }
    if (translate->parsed()) {
      tl.has_file = translate->get_option("--file")->count() > 0;
      return run_translate(tl, std::cout);
    }
  } catch (const UsageError& e) {
    return usage_error(app, e.option() + ": " + e.what());
  } catch (const std::bad_alloc&) {
    std::string command;  // " train sasrec": the subcommands that ran
    for (const CLI::App* c = &app; !c->get_subcommands().empty();) {
      c = c->get_subcommands().front();
      command += " " + c->get_name();
    }
    // Never "qkv: error: std::bad_alloc" (issue 48 row 12): say which command ran out and
    // what to do. The library's own allocations name their sizes (qkv::Error of kind
    // memory); a container's failure arrives here as std::bad_alloc, whose what() is only
    // its type name, so it is not repeated.
    throw Error("qkv" + command + ": out of memory: an allocation failed; the input needs "
                    "more memory than this process may use (ulimit -v, "
                    "QKV_MEMORY_LIMIT): use a smaller input or allow more memory",
                ErrorKind::memory);
  } catch (const std::length_error& e) {
    throw Error("qkv " + app.get_subcommands().front()->get_name() +
                    ": out of memory: a container was asked for more than it can hold (" + e.what() + ")",
                ErrorKind::memory);
  }
  std::cout << app.help();
  return kExitFailure;
}

}  // namespace
}  // namespace qkv::cli

int main(int argc, char** argv) {
  qkv::retain_freed_memory();  // every command runs models in a loop (qkv/memory.h)
  try {
    qkv::apps::register_model_types();  // the model registry's application types (qkv run)
    return qkv::cli::run(argc, argv);
  } catch (const std::bad_alloc&) {  // outside a command (parsing the options)
    std::cout.flush();
    std::cerr << "qkv: error: out of memory: an allocation failed\n";
    return qkv::cli::kExitFailure;
  } catch (const std::exception& e) {  // qkv::Error and anything else
    std::cout.flush();
    std::cerr << "qkv: error: " << qkv::cli::printable(e.what()) << '\n';
    return qkv::cli::kExitFailure;
  }
}
