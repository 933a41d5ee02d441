// qkv score — loss, perplexity and bits per byte of a text under a GPT-2 directory
// (qkv::models::score_text: the text after <|endoftext|>, long texts in sliding windows).
// Text mode prints one summary line; --json one object on stdout:
// {"tokens", "bytes", "loss", "perplexity", "bits_per_byte", "stride", "windows"}.
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "io/text_input.h"
#include "print.h"
#include "qkv/qkv.h"
#include "language_model/language_model.h"

namespace qkv::cli {

int run_score(const ScoreOptions& options, const models::ScoreOptions& score, std::ostream& out) {
  const auto model = models::Gpt2Model::load(options.model);
  warn_unused_tensors(model.weights.unused_tensors, options.model, "GPT-2");
  const Tokenizer tokenizer = Tokenizer::load(options.model);
  const BpeTokenizer* bpe = tokenizer.bpe();
  if (bpe == nullptr)
    throw Error("score: " + options.model + " holds no byte-level BPE tokenizer (vocab.json + "
                "merges.txt or tokenizer.json), which GPT-2 needs");
  if (score.stride >= model.config.n_positions)
    throw UsageError("--stride", format("must be in [0, %lld] for this model (n_positions - 1; 0 = n_positions / 2), got %lld",
                                        static_cast<long long>(model.config.n_positions - 1),
                                        static_cast<long long>(score.stride)));
  // Refuses binary data and text that is not UTF-8, naming the line; an empty file too.
  const std::string text = io::read_text(options.file, "--file");
  const auto start = std::chrono::steady_clock::now();
  const models::TextScore s = models::score_text(model, *bpe, text, score.stride);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.json) {
    nlohmann::ordered_json j;
    j["tokens"] = s.tokens;
    j["bytes"] = s.bytes;
    j["loss"] = s.loss;
    j["perplexity"] = s.perplexity;
    j["bits_per_byte"] = s.bits_per_byte;
    j["stride"] = s.stride;
    j["windows"] = s.windows;
    out << j.dump() << '\n';
    return 0;
  }
  out << format("%lld tokens, %lld bytes: loss %.4f nats/token, perplexity %.2f, %.4f bits per "
                "byte\n(windows of %lld tokens, stride %lld: %lld forwards, %.1f s)\n",
                static_cast<long long>(s.tokens), static_cast<long long>(s.bytes), s.loss,
                s.perplexity, s.bits_per_byte, static_cast<long long>(model.config.n_positions),
                static_cast<long long>(s.stride), static_cast<long long>(s.windows), seconds);
  return 0;
}

}  // namespace qkv::cli
