// qkv generate — GPT-2 text generation with a KV cache.
//
// Loads DIR (config.json, model.safetensors or its shards, and a byte-level BPE tokenizer:
// tokenizer.json or vocab.json + merges.txt), encodes the prompt, then generates with
// qkv::models::generate. Text mode prints the prompt and streams each new token's bytes as
// it is produced (flushed per token), then one line of timings on stderr. --json prints one
// object on stdout and nothing else there: {"prompt_ids": [...], "ids": [...], "text": "..."}
// where ids are the generated continuation only (the end-of-text token included when it
// stopped generation, as Hugging Face's generate does) and text is the continuation decoded,
// without the end-of-text token. --html FILE then runs the whole sequence (prompt and
// continuation) once more, without cache, and writes every layer's causal self-attention as
// a qkv::viz page ("wrote FILE" on stdout, on stderr with --json).
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "print.h"
#include "qkv/qkv.h"

namespace qkv::cli {
int run_generate(const GenerateOptions& options, std::ostream& out) {
  // --temperature, --top-k, --top-p and --max-new-tokens were range-checked by CLI11
  // (main.cpp); what depends on the model is checked here, before anything is printed.
  if (!options.html.empty()) {
    Inputs inputs;
    add_directory_inputs(inputs, "--model", options.model);
    check_output_path("--html", options.html, inputs);
  }
  const auto model = qkv::models::Gpt2Model::load(
      options.model, options.weights == "bf16" ? qkv::DType::bf16 : qkv::DType::f32);
  warn_unused_tensors(model.weights.unused_tensors, options.model, "GPT-2");
  const qkv::Tokenizer tokenizer = qkv::Tokenizer::load(options.model);
  const qkv::BpeTokenizer* bpe = tokenizer.bpe();
  if (bpe == nullptr)
    throw qkv::Error("generate: " + options.model +
                     " holds a WordPiece tokenizer; GPT-2 needs byte-level BPE (vocab.json + "
                     "merges.txt or tokenizer.json)");

  std::vector<std::int64_t> prompt_ids;
  try {
    prompt_ids = bpe->encode(options.prompt);
  } catch (const qkv::Error& e) {
    throw qkv::Error(std::string("--prompt: ") + e.what());
  }
  if (prompt_ids.empty()) throw UsageError("--prompt", "must encode to at least one token");
  const auto prompt_length = static_cast<std::int64_t>(prompt_ids.size());
  const std::int64_t room = model.config.n_positions - prompt_length;
  // A prompt longer than the context is the library's error (exit 1); a continuation that
  // would not fit after it is this option's.
  if (room >= 0 && options.sampling.max_new_tokens > room)
    throw UsageError("--max-new-tokens",
                     format("must be in [0, %lld] for this model and prompt (n_positions %lld "
                            "minus the prompt's %lld tokens), got %lld",
                            static_cast<long long>(room),
                            static_cast<long long>(model.config.n_positions),
                            static_cast<long long>(prompt_length),
                            static_cast<long long>(options.sampling.max_new_tokens)));

  qkv::models::SamplingOptions s = options.sampling;
  s.eos_id = bpe->eos_id();
  if (!s.eos_id) s.eos_id = model.config.eos_token_id;

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto first = start;
  std::int64_t count = 0;
  // Text mode echoes the prompt once the first token is there, so that a run that fails
  // before generating prints nothing on stdout.
  bool echoed = options.json;
  const auto echo_prompt = [&] {
    if (!echoed) out << options.prompt << std::flush;
    echoed = true;
  };
  auto on_token = [&](std::int64_t id) {
    if (count++ == 0) first = clock::now();
    echo_prompt();
    if (options.json || (s.eos_id && id == *s.eos_id)) return;
    out << bpe->decode({id}) << std::flush;  // byte-exact: the pieces concatenate
  };
  std::vector<std::int64_t> ids = qkv::models::generate(model, prompt_ids, s, on_token);
  echo_prompt();
  const auto end = clock::now();

  std::vector<std::int64_t> text_ids = ids;
  if (!text_ids.empty() && s.eos_id && text_ids.back() == *s.eos_id) text_ids.pop_back();
  if (options.json) {
    nlohmann::json j;
    j["prompt_ids"] = prompt_ids;
    j["ids"] = ids;
    j["text"] = bpe->decode(text_ids);
    // Partial UTF-8 at the end of a continuation is replaced (U+FFFD), not an error.
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  } else {
    out << '\n';
  }
  out.flush();

  const double prompt_s = std::chrono::duration<double>(first - start).count();
  const double decode_s = std::chrono::duration<double>(end - first).count();
  std::cerr << "qkv generate: prompt " << prompt_ids.size() << " tokens in "
            << prompt_s * 1e3 << " ms; " << ids.size() << " tokens generated";
  if (ids.size() > 1 && decode_s > 0)
    std::cerr << ", " << static_cast<double>(ids.size() - 1) / decode_s
              << " tokens/s after the first";
  std::cerr << '\n';

  if (!options.html.empty()) {
    std::vector<std::int64_t> all = prompt_ids;  // (L): prompt, then continuation
    all.insert(all.end(), ids.begin(), ids.end());
    qkv::viz::AttentionGroup group;
    group.name = "causal self-attention";
    for (const auto id : all) group.query_tokens.push_back(bpe->decode({id}));
    group.key_tokens = group.query_tokens;
    model.forward_full(all, &group.layers);  // n_layer × (1, H, L, L)
    for (Tensor& a : group.layers) a = a.select(0, 0);  // (H, L, L)
    qkv::viz::AttentionView view;
    view.title = qkv::viz::page_title("GPT-2", options.model);
    view.subtitle = "prompt (" + std::to_string(prompt_ids.size()) + " tokens) + " +
                    std::to_string(ids.size()) + " generated: " + bpe->decode(all);
    view.groups.push_back(std::move(group));
    qkv::viz::write_file(options.html, qkv::viz::render_html(view));
    (options.json ? std::cerr : out) << "wrote " << printable(options.html) << " (attention of "
                                     << model.config.n_layer << " layers × "
                                     << model.config.n_head << " heads over " << all.size()
                                     << " tokens)" << std::endl;
  }
  return 0;
}

}  // namespace qkv::cli
