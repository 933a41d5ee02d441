// qkv_bench_models — times whole models (qkv::models::BertModel, Gpt2Model, UseLiteModel)
// for scripts/bench_models.py and scripts/bench_use_lite.py, which run it beside PyTorch,
// ONNX Runtime and (USE-lite) the model's published pipeline, interleaved.
//
// Usage: qkv_bench_models [--bert DIR] [--gpt2 DIR] [--use-lite DIR] [--threads N]
//
// Loads the checkpoints given (Hugging Face directories), prints one JSON line
//   {"ready": true, "qkv": VERSION, "cpu": cpu_summary(), "threads": N}
// and then serves commands read on stdin, one per line, answering each with one JSON line:
//
//   bert B L OUT     one BertModel::forward on B sequences of L tokens, ids
//                    (i·7919 + 11) mod vocab for the flat index i in [0, B·L), no mask, token
//                    types 0. -> {"ms": forward time}. OUT (a path, or "-" for none): the
//                    last_hidden_state (B, L, E) as raw little-endian float32.
//   gpt2 CTX N OUT   greedy decoding with Gpt2Model's KV cache: the state is cleared, the
//                    prompt (i·7919 + 11) mod vocab for i in [0, CTX) is run in one forward
//                    (the prefill, timed apart), its logits give the first new token (argmax),
//                    then N decode steps of one token each (forward + argmax).
//                    -> {"ms": the N decode steps, "prefill_ms": x, "ids": [first, N more]}.
//                    OUT: the prefill's logits (V) as raw float32.
//   gpt2_bf16 CTX N OUT  the same with the products' weights in bf16
//                    (Gpt2Model(..., DType::bf16)), loaded from the --gpt2 directory at the
//                    first such command; {"error": ...} where this CPU has no bf16 matmul.
//   use_lite B FILE OUT  sentence embeddings of the Universal Sentence Encoder lite (--use-lite:
//                    a directory of scripts/fetch_model.sh use-lite) of every line of FILE
//                    (UTF-8 text, one sentence per line, read at the first command naming it
//                    and kept), in chunks of B lines in file order, one UseLiteModel::embed
//                    call per chunk (which pads the chunk to its longest sentence, as a
//                    caller handing it B sentences at a time would): the tokenizer included.
//                    -> {"ms": all chunks, "tokenize_ms": the encode calls alone (timed apart
//                    in the same run), "sentences": N, "tokens": real tokens after the
//                    128-token clip, "padded_tokens": B·L summed over the chunks}.
//                    OUT: the embeddings (N, 512) in file order as raw float32.
//   use_lite_lengths FILE  how many lines of FILE (read afresh, not kept) have each token
//                    count after the 128-token clip: -> {"counts": [lines of 0 tokens, of 1,
//                    ..., of 128]} (the FLOPs of embedding them follow from it).
//   quit             exits (as does the end of input).
//
// A benchmark, not a test: nothing here asserts a time. Errors are answered as
// {"error": "..."} and the program goes on.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/bert.h"
#include "qkv/cpu.h"
#include "qkv/memory.h"
#include "qkv/gpt2.h"
#include "qkv/threads.h"
#include "qkv/use_lite.h"
#include "qkv/version.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::vector<std::int64_t> synthetic_ids(std::int64_t count, std::int64_t vocab) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) ids[static_cast<std::size_t>(i)] = (i * 7919 + 11) % vocab;
  return ids;
}

void write_floats(const std::string& path, const qkv::Tensor& t) {
  if (path == "-") return;
  const std::vector<float> values = t.to_vector();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::int64_t argmax(const qkv::Tensor& logits) {
  const qkv::Tensor c = logits.contiguous();
  const float* p = c.data_as<float>();
  return static_cast<std::int64_t>(std::max_element(p, p + c.numel()) - p);
}

Json run_bert(const qkv::models::BertModel& model, std::int64_t batch, std::int64_t length,
              const std::string& out) {
  const auto ids = synthetic_ids(batch * length, model.config.vocab_size);
  const auto start = Clock::now();
  const qkv::models::BertOutput result = model.forward(ids, batch, length);
  const double ms = ms_since(start);
  write_floats(out, result.last_hidden_state);
  return Json{{"ms", ms}};
}

Json run_gpt2(const qkv::models::Gpt2Model& model, qkv::models::Gpt2State& state,
              std::int64_t context, std::int64_t steps, const std::string& out) {
  if (context < 1 || steps < 0 || context + steps > model.config.n_positions) {
    throw std::runtime_error("gpt2: need 1 <= CTX and CTX + N <= n_positions");
  }
  const auto prompt = synthetic_ids(context, model.config.vocab_size);
  state.clear();
  auto start = Clock::now();
  const qkv::Tensor prefill_logits = model.forward(prompt, state);
  std::int64_t token = argmax(prefill_logits);
  const double prefill_ms = ms_since(start);
  write_floats(out, prefill_logits);
  std::vector<std::int64_t> ids{token};
  start = Clock::now();
  for (std::int64_t i = 0; i < steps; ++i) {
    const qkv::Tensor logits = model.forward(std::span<const std::int64_t>(&token, 1), state);
    token = argmax(logits);
    ids.push_back(token);
  }
  const double ms = ms_since(start);
  return Json{{"ms", ms}, {"prefill_ms", prefill_ms}, {"ids", ids}};
}

// The lines of a text file (no trailing newline kept), read once per path.
const std::vector<std::string>& lines_of(const std::string& path,
                                         std::map<std::string, std::vector<std::string>>& cache) {
  auto found = cache.find(path);
  if (found != cache.end()) return found->second;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return cache.emplace(path, std::move(lines)).first->second;
}

Json use_lite_lengths(const qkv::models::UseLiteModel& model, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(model.config.max_length + 1), 0);
  for (std::string line; std::getline(in, line);) ++counts[model.encode(line).size()];
  return Json{{"counts", counts}};
}

Json run_use_lite(const qkv::models::UseLiteModel& model, std::int64_t batch,
                  const std::vector<std::string>& texts, const std::string& out) {
  if (batch < 1) throw std::runtime_error("use_lite: need B >= 1");
  const auto N = static_cast<std::int64_t>(texts.size());
  const std::int64_t O = model.config.output_size;
  std::vector<float> embeddings(static_cast<std::size_t>(N * O));  // (N, O)
  double tokenize_ms = 0;
  std::int64_t tokens = 0, padded = 0;
  const auto start = Clock::now();
  for (std::int64_t first = 0; first < N; first += batch) {
    const std::int64_t B = std::min(batch, N - first);
    // embed() is encode() then embed_ids(); done here in its two steps to time the first.
    const auto tokenize_start = Clock::now();
    std::vector<std::vector<std::int64_t>> ids;
    ids.reserve(static_cast<std::size_t>(B));
    for (std::int64_t i = first; i < first + B; ++i)
      ids.push_back(model.encode(texts[static_cast<std::size_t>(i)]));
    tokenize_ms += ms_since(tokenize_start);
    std::size_t L = 0;
    for (const auto& s : ids) {
      tokens += static_cast<std::int64_t>(s.size());
      L = std::max(L, s.size());
    }
    padded += B * static_cast<std::int64_t>(L);
    const qkv::Tensor y = model.embed_ids(ids, false, batch).embeddings;  // (B, O)
    std::copy_n(y.data_as<float>(), B * O, embeddings.begin() + first * O);
  }
  const double ms = ms_since(start);
  if (out != "-") {
    std::ofstream file(out, std::ios::binary);
    file.write(reinterpret_cast<const char*>(embeddings.data()),
               static_cast<std::streamsize>(embeddings.size() * sizeof(float)));
    if (!file) throw std::runtime_error("cannot write " + out);
  }
  return Json{{"ms", ms}, {"tokenize_ms", tokenize_ms}, {"sentences", N}, {"tokens", tokens},
              {"padded_tokens", padded}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string bert_dir, gpt2_dir, use_lite_dir;
  int threads = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "qkv_bench_models: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--bert") bert_dir = value;
    else if (flag == "--gpt2") gpt2_dir = value;
    else if (flag == "--use-lite") use_lite_dir = value;
    else if (flag == "--threads") threads = std::stoi(value);
    else {
      std::fprintf(stderr, "usage: qkv_bench_models [--bert DIR] [--gpt2 DIR] [--use-lite DIR] "
                           "[--threads N]\n");
      return 2;
    }
  }
  try {
    qkv::retain_freed_memory();
    if (threads > 0) qkv::set_num_threads(threads);
    std::optional<qkv::models::BertModel> bert;
    std::optional<qkv::models::Gpt2Model> gpt2, gpt2_bf16;
    std::optional<qkv::models::Gpt2State> state;
    std::optional<qkv::models::UseLiteModel> use_lite;
    std::map<std::string, std::vector<std::string>> texts;  // use_lite's files, by path
    if (!bert_dir.empty()) bert.emplace(qkv::models::BertModel::load(bert_dir));
    if (!gpt2_dir.empty()) {
      gpt2.emplace(qkv::models::Gpt2Model::load(gpt2_dir));
      state.emplace(gpt2->make_state());
    }
    if (!use_lite_dir.empty()) use_lite.emplace(qkv::models::UseLiteModel::load(use_lite_dir));
    std::cout << Json{{"ready", true}, {"qkv", qkv::kVersion}, {"cpu", qkv::cpu_summary()},
                      {"threads", qkv::num_threads()}}.dump()
              << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
      std::istringstream words(line);
      std::string command, out = "-";
      words >> command;
      if (command.empty()) continue;
      if (command == "quit") break;
      Json reply;
      try {
        std::int64_t a = 0, b = 0;
        std::string file;
        if (command == "use_lite_lengths") {
          if (!(words >> file)) throw std::runtime_error("expected FILE after use_lite_lengths");
        } else if (command == "use_lite") {
          if (!(words >> a >> file)) throw std::runtime_error("expected B and FILE after use_lite");
        } else if (!(words >> a >> b)) {
          throw std::runtime_error("expected two integers after " + command);
        }
        words >> out;
        if (command == "use_lite" || command == "use_lite_lengths") {
          if (!use_lite) throw std::runtime_error("no --use-lite model loaded");
          reply = command == "use_lite" ? run_use_lite(*use_lite, a, lines_of(file, texts), out)
                                        : use_lite_lengths(*use_lite, file);
        } else if (command == "bert") {
          if (!bert) throw std::runtime_error("no --bert model loaded");
          reply = run_bert(*bert, a, b, out);
        } else if (command == "gpt2") {
          if (!gpt2) throw std::runtime_error("no --gpt2 model loaded");
          reply = run_gpt2(*gpt2, *state, a, b, out);
        } else if (command == "gpt2_bf16") {
          if (gpt2_dir.empty()) throw std::runtime_error("no --gpt2 model loaded");
          if (!gpt2_bf16) gpt2_bf16.emplace(qkv::models::Gpt2Model::load(gpt2_dir, qkv::DType::bf16));
          reply = run_gpt2(*gpt2_bf16, *state, a, b, out);
        } else {
          throw std::runtime_error("unknown command '" + command + "'");
        }
      } catch (const std::exception& e) {
        reply = Json{{"error", e.what()}};
      }
      std::cout << reply.dump() << std::endl;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_bench_models: %s\n", e.what());
    return 1;
  }
  return 0;
}
