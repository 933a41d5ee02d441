// The language model for Python: its training loop and its tokenizer's (qkv.train("lm"),
// qkv.train("tokenizer")), the batches and tokens it trains on (_lm_batch_offsets, _lm_tokens, for
// the torch twin and the tests), and a text's score (_score_text, for GPT2Model.score).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "bindings_options.h"
#include "bindings_training.h"
#include "language_model/language_model.h"
#include "qkv/error.h"
#include "qkv/gpt2.h"
#include "qkv/tokenizer.h"

namespace py = pybind11;
namespace models = qkv::models;

void register_language_model(py::module_& m) {
  qkv_python::def_options(m, models::score_options());  // GPT2Model.score
  // qkv.train("lm") and qkv.train("tokenizer"), from the tasks' one option declaration.
  qkv_python::def_training(m, models::lm_training_options(),
                           [](const models::LmTrainingOptions& o, const auto& on_progress, const auto* stop) {
                             return models::train_lm(o, on_progress, stop).to_json(o);
                           });
  qkv_python::def_training(m, models::tokenizer_training_options(),
                           [](const models::TokenizerTrainingOptions& o, const auto&, const auto*) {
                             return models::train_tokenizer(o).to_json();
                           });
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
