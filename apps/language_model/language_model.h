// The language-model task: a GPT-2 (qkv/gpt2.h) trained by qkv on a text, and the
// evaluation anyone who trains one expects (loss, perplexity, bits per byte).
//
//   LmTrainingOptions o;  o.text = "sotu-train.txt";  o.heldout = "sotu-heldout.txt";
//   o.out_dir = "sotu-gpt";
//   LmTrainingResult r = train_lm(o, print_progress, &interrupted);
//   // out_dir is a Hugging Face GPT-2 directory: config.json, model.safetensors,
//   // vocab.json, merges.txt (Gpt2Model::load, Tokenizer::load, `qkv generate`).
//   TextScore s = score_text(Gpt2Model::load("sotu-gpt"), tokenizer, text);
//
// A text becomes one stream of tokens: <|endoftext|>, then the tokens of the whole text.
// The leading <|endoftext|> is the context of the first token, so every token of the text
// is predicted and bits per byte counts every byte. Training windows are drawn from that
// stream at offsets that are a pure function of (seed, step): a resumed run sees the same
// batches, and a twin in another framework can be fed the same ones (lm_batch_offsets).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/distributed.h"
#include "qkv/gpt2.h"
#include "qkv/options.h"
#include "qkv/tokenizer.h"
#include "qkv/trainer.h"

namespace qkv::models {

// The model `qkv train lm` builds unless told otherwise (vocab_size and eos_token_id are
// the tokenizer's): 4 blocks, E = 256, 4 heads of 64, F = 1024, context 256, GELU (tanh),
// about 5.3 M parameters with an 8192-token vocabulary (21 MB in f32).
Gpt2Config lm_model_config();

struct LmTrainingOptions {
  std::string text;                // training text (a file; its lines joined by "\n")
  // A known corpus instead of text and heldout: "sotu" or "brown", the files
  // data_dir/NAME-train.txt and data_dir/NAME-heldout.txt (scripts/fetch_data.sh NAME
  // DIR writes them). lm_training_options()'s check fills text and heldout from them.
  std::string corpus;
  std::string data_dir = "data";
  std::string heldout;             // held-out text for the validation loss; "" = none
  std::string tokenizer;           // vocab.json + merges.txt to use; "" = train one on `text`
  std::int64_t vocab_size = 8192;  // of the tokenizer trained when `tokenizer` is ""
  Gpt2Config model = lm_model_config();
  std::int64_t steps = 2000;
  std::int64_t batch = 16;         // windows per step
  std::int64_t context = 0;        // T, tokens per window; 0 = model.n_positions
  double peak_lr = 1e-3;
  std::int64_t warmup_steps = 100; // steps / 10 when it is not below steps
  double min_lr_ratio = 0.1;       // the cosine ends at peak_lr · this
  double weight_decay = 0.1;       // on matrices and embeddings, not on biases or gains
  double clip_norm = 1.0;
  std::uint64_t seed = 0;          // initial weights and the training windows
  std::string out_dir;             // the model directory, with checkpoint.safetensors
  bool resume = false;             // continue from out_dir/checkpoint.safetensors
  std::int64_t checkpoint_every = 500;  // steps; 0 = only at the end or on interruption
  std::int64_t stop_at = 0;        // > 0: stop after this step with a checkpoint
  std::string precision = "f32";  // the products of training: f32, or bf16 (qkv/nn/precision.h)
  std::int64_t eval_every = 250;   // steps between validation losses; 0 = only at the end
  std::int64_t eval_tokens = 32768;  // held-out tokens each validation scores (whole windows)
  std::string command;             // recorded in the weights' metadata
  // Data-parallel training over the ranks of `communicator` when it has more than one, as
  // DateTrainingOptions::communicator (dates/dates.h): every rank its contiguous share of the
  // `batch` windows of every step, gradients summed across the ranks during the backward,
  // weights from rank 0; rank 0 alone tokenizes a new tokenizer's text, writes files, runs
  // the validation (its loss is shared) and reports progress. All ranks must be given the
  // same options.
  const distributed::Communicator* communicator = nullptr;
};

// What train_lm returns: the loop's result (qkv/trainer.h: steps, interrupted, seconds,
// items_per_s() in tokens, loss, the held-out losses as evaluations, checkpoint,
// reductions) and what the task adds.
struct LmTrainingResult : train::LoopResult {
  double val_loss = -1.0;        // the last held-out loss (-1 without a held-out text)
  std::int64_t num_parameters = 0;
  std::int64_t train_tokens = 0; // length of the training stream
  std::int64_t vocab_size = 0;
  // `qkv train lm --json`: the loop's fields, then heldout_loss, parameters, vocab_size,
  // train_tokens, out.
  std::string to_json(const LmTrainingOptions& options) const;
};

// Trains (or resumes) into out_dir: vocab.json and merges.txt first (trained or copied),
// then checkpoint.safetensors (weights, AdamW moments, step) and the model (config.json,
// model.safetensors) every checkpoint_every steps and when the loop ends (after `steps`,
// at stop_at, or when `stop` becomes true, checked once per step), by the one training loop
// (train::fit, task "lm"; the held-out loss is its evaluation). on_progress is called after
// every step. Throws qkv::Error for a text that is empty, binary or not UTF-8, or
// shorter than one window of context + 1 tokens, and for options out of range.
// The options of `qkv train lm` and qkv.train("lm"), declared once (qkv/options.h). Its
// check refuses heads not dividing embd, a corpus with text or heldout, no text at all, and
// a corpus whose files are missing (naming the script that writes them).
const options::OptionSet<LmTrainingOptions>& lm_training_options();

LmTrainingResult train_lm(const LmTrainingOptions& options,
                          const train::ProgressCallback& on_progress = {},
                          const std::atomic<bool>* stop = nullptr);

// <|endoftext|>, then the tokens of `text`. Throws when the tokenizer has no <|endoftext|>.
std::vector<std::int64_t> lm_tokens(const BpeTokenizer& tokenizer, std::string_view text);

// The start of each of the B training windows (T + 1 tokens each) of step `step`, drawn
// uniformly from [0, num_tokens - T - 1]: floor(u · (num_tokens - T)) for u = Rng::uniform() of an
// Rng seeded with mix64(seed · 0x9e3779b97f4a7c15 + step + 1).
std::vector<std::int64_t> lm_batch_offsets(std::uint64_t seed, std::int64_t step, std::int64_t B,
                                           std::int64_t T, std::int64_t num_tokens);

struct TextScore {
  std::int64_t tokens = 0;      // tokens of the text, each predicted once
  std::int64_t bytes = 0;       // bytes of the text
  double loss = 0.0;            // mean negative log-likelihood, nats per token
  double perplexity = 0.0;      // exp(loss)
  double bits_per_byte = 0.0;   // total NLL / ln 2 / bytes
  std::int64_t stride = 0;      // of the sliding window (see score_text)
  std::int64_t windows = 0;     // forwards run
};

// Scores `text` (non-empty) under the model, with the stream lm_tokens makes. A stream
// longer than the context P = n_positions is read in windows of P tokens that start
// `stride` tokens apart (default P / 2; in [1, P - 1]): the first window predicts all its
// tokens, each later one only its last `stride`, with the P - stride before as context.
// Every token is predicted exactly once, with at least P - stride tokens of context
// after the first window (Hugging Face's perplexity recipe).
TextScore score_text(const Gpt2Model& model, const BpeTokenizer& tokenizer, std::string_view text,
                     std::int64_t stride = 0);

// qkv train tokenizer: a byte-level BPE vocabulary (qkv::train_bpe) learned from a text,
// written as vocab.json and merges.txt in out_dir.
struct TokenizerTrainingOptions {
  std::string text;                 // the training text ("-": standard input), UTF-8
  std::string out_dir = "tokenizer";
  std::int64_t vocab_size = 8192;   // 256 bytes + merges + <|endoftext|>
  std::int64_t min_frequency = 2;   // stop when no pair of symbols occurs this often
};
struct TokenizerTrainingResult {
  std::int64_t bytes = 0, vocab_size = 0, merges = 0;
  std::int64_t tokens = 0;          // the text's, under the new vocabulary
  double seconds = 0.0;
  std::string out_dir;
  std::string to_json() const;      // `qkv train tokenizer --json`'s object
};
const options::OptionSet<TokenizerTrainingOptions>& tokenizer_training_options();
// Refuses binary data and text that is not UTF-8, naming the line (io::read_text).
TokenizerTrainingResult train_tokenizer(const TokenizerTrainingOptions& options);

// The options of `qkv score` and GPT2Model.score, declared once (qkv/options.h).
struct ScoreOptions {
  std::int64_t stride = 0;  // of the sliding window; 0 = n_positions / 2 (see score_text)
};
const options::OptionSet<ScoreOptions>& score_options();

}  // namespace qkv::models
