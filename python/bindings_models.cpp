// Models and tokenizers for Python (_qkv._BertModel, _qkv._Gpt2Model, _qkv._UseLiteModel,
// _qkv._Tokenizer): thin wrappers over qkv::models and qkv::Tokenizer. The applications'
// bindings live with them (apps/*/python*.cpp).
//
// Results cross as the _Tensor views bindings.cpp registers; python/qkv/models.py turns
// them into NumPy arrays or torch tensors and holds the friendly signatures. Every check
// lives in the C++ library (qkv::Error -> ValueError / TypeError via bindings.cpp's
// translator). The GIL is released around loading, forward passes, generation and
// tokenization.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../src/core/budget.h"
#include "bindings_common.h"
#include "bindings_options.h"
#include "qkv/bert.h"
#include "qkv/error.h"
#include "qkv/gpt2.h"
#include "qkv/heads.h"
#include "qkv/model_registry.h"
#include "qkv/tokenizer.h"
#include "qkv/use_lite.h"

namespace py = pybind11;
namespace models = qkv::models;
using qkv_python::naming_allocations;

namespace {

const char* gelu_name(qkv::nn::GeluApproximation g) {
  return g == qkv::nn::GeluApproximation::tanh ? "gelu_new" : "gelu";
}

py::dict bert_config(const models::BertModel& m) {
  const auto& c = m.config;
  py::dict d;
  d["model_type"] = "bert";
  d["vocab_size"] = c.vocab_size;
  d["hidden_size"] = c.hidden_size;
  d["num_hidden_layers"] = c.num_hidden_layers;
  d["num_attention_heads"] = c.num_attention_heads;
  d["intermediate_size"] = c.intermediate_size;
  d["max_position_embeddings"] = c.max_position_embeddings;
  d["type_vocab_size"] = c.type_vocab_size;
  d["layer_norm_eps"] = c.layer_norm_eps;
  d["hidden_act"] = gelu_name(c.gelu);
  d["has_pooler"] = m.weights.pooler_weight.defined();
  return d;
}

py::dict gpt2_config(const models::Gpt2Model& m) {
  const auto& c = m.config;
  py::dict d;
  d["model_type"] = "gpt2";
  d["vocab_size"] = c.vocab_size;
  d["n_positions"] = c.n_positions;
  d["n_embd"] = c.n_embd;
  d["n_layer"] = c.n_layer;
  d["n_head"] = c.n_head;
  d["n_inner"] = c.inner();
  d["layer_norm_epsilon"] = c.layer_norm_epsilon;
  d["activation_function"] = gelu_name(c.activation);
  d["eos_token_id"] = c.eos_token_id ? py::object(py::int_(*c.eos_token_id)) : py::object(py::none());
  return d;
}

py::dict use_lite_config(const models::UseLiteModel& m) {
  const auto& c = m.config;
  py::dict d;
  d["model_type"] = "use_lite";
  d["vocab_size"] = c.vocab_size;
  d["embedding_rows"] = c.embedding_rows;
  d["layer_widths"] = c.layer_widths;
  d["output_size"] = c.output_size;
  d["num_attention_heads"] = c.num_attention_heads;
  d["dim_feedforward"] = c.dim_feedforward;
  d["layer_norm_eps"] = c.layer_norm_eps;
  d["max_length"] = c.max_length;
  d["embedding_scale"] = c.embedding_scale;
  return d;
}

const qkv::WordPieceTokenizer& wordpiece_or_throw(const qkv::Tokenizer& t, const char* what) {
  const auto* wp = t.wordpiece();
  QKV_CHECK(wp != nullptr, "Tokenizer." << what << ": only WordPiece (BERT) tokenizers have it; "
                                           "this one is byte-level BPE");
  return *wp;
}

// A whole call's memory, planned before any of it is allocated as the attention calls
// plan theirs (issue 48 row 13: a GPT2Model forward of (2000, 256) ran 11 s and 3.7 GB
// before "out of memory allocating 8 MiB"): over the limit (qkv/memory.h) a qkv::Error of
// kind memory, which Python receives as MemoryError naming each part and the total. The
// working parts are estimates from the configuration (the activations of one row or
// batch); the outputs are exact.
void plan_gpt2_forward(const models::Gpt2Model& model, std::int64_t batch, std::int64_t length) {
  const models::Gpt2Config& c = model.config;
  qkv::detail::MemoryPlan plan("GPT2Model forward");
  plan.add("the logits (batch, length, vocab_size) float32", {batch, length, c.vocab_size, 4});
  plan.add("one row's logits before the copy (length, vocab_size)", {length, c.vocab_size, 4});
  plan.add("one row's activations (length, 8 n_embd + n_inner)", {length, 8 * c.n_embd + c.inner(), 4});
  plan.add("one row's attention probabilities (n_head, length, length)", {c.n_head, length, length, 4});
  plan.check();
}

void plan_gpt2_generate(const models::Gpt2Model& model) {
  const models::Gpt2Config& c = model.config;
  qkv::detail::MemoryPlan plan("GPT2Model.generate");
  plan.add("the KV caches (n_layer, 2, n_positions, n_embd)", {c.n_layer, 2, c.n_positions, c.n_embd, 4});
  plan.add("one position's activations and logits", {8 * c.n_embd + c.inner() + c.vocab_size, 4});
  plan.check();
}

void plan_bert_forward(const models::BertModel& model, std::int64_t batch, std::int64_t length,
                       bool output_attentions) {
  const models::BertConfig& c = model.config;
  qkv::detail::MemoryPlan plan("BertModel forward");
  plan.add("the hidden states (batch, length, 6 hidden_size)", {batch, length, 6 * c.hidden_size, 4});
  plan.add("the feed-forward activations (batch, length, intermediate_size)",
           {batch, length, c.intermediate_size, 4});
  plan.add("one layer's attention probabilities (batch, heads, length, length)",
           {batch, c.num_attention_heads, length, length, 4});
  if (output_attentions)
    plan.add("the attentions returned (layers, batch, heads, length, length)",
             {c.num_hidden_layers, batch, c.num_attention_heads, length, length, 4});
  plan.check();
}

void plan_use_lite_embed(const models::UseLiteModel& model, std::int64_t sentences,
                         std::int64_t batch_size, bool attentions) {
  const models::UseLiteConfig& c = model.config;
  std::int64_t width = c.output_size;
  for (std::int64_t w : c.layer_widths) width = std::max(width, w);
  const std::int64_t batch = std::min(std::max<std::int64_t>(batch_size, 1), std::max<std::int64_t>(sentences, 1));
  const std::int64_t layers = static_cast<std::int64_t>(c.layer_widths.size());
  qkv::detail::MemoryPlan plan("UseLiteModel embedding");
  plan.add("the embeddings (sentences, output_size)", {sentences, c.output_size, 4});
  plan.add("one batch's activations (batch_size, max_length, 6 width + dim_feedforward)",
           {batch, c.max_length, 6 * width + c.dim_feedforward, 4});
  plan.add("one batch's attention probabilities (batch_size, heads, max_length, max_length)",
           {batch, c.num_attention_heads, c.max_length, c.max_length, 4});
  if (attentions)
    plan.add("the attentions returned (sentences, layers, heads, max_length, max_length)",
             {sentences, layers, c.num_attention_heads, c.max_length, c.max_length, 4});
  plan.check();
}

}  // namespace

void register_models(py::module_& m) {
  // ---- The model registry (qkv/model_registry.h): the types qkv.load_model accepts are
  // the C++ registry's, so Python and `qkv run` cannot disagree about them.
  m.def("_model_types", [] { return models::model_types(); },
        "The registered model types (config.json's model_type), sorted.");
  m.def("_model_type", [](const std::string& dir) { return models::model_type_of(dir); }, py::arg("dir"),
        "config.json's model_type in dir; qkv::Error (ValueError) for a type the registry does not know, "
        "listing those it does.");
  // ---- qkv heads (qkv/heads.h): the ranking as `qkv heads --json` writes it, parsed by qkv.heads.
  m.def(
      "_heads",
      [](const std::string& dir, const std::vector<std::tuple<std::string, std::string, std::string, std::string>>& probes,
         bool per_probe) {
        py::gil_scoped_release release;
        std::vector<models::HeadProbe> asked;
        for (const auto& [text, from, to, where] : probes) asked.push_back({text, from, to, where});
        const std::unique_ptr<models::Model> model = models::load_model(dir);
        models::HeadsJsonOptions options;
        options.per_probe = per_probe;
        return models::heads_json(*model, asked, models::rank_heads(*model, asked), options);
      },
      py::arg("dir"), py::arg("probes"), py::arg("per_probe"),
      "models::rank_heads of the model in dir over probes (text, from, to, where), as models::heads_json; "
      "qkv::Error (ValueError) naming what is wrong.");
  // ---- BERT -------------------------------------------------------------------------
  py::class_<models::BertModel, std::shared_ptr<models::BertModel>>(
      m, "_BertModel", "qkv::models::BertModel (use qkv.load_model / qkv.BertModel).")
      .def_static(
          "load",
          [](const std::string& dir) {
            py::gil_scoped_release release;
            return naming_allocations("BertModel.load('" + dir + "')", [&] {
              return std::make_shared<models::BertModel>(models::BertModel::load(dir));
            });
          },
          py::arg("dir"))
      .def_property_readonly("config", &bert_config)
      .def_property_readonly(
          "unused_tensors",
          [](const models::BertModel& model) { return model.weights.unused_tensors; },
          "The checkpoint's tensors the model did not read (BertWeights::unused_tensors).")
      .def(
          "forward",
          [](const models::BertModel& model, const std::vector<std::int64_t>& ids,
             std::int64_t batch, std::int64_t length, const std::vector<std::int64_t>& types,
             const std::vector<std::int64_t>& mask, bool output_attentions) {
            plan_bert_forward(model, batch, length, output_attentions);
            models::BertOutput out;
            {
              py::gil_scoped_release release;
              out = naming_allocations(
                  "BertModel forward of (" + std::to_string(batch) + ", " +
                      std::to_string(length) + ") ids",
                  [&] { return model.forward(ids, batch, length, types, mask, output_attentions); });
            }
            py::object pooled = out.pooler_output.defined() ? py::cast(out.pooler_output)
                                                            : py::object(py::none());
            return py::make_tuple(out.last_hidden_state, pooled, out.attentions);
          },
          py::arg("input_ids"), py::arg("batch"), py::arg("length"), py::arg("token_type_ids"),
          py::arg("attention_mask"), py::arg("output_attentions"),
          "(last_hidden_state, pooler_output or None, [attentions]) as _Tensor. Row-major "
          "flat (batch*length) ids; empty types/mask = defaults. Releases the GIL.");

  // ---- GPT-2 ------------------------------------------------------------------------
  py::class_<models::Gpt2Model, std::shared_ptr<models::Gpt2Model>>(
      m, "_Gpt2Model", "qkv::models::Gpt2Model (use qkv.load_model / qkv.GPT2Model).")
      .def_static(
          "load",
          [](const std::string& dir, const std::string& weights) {
            if (weights != "f32" && weights != "bf16")
              throw py::value_error("GPT2Model.load: weights must be 'f32' or 'bf16', got '" +
                                    weights + "'");
            py::gil_scoped_release release;
            return naming_allocations("GPT2Model.load('" + dir + "')", [&] {
              return std::make_shared<models::Gpt2Model>(models::Gpt2Model::load(
                  dir, weights == "bf16" ? qkv::DType::bf16 : qkv::DType::f32));
            });
          },
          py::arg("dir"), py::arg("weights") = "f32",
          "weights: the products' weights, 'f32' (exact) or 'bf16' (Gpt2Model's "
          "product_dtype). Releases the GIL.")
      .def_property_readonly("config", &gpt2_config)
      .def_property_readonly(
          "unused_tensors",
          [](const models::Gpt2Model& model) { return model.weights.unused_tensors; },
          "The checkpoint's tensors the model did not read (Gpt2Weights::unused_tensors).")
      .def(
          "plan_forward",
          [](const models::Gpt2Model& model, std::int64_t batch, std::int64_t length) {
            plan_gpt2_forward(model, batch, length);
          },
          py::arg("batch"), py::arg("length"),
          "MemoryError (naming the total) when a forward of (batch, length) ids would not fit "
          "the memory limit; nothing is allocated.")
      .def(
          "forward_full",
          [](const models::Gpt2Model& model, const std::vector<std::int64_t>& ids) {
            py::gil_scoped_release release;
            return naming_allocations(
                "GPT2Model forward of " + std::to_string(ids.size()) + " ids",
                [&] { return model.forward_full(ids); });
          },
          py::arg("ids"), "(L, V) logits of every position, as a _Tensor. Releases the GIL.")
      .def(
          "forward_full_attentions",
          [](const models::Gpt2Model& model, const std::vector<std::int64_t>& ids) {
            std::vector<qkv::Tensor> attentions;  // n_layer × (1, H, L, L)
            qkv::Tensor logits;
            {
              py::gil_scoped_release release;
              logits = naming_allocations("GPT2Model forward of " + std::to_string(ids.size()) + " ids",
                                          [&] { return model.forward_full(ids, &attentions); });
            }
            py::list layers;
            for (const qkv::Tensor& a : attentions) layers.append(py::cast(a));
            return py::make_tuple(logits, layers);
          },
          py::arg("ids"),
          "((L, V) logits, per layer the causal self-attention probabilities (1, H, L, L)), as "
          "_Tensors: forward_full with its attentions (what qkv generate --html and qkv run show). "
          "Releases the GIL.")
      .def(
          "generate",
          [](const models::Gpt2Model& model, const std::vector<std::int64_t>& prompt, const py::dict& options,
             std::optional<std::int64_t> eos_id) {
            // The options of `qkv generate`, from the one declaration (models::sampling_options).
            models::SamplingOptions s = qkv_python::options_from(models::sampling_options(), options);
            s.eos_id = eos_id;
            models::validate(s);
            plan_gpt2_generate(model);
            py::gil_scoped_release release;
            return naming_allocations("GPT2Model.generate", [&] {
              return models::generate(model, prompt, s);
            });
          },
          py::arg("prompt"), py::arg("options"), py::arg("eos_id"),
          "The generated ids (prompt excluded), stopping after eos_id. Releases the GIL.");
  qkv_python::def_options(m, models::sampling_options());

  // ---- The Universal Sentence Encoder lite and semantic search ------------------------
  py::class_<models::UseLiteModel, std::shared_ptr<models::UseLiteModel>>(
      m, "_UseLiteModel", "qkv::models::UseLiteModel (use qkv.load_model / qkv.UseLiteModel).")
      .def_static(
          "load",
          [](const std::string& dir) {
            py::gil_scoped_release release;
            return naming_allocations("UseLiteModel.load('" + dir + "')", [&] {
              return std::make_shared<models::UseLiteModel>(models::UseLiteModel::load(dir));
            });
          },
          py::arg("dir"))
      .def_property_readonly("config", &use_lite_config)
      .def_property_readonly("unused_tensors",
                             [](const models::UseLiteModel&) { return std::vector<std::string>{}; },
                             "Always empty: a tensor the model does not read is a load error.")
      .def(
          "encode_ids",
          [](const models::UseLiteModel& model, const std::string& text) {
            bool clipped = false;
            std::vector<std::int64_t> ids;
            {
              py::gil_scoped_release release;
              ids = model.encode(text, &clipped);
            }
            return py::make_tuple(ids, clipped);
          },
          py::arg("text"), "(ids clipped to max_length, whether it clipped). Releases the GIL.")
      .def(
          "embed_ids",
          [](const models::UseLiteModel& model, const std::vector<std::vector<std::int64_t>>& ids,
             bool attentions, std::int64_t batch_size) {
            plan_use_lite_embed(model, static_cast<std::int64_t>(ids.size()), batch_size, attentions);
            models::UseLiteOutput out;
            {
              py::gil_scoped_release release;
              out = naming_allocations(
                  "UseLiteModel embedding of " + std::to_string(ids.size()) + " sentences",
                  [&] { return model.embed_ids(ids, attentions, batch_size); });
            }
            return py::make_tuple(out.embeddings, out.attentions);
          },
          py::arg("ids"), py::arg("attentions"), py::arg("batch_size"),
          "(embeddings (N, O), [per input: per layer (H, n, n)]) as _Tensor. Releases the GIL.");


  // ---- Tokenizer --------------------------------------------------------------------
  py::class_<qkv::Tokenizer, std::shared_ptr<qkv::Tokenizer>>(
      m, "_Tokenizer", "qkv::Tokenizer (use qkv.Tokenizer).")
      .def_static(
          "load",
          [](const std::string& dir) {
            py::gil_scoped_release release;
            return naming_allocations("Tokenizer.load('" + dir + "')", [&] {
              return std::make_shared<qkv::Tokenizer>(qkv::Tokenizer::load(dir));
            });
          },
          py::arg("dir"))
      .def_property_readonly("kind",
                             [](const qkv::Tokenizer& t) {
                               return std::string(t.wordpiece() ? "wordpiece"
                                                  : t.bpe()     ? "bpe"
                                                                : "sentencepiece");
                             })
      .def_property_readonly("vocab_size", &qkv::Tokenizer::vocab_size)
      .def(
          "encode",
          [](const qkv::Tokenizer& t, const std::string& text) {
            py::gil_scoped_release release;
            return naming_allocations(
                "Tokenizer.encode of a text of " + std::to_string(text.size()) + " bytes",
                [&] { return t.encode(text); });
          },
          py::arg("text"))
      .def(
          "encode_pair",
          [](const qkv::Tokenizer& t, const std::string& a, const std::string& b) {
            const auto& wp = wordpiece_or_throw(t, "encode_pair");
            qkv::Encoding e;
            {
              py::gil_scoped_release release;
              e = naming_allocations("Tokenizer.encode_pair of texts of " +
                                         std::to_string(a.size()) + " and " +
                                         std::to_string(b.size()) + " bytes",
                                     [&] { return wp.encode_pair(a, b); });
            }
            return py::make_tuple(e.ids, e.token_type_ids);
          },
          py::arg("a"), py::arg("b"))
      .def(
          "tokenize",
          [](const qkv::Tokenizer& t, const std::string& text) {
            return naming_allocations(
                "Tokenizer.tokenize of a text of " + std::to_string(text.size()) + " bytes", [&] {
                  if (const auto* wp = t.wordpiece()) return wp->tokenize(text);
                  if (const auto* sp = t.sentencepiece()) return sp->tokenize(text);
                  std::vector<std::string> out;
                  for (auto id : t.bpe()->encode(text)) out.push_back(t.bpe()->id_to_token(id));
                  return out;
                });
          },
          py::arg("text"))
      .def(
          "decode",
          [](const qkv::Tokenizer& t, const std::vector<std::int64_t>& ids) {
            std::string s;
            {
              py::gil_scoped_release release;
              s = naming_allocations("Tokenizer.decode of " + std::to_string(ids.size()) + " ids",
                                     [&] { return t.decode(ids); });
            }
            // BPE ids may end inside a UTF-8 sequence: replace, as HF's decode does.
            PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()),
                                               "replace");
            if (!u) throw py::error_already_set();
            return py::reinterpret_steal<py::str>(u);
          },
          py::arg("ids"))
      .def(
          "token_to_id",
          [](const qkv::Tokenizer& t, const std::string& token) {
            return t.token_to_id(token);
          },
          py::arg("token"))
      .def(
          "id_to_token",
          [](const qkv::Tokenizer& t, std::int64_t id) {
            return t.id_to_token(id);
          },
          py::arg("id"))
      .def_property_readonly("eos_id", [](const qkv::Tokenizer& t) -> std::optional<std::int64_t> {
        return t.bpe() ? t.bpe()->eos_id() : std::nullopt;
      });
}
