// qkv — the command-line front end: CLI11 wiring and error reporting only; each
// subcommand lives in its own file (version.cpp, explain.cpp, bench.cpp).
//
// Errors: a bad option prints one line naming the option on stderr and exits 2;
// qkv::Error (and any other exception) prints "qkv: error: <message>" and exits 1.
// No subcommand prints the help and exits 1, as git does.
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <exception>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "commands.h"
#include "qkv/qkv.h"

namespace qkv::cli {
namespace {

// Validators run on the option's text before CLI11 converts it, so they also catch
// "abc", "1.5", "" and values beyond the type's range, with a message of our own.
CLI::Validator integer_at_least(std::int64_t min, std::int64_t max, std::string expected) {
  return CLI::Validator(
      [min, max, expected](std::string& text) -> std::string {
        std::int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (ec != std::errc() || ptr != end || text.empty() || value < min || value > max) {
          return "must be " + expected + ", got '" + text + "'";
        }
        return {};
      },
      "", "integer");
}

CLI::Validator unsigned_integer(std::string expected) {
  return CLI::Validator(
      [expected](std::string& text) -> std::string {
        std::uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (ec != std::errc() || ptr != end || text.empty()) {
          return "must be " + expected + ", got '" + text + "'";
        }
        return {};
      },
      "", "unsigned");
}

CLI::Validator one_of(std::vector<std::string> choices) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  return CLI::Validator(
      [choices, list](std::string& text) -> std::string {
        for (const auto& c : choices) {
          if (text == c) return {};
        }
        return "must be one of " + list + ", got '" + text + "'";
      },
      "{" + list + "}", "one_of");
}

const auto kPositive =
    integer_at_least(1, std::numeric_limits<std::int64_t>::max(), "a positive integer");
const auto kPositiveInt =
    integer_at_least(1, std::numeric_limits<int>::max(), "a positive integer");
const auto kNonNegativeInt =
    integer_at_least(0, std::numeric_limits<int>::max(), "a non-negative integer");
const auto kSeed = unsigned_integer("a non-negative integer below 2^64");

// "qkv bench" when the error arose inside the bench subcommand, else "qkv".
std::string command_name(const CLI::App& app) {
  const auto subcommands = app.get_subcommands();
  return subcommands.empty() ? "qkv" : "qkv " + subcommands.front()->get_name();
}

int usage_error(const CLI::App& app, const std::string& message) {
  std::cerr << command_name(app) << ": " << message << " (see '" << command_name(app)
            << " --help')\n";
  return kExitUsage;
}

int run(int argc, char** argv) {
  CLI::App app("qkv: Transformer attention, explained and measured.", "qkv");
  app.footer("Run 'qkv <command> --help' for the options of a command.");
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
                       std::to_string(kExplainMaxTokens) + ")")
      ->capture_default_str();
  explain->add_option("--seed", explain_options.seed, "Seed of the random embeddings and weights")
      ->capture_default_str()
      ->check(kSeed);
  explain->footer("Example: qkv explain --text \"the cat sat on the mat\" --seed 3");

  BenchOptions b;
  CLI::App* bench = app.add_subcommand(
      "bench", "Time the scaled_dot_product_attention forward pass on random inputs");
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
      ->check(kPositiveInt);
  bench
      ->add_option("--impl", b.impl,
                   "auto, reference (the naive twin) or fast (the fused kernel; QKV_ISA picks "
                   "its instruction set)")
      ->capture_default_str()
      ->check(one_of({"auto", "reference", "fast"}));
  bench->add_option("--repeats", b.repeats, "Timed runs; the median is reported")
      ->capture_default_str()
      ->check(kPositiveInt);
  bench->add_option("--warmup", b.warmup, "Untimed runs first")
      ->capture_default_str()
      ->check(kNonNegativeInt);
  bench->add_option("--seed", b.seed, "Seed of the random inputs")
      ->capture_default_str()
      ->check(kSeed);
  bench->add_flag("--json", b.json, "Print one JSON object instead of text");
  bench->footer("Example: qkv bench --batch 1 --heads 12 --seq 512 --dim 64 --causal");

  // Model commands (run, tokenize: BERT and tokenizers).
  RunOptions ro;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "Run a BERT checkpoint on a text and show its hidden states and attention");
  run_cmd->add_option("--model", ro.model, "Model directory (config.json, model.safetensors or "
                      "shards, tokenizer.json or vocab.txt)")->required();
  run_cmd->add_option("--text", ro.text, "Text (segment A)")->required();
  run_cmd->add_option("--pair", ro.pair, "Second segment B: [CLS] A [SEP] B [SEP]");
  run_cmd->add_option("--layer", ro.layer, "Layer whose attention is shown (default: the last)")
      ->check(integer_at_least(0, std::numeric_limits<std::int64_t>::max(),
                               "a non-negative integer"));
  run_cmd->add_option("--head", ro.head, "Head whose attention is shown")
      ->capture_default_str()
      ->check(integer_at_least(0, std::numeric_limits<std::int64_t>::max(),
                               "a non-negative integer"));
  run_cmd->add_option("--output", ro.output,
                      "Write input_ids and token_type_ids (B, L) as F32 values (exact below "
                      "2^24), last_hidden_state (B, L, E), pooler_output (B, E) and "
                      "attentions.N (B, H, L, L) for every layer N to this .safetensors file");
  run_cmd->add_option("--html", ro.html,
                      "Write a self-contained HTML page to explore the attention of every layer "
                      "and head (head view, model view, heatmaps; opens offline)");
  run_cmd->footer("Example: qkv run --model bert-base-uncased/ --text \"the cat sat\" "
                  "--layer 5 --head 3");

  TokenizeOptions to;
  CLI::App* tokenize = app.add_subcommand(
      "tokenize", "Print the token ids of a text (BERT WordPiece or GPT-2 BPE directory)");
  tokenize->add_option("--model", to.model, "Directory with tokenizer.json, vocab.txt, or "
                       "vocab.json + merges.txt")->required();
  CLI::Option* to_text = tokenize->add_option("--text", to.text, "Text to encode");
  CLI::Option* to_file =
      tokenize->add_option("--file", to.file, "Encode every line of this file, one output line each");
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
  generate->add_option("--max-new-tokens", g.max_new_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(integer_at_least(0, std::numeric_limits<std::int64_t>::max(),
                               "a non-negative integer"));
  generate->add_option("--temperature", g.temperature, "Sampling temperature (0 = greedy)")
      ->capture_default_str();
  generate->add_option("--top-k", g.top_k, "Sample among the K most likely tokens (0 = off)")
      ->check(integer_at_least(0, std::numeric_limits<std::int64_t>::max(),
                               "a non-negative integer"));
  generate->add_option("--top-p", g.top_p, "Nucleus sampling mass, in (0, 1] (1 = off)");
  generate->add_option("--seed", g.seed, "Seed of the sampler")->capture_default_str()->check(kSeed);
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
      ->check(CLI::IsMember({"f32", "bf16"}));
  generate->footer("Example: qkv generate --model gpt2/ --prompt \"Hello\" --max-new-tokens 20");

  // Training and the date translator.
  TrainOptions tr;
  CLI::App* train = app.add_subcommand(
      "train", "Train the date translator from scratch (the embedded model's recipe)");
  train->add_option("task", tr.task, "What to train: dates")->required();
  train->add_option("--steps", tr.steps, "Optimizer steps")
      ->capture_default_str()
      ->check(integer_at_least(1, 100000000, "a positive integer"));
  train->add_option("--batch", tr.batch, "Pairs per step")
      ->capture_default_str()
      ->check(integer_at_least(1, 65536, "an integer in [1, 65536]"));
  train->add_option("--lr", tr.lr, "Peak learning rate (warm-up, then cosine)")
      ->capture_default_str()
      ->check(CLI::Range(1e-7, 1.0));
  train->add_option("--label-smoothing", tr.label_smoothing, "Label smoothing, in [0, 1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999));
  train->add_option("--seed", tr.seed, "Seed of the weights and of the training pairs")
      ->capture_default_str()
      ->check(kSeed);
  train->add_option("--out", tr.out, "Output directory: model.safetensors, config.json, "
                    "checkpoint.safetensors")->capture_default_str();
  train->add_flag("--resume", tr.resume, "Continue from OUT/checkpoint.safetensors");
  train->add_option("--checkpoint-every", tr.checkpoint_every, "Steps between checkpoints (0 = at the end only)")
      ->capture_default_str()
      ->check(integer_at_least(0, 100000000, "a non-negative integer"));
  train->add_option("--stop-at", tr.stop_at, "Stop after this step with a checkpoint, as Ctrl-C "
                    "does (continue with --resume)")
      ->check(integer_at_least(1, 100000000, "a positive integer"));
  train->add_option("--eval-size", tr.eval_size, "Held-out dates scored at the end")
      ->capture_default_str()
      ->check(integer_at_least(1, 14000, "an integer in [1, 14000]"));
  train->add_flag("--json", tr.json, "Print the result as one JSON object");
  train->add_flag("--quiet", tr.quiet, "No progress bar");
  train->footer("Example: qkv train dates --steps 1500 --out dates-model --seed 0");

  TranslateOptions tl;
  CLI::App* translate = app.add_subcommand(
      "translate", "Translate dates written by people into ISO 8601 (YYYY-MM-DD)");
  translate->add_option("text", tl.texts, "Dates to translate");
  translate->add_option("--file", tl.file, "Translate every line of this file");
  translate->add_option("--model", tl.model,
                        "Model directory (config.json, model.safetensors) from qkv train dates; "
                        "default: the embedded model");
  translate->add_flag("--json", tl.json, "Print {\"input\": ..., \"output\": ...} per line");
  translate->add_flag("--show", tl.show,
                      "Show the cross-attention (output characters x input characters) as a "
                      "terminal heatmap");
  translate->add_option("--layer", tl.layer, "Decoder layer shown by --show and --svg (0-based; default: the last)")
      ->check(integer_at_least(0, std::numeric_limits<std::int64_t>::max(), "a non-negative integer"));
  translate->add_option("--head", tl.head, "Head shown by --show and --svg (default: the mean over heads; --svg: head 0)")
      ->check(integer_at_least(0, std::numeric_limits<std::int64_t>::max(), "a non-negative integer"));
  translate->add_option("--html", tl.html,
                        "Write a self-contained HTML page with every layer and head of the "
                        "encoder self-, decoder masked self- and cross-attention of the first date");
  translate->add_option("--svg", tl.svg, "Write the cross-attention heatmap of the first date as SVG");
  translate->footer("Example: qkv translate --show \"Saturday, 21 November 2026\"");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e.what());
  }

  const std::vector<std::string> extras = app.remaining(true);
  if (!extras.empty()) {
    const std::string& first = extras.front();
    if (first.size() > 1 && first[0] == '-')
      return usage_error(app, "unknown option '" + first + "'");
    if (app.get_subcommands().empty()) {
      return usage_error(app, "'" + first +
                                  "' is not a command; the commands are version, "
                                  "explain, bench, run, tokenize, generate, train and translate");
    }
    return usage_error(app, "unexpected argument '" + first + "'");
  }

  try {
    if (version->parsed()) return run_version(std::cout);
    if (explain->parsed()) return run_explain(explain_options, std::cout);
    if (bench->parsed()) return run_bench(b, std::cout);
    // Dispatch: run, tokenize.
    if (run_cmd->parsed()) return run_run(ro, std::cout);
    if (tokenize->parsed()) {
      if (to_text->count() == 0 && to_file->count() == 0)
        throw UsageError("--text", "one of --text or --file is required");
      return run_tokenize(to, std::cout);
    }
    // Dispatch: generate.
    if (generate->parsed()) return run_generate(g, std::cout);
    // Dispatch: train, translate.
    if (train->parsed()) {
      tr.command_line = "qkv";  // argv[0] would record where the binary happened to be
      for (int i = 1; i < argc; ++i) tr.command_line += " " + std::string(argv[i]);
      return run_train(tr, std::cout);
    }
    if (translate->parsed()) return run_translate(tl, std::cout);
  } catch (const UsageError& e) {
    return usage_error(app, e.option() + ": " + e.what());
  }
  std::cout << app.help();
  return kExitFailure;
}

}  // namespace
}  // namespace qkv::cli

int main(int argc, char** argv) {
  qkv::retain_freed_memory();  // every command runs models in a loop (qkv/memory.h)
  try {
    return qkv::cli::run(argc, argv);
  } catch (const qkv::Error& e) {
    std::cout.flush();
    std::cerr << "qkv: error: " << e.what() << '\n';
    return qkv::cli::kExitFailure;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "qkv: error: " << e.what() << '\n';
    return qkv::cli::kExitFailure;
  }
}
