// The language model for Python: its training loop (_train_lm, with a progress callback,
// for qkv.train_lm), the batches and tokens it trains on (_lm_batch_offsets, _lm_tokens, for
// the torch twin and the tests), and a text's score (_score_text, for GPT2Model.score).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "bindings_training.h"
#include "language_model/language_model.h"
#include "qkv/error.h"
#include "qkv/gpt2.h"
#include "qkv/tokenizer.h"

namespace py = pybind11;
namespace models = qkv::models;

void register_language_model(py::module_& m) {
  m.def(
      "_train_lm",
      [](const py::dict& d, const py::object& progress) {
        models::LmTrainingOptions o;
        auto str = [&](const char* key, std::string& field) {
          if (d.contains(key) && !d[key].is_none()) field = d[key].cast<std::string>();
        };
        auto integer = [&](const char* key, std::int64_t& field) {
          if (d.contains(key)) field = d[key].cast<std::int64_t>();
        };
        str("text", o.text);
        str("heldout", o.heldout);
        str("tokenizer", o.tokenizer);
        str("out_dir", o.out_dir);
        str("command", o.command);
        integer("vocab_size", o.vocab_size);
        integer("n_layer", o.model.n_layer);
        integer("n_embd", o.model.n_embd);
        integer("n_head", o.model.n_head);
        integer("n_positions", o.model.n_positions);
        integer("steps", o.steps);
        integer("batch", o.batch);
        integer("warmup_steps", o.warmup_steps);
        integer("checkpoint_every", o.checkpoint_every);
        integer("stop_at", o.stop_at);
        integer("eval_every", o.eval_every);
        integer("eval_tokens", o.eval_tokens);
        if (d.contains("lr")) o.peak_lr = d["lr"].cast<double>();
        if (d.contains("seed")) o.seed = d["seed"].cast<std::uint64_t>();
        if (d.contains("resume")) o.resume = d["resume"].cast<bool>();
        QKV_CHECK(o.model.n_embd % o.model.n_head == 0,
                  "train_lm: n_head = " << o.model.n_head << " must divide n_embd = " << o.model.n_embd);
        // Between steps the relay runs Python's signal handlers, so Ctrl-C stops the run
        // after a checkpoint and raises KeyboardInterrupt.
        qkv_python::ProgressRelay relay(progress);
        return relay.run([&](const auto& on_progress, const auto* stop) {
          return models::train_lm(o, on_progress, stop);
        }).to_json(o);
      },
      py::arg("options"), py::arg("progress"));
  m.def("_lm_batch_offsets", &models::lm_batch_offsets, py::arg("seed"), py::arg("step"),
        py::arg("batch"), py::arg("context"), py::arg("num_tokens"));
  m.def(
      "_lm_tokens",
      [](const qkv::Tokenizer& tokenizer, const std::string& text) {
        const qkv::BpeTokenizer* bpe = tokenizer.bpe();
        QKV_CHECK(bpe != nullptr, "lm_tokens: the tokenizer is not byte-level BPE");
        py::gil_scoped_release release;
        return models::lm_tokens(*bpe, text);
      },
      py::arg("tokenizer"), py::arg("text"));
  m.def(
      "_score_text",
      [](const models::Gpt2Model& model, const qkv::Tokenizer& tokenizer,
             const std::string& text, std::int64_t stride) {
            const qkv::BpeTokenizer* bpe = tokenizer.bpe();
            QKV_CHECK(bpe != nullptr, "GPT2Model.score: the tokenizer is not byte-level BPE");
            models::TextScore s;
            {
              py::gil_scoped_release release;
              s = models::score_text(model, *bpe, text, stride);
            }
            py::dict d;
            d["tokens"] = s.tokens;
            d["bytes"] = s.bytes;
            d["loss"] = s.loss;
            d["perplexity"] = s.perplexity;
            d["bits_per_byte"] = s.bits_per_byte;
            d["stride"] = s.stride;
            d["windows"] = s.windows;
            return d;
          },
          py::arg("model"), py::arg("tokenizer"), py::arg("text"), py::arg("stride"),
          "qkv::models::score_text as a dict (GPT2Model.score). Releases the GIL.");
}
