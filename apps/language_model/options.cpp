// The language model's and its tokenizer's training options, declared once for the CLI
// and Python.
#include <filesystem>

#include "language_model/language_model.h"

namespace qkv::models {

const options::OptionSet<LmTrainingOptions>& lm_training_options() {
  using T = LmTrainingOptions;
  static const options::OptionSet<T> set = [] {
    options::OptionSet<T> s("train lm", "Train a GPT-2 language model on a text", [] {
      T t;
      t.out_dir = "lm-model";
      return t;
    });
    s.path("text", &T::text, "The training text, UTF-8 (or --data)");
    s.path("heldout", &T::heldout, "Held-out text whose loss is measured every --eval-every steps");
    s.choice("data", &T::corpus, {"sotu", "brown"},
             "A known corpus instead of --text and --heldout: DATA_DIR/NAME-train.txt and "
             "DATA_DIR/NAME-heldout.txt (scripts/fetch_data.sh NAME DATA_DIR writes them)");
    s.path("data_dir", &T::data_dir, "Where --data's files are");
    s.path("tokenizer", &T::tokenizer,
           "Directory with vocab.json + merges.txt (default: train a BPE tokenizer of --vocab-size on the text)");
    s.integer("vocab_size", &T::vocab_size, 258, std::numeric_limits<std::int32_t>::max(),
              "Tokens of the tokenizer trained when --tokenizer is not given");
    s.integer("layers", [](T& t) -> auto& { return t.model.n_layer; }, 1, 64, "Transformer blocks")
        .old_names = {"n_layer"};
    s.integer("embd", [](T& t) -> auto& { return t.model.n_embd; }, 8, 8192, "Model width E")
        .old_names = {"n_embd"};
    s.integer("heads", [](T& t) -> auto& { return t.model.n_head; }, 1, 256, "Attention heads (must divide --embd)")
        .old_names = {"n_head"};
    s.integer("context", [](T& t) -> auto& { return t.model.n_positions; }, 2, 8192,
              "Tokens per training window (n_positions)");
    s.integer("steps", &T::steps, 1, options::kMaxSteps, "Optimizer steps");
    s.integer("batch", &T::batch, 1, 65536, "Windows per step");
    s.number("lr", &T::peak_lr, 1e-7, false, 1.0, false, "Peak learning rate (linear warm-up, then cosine to lr/10)");
    s.integer("warmup", &T::warmup_steps, 0, options::kMaxSteps,
              "Linear warm-up steps (steps/10 when not below --steps)");
    s.integer("eval_every", &T::eval_every, 0, options::kMaxSteps,
              "Steps between held-out losses (0 = at the end only)");
    s.seed("seed", &T::seed, "Seed of the weights and of the training windows");
    train::declare_run_options(s, "config.json, model.safetensors, vocab.json, merges.txt");
    s.check([](T& t) {
      if (t.model.n_embd % t.model.n_head != 0)
        throw options::OptionError("heads", std::to_string(t.model.n_head) + " must divide --embd " +
                                                std::to_string(t.model.n_embd));
      if (!t.corpus.empty()) {
        if (!t.text.empty() || !t.heldout.empty())
          throw options::OptionError("data", "names the training and held-out texts itself: give either "
                                             "--data or --text/--heldout");
        t.text = t.data_dir + "/" + t.corpus + "-train.txt";
        t.heldout = t.data_dir + "/" + t.corpus + "-heldout.txt";
        for (const std::string& f : {t.text, t.heldout})
          if (!std::filesystem::exists(f))
            throw Error("train lm: " + f + " does not exist; write it with: scripts/fetch_data.sh " + t.corpus +
                        " " + t.data_dir);
      } else if (t.text.empty()) {
        throw options::OptionError("text", "'train lm' needs a training text (--text FILE or --data sotu)");
      }
    });
    return s;
  }();
  return set;
}

const options::OptionSet<TokenizerTrainingOptions>& tokenizer_training_options() {
  using T = TokenizerTrainingOptions;
  static const options::OptionSet<T> set = [] {
    options::OptionSet<T> s("train tokenizer", "Train a byte-level BPE tokenizer on a text");
    s.text("text", &T::text, "The training text, UTF-8 ('-': standard input)").required = true;
    s.path("out", &T::out_dir, "Output directory: vocab.json, merges.txt");
    s.integer("vocab_size", &T::vocab_size, 258, std::numeric_limits<std::int32_t>::max(),
              "Tokens in all: the 256 bytes, the merges and <|endoftext|>");
    s.integer("min_frequency", &T::min_frequency, 1, options::kMaxInt,
              "Stop when no pair of symbols occurs this often");
    s.check([](T& t) {
      if (t.text.empty()) throw options::OptionError("text", "'train tokenizer' needs the training text (--text FILE)");
    });
    return s;
  }();
  return set;
}

const options::OptionSet<ScoreOptions>& score_options() {
  static const options::OptionSet<ScoreOptions> set = [] {
    options::OptionSet<ScoreOptions> s("score", "Loss, perplexity and bits per byte of a text under a GPT-2 model");
    s.integer("stride", &ScoreOptions::stride, 0, options::kMaxInt,
              "Sliding window step for texts longer than the context, at most n_positions - 1 (0 = n_positions / 2)");
    return s;
  }();
  return set;
}

}  // namespace qkv::models
