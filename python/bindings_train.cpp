// Training for Python: the encoder–decoder model of qkv/seq2seq.h (_qkv._Seq2Seq) with its
// forward_backward, and the GPT-2 language model of language_model/language_model.h (_train_lm, with
// a progress callback; _gpt2_lm_loss, _lm_batch_offsets and _gpt2_initial for the torch
// twin and the tests), so tests can hold losses and every gradient against torch autograd.
// Arrays cross as NumPy copies (f32 weights and gradients, int64 ids).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// The CLI's limit of a line of text, which every Python entry that takes text holds too
// (qkv._text); the header is internal to the library, and only its constant is read.
#include "../src/io/text_input.h"
#include "bindings_common.h"
#include "bindings_training.h"
#include "dates/dates.h"
#include "qkv/error.h"
#include "language_model/language_model.h"
#include "qkv/seq2seq.h"

namespace py = pybind11;
namespace models = qkv::models;

namespace {

using qkv_python::F32Array;
using qkv_python::IdArray;
using qkv_python::to_numpy;

models::Seq2SeqConfig config_from(const py::dict& d) {
  models::Seq2SeqConfig c;
  auto get = [&](const char* key, std::int64_t& field) {
    if (d.contains(key)) field = d[key].cast<std::int64_t>();
  };
  get("vocab_size", c.vocab_size);
  get("d_model", c.d_model);
  get("nhead", c.nhead);
  get("dim_feedforward", c.dim_feedforward);
  get("num_encoder_layers", c.num_encoder_layers);
  get("num_decoder_layers", c.num_decoder_layers);
  get("max_len", c.max_len);
  if (d.contains("layer_norm_eps")) c.layer_norm_eps = d["layer_norm_eps"].cast<double>();
  if (d.contains("norm_first")) c.norm_first = d["norm_first"].cast<bool>();
  if (d.contains("activation"))
    c.activation = qkv::nn::parse_activation(d["activation"].cast<std::string>(), "Seq2Seq: activation");
  return c;
}

// src (B, S), tgt_in (B, T), tgt_out (B, T) or None, src_lengths (B) or None.
models::Seq2SeqBatch batch_from(const IdArray& src, const py::object& src_lengths,
                                const IdArray& tgt_in, const py::object& tgt_out) {
  QKV_CHECK(src.ndim() == 2 && tgt_in.ndim() == 2 && src.shape(0) == tgt_in.shape(0),
            "Seq2Seq: src must be (B, S) and tgt_in (B, T) with the same B");
  models::Seq2SeqBatch b;
  b.batch = src.shape(0);
  b.src_len = src.shape(1);
  b.tgt_len = tgt_in.shape(1);
  b.src.assign(src.data(), src.data() + src.size());
  b.tgt_in.assign(tgt_in.data(), tgt_in.data() + tgt_in.size());
  if (!tgt_out.is_none()) {
    IdArray out = tgt_out.cast<IdArray>();
    QKV_CHECK(out.ndim() == 2 && out.shape(0) == b.batch && out.shape(1) == b.tgt_len,
              "Seq2Seq: tgt_out must be (B, T) like tgt_in");
    b.tgt_out.assign(out.data(), out.data() + out.size());
  }
  if (!src_lengths.is_none()) b.src_lengths = src_lengths.cast<std::vector<std::int64_t>>();
  return b;
}

}  // namespace

void register_train(py::module_& m) {
  py::class_<models::Seq2Seq>(m, "_Seq2Seq")
      .def(py::init([](const py::dict& config, std::uint64_t seed) {
             return models::Seq2Seq(config_from(config), seed);
           }),
           py::arg("config"), py::arg("seed") = 0)
      .def_static("load", [](const std::string& dir) { return models::Seq2Seq::load(dir); })
      .def_static(
          "load_checked",
          [](const std::string& dir) {
            std::vector<std::string> unused;
            models::Seq2Seq model = qkv_python::naming_allocations(
                "Seq2Seq.load('" + dir + "')", [&] { return models::Seq2Seq::load(dir, &unused); });
            return py::make_tuple(std::move(model), unused);
          },
          py::arg("dir"),
          "(model, names of the tensors it did not read): the warnings are the caller's.")
      .def("config_json", [](const models::Seq2Seq& s) { return s.config.to_json(); })
      .def("state_dict",
           [](models::Seq2Seq& s) {
             py::dict d;
             for (auto& [name, t] : s.parameters()) d[py::str(name)] = to_numpy(*t);
             return d;
           })
      .def("load_state_dict",
           [](models::Seq2Seq& s, const py::dict& state) {
             qkv::nn::StateDict sd;
             for (auto& [name, t] : s.parameters()) {
               QKV_CHECK(state.contains(name), "load_state_dict: missing '" << name << "'");
               F32Array a = state[py::str(name)].cast<F32Array>();
               qkv::Shape shape(a.shape(), a.shape() + a.ndim());
               qkv::Tensor copy = qkv::Tensor::empty(shape);
               QKV_CHECK(copy.numel() == a.size(), "load_state_dict: '" << name << "' size mismatch");
               std::copy_n(a.data(), a.size(), copy.data_as<float>());
               sd.emplace(name, copy);
             }
             qkv::nn::load_state_dict(s.parameters(), sd, false);
           })
      .def(
          "forward_backward",
          [](const models::Seq2Seq& s, const IdArray& src, const py::object& src_lengths,
             const IdArray& tgt_in, const IdArray& tgt_out, double label_smoothing) {
            models::Seq2SeqBatch b = batch_from(src, src_lengths, tgt_in, tgt_out);
            models::Seq2Seq grads(s.config);
            qkv::train::zero_grad(grads.parameters());
            qkv::train::CrossEntropyResult r;
            {
              py::gil_scoped_release release;
              r = s.forward_backward(b, grads, label_smoothing);
            }
            py::dict g;
            for (auto& [name, t] : grads.parameters()) g[py::str(name)] = to_numpy(*t);
            return py::make_tuple(r.loss, g);
          },
          py::arg("src"), py::arg("src_lengths"), py::arg("tgt_in"), py::arg("tgt_out"),
          py::arg("label_smoothing") = 0.0)
      .def(
          "logits",
          [](const models::Seq2Seq& s, const IdArray& src, const py::object& src_lengths,
             const IdArray& tgt_in) {
            models::Seq2SeqBatch b = batch_from(src, src_lengths, tgt_in, py::none());
            qkv::Tensor out;
            {
              py::gil_scoped_release release;
              out = s.forward(b);
            }
            return to_numpy(out);
          },
          py::arg("src"), py::arg("src_lengths"), py::arg("tgt_in"))
      .def(
          "attention",
          [](const models::Seq2Seq& s, const IdArray& src, const py::object& src_lengths,
             const IdArray& tgt_in) {
            models::Seq2SeqBatch b = batch_from(src, src_lengths, tgt_in, py::none());
            models::Seq2SeqAttention a;
            {
              py::gil_scoped_release release;
              s.forward(b, &a);
            }
            auto list = [](const std::vector<qkv::Tensor>& layers) {
              py::list out;
              for (const auto& t : layers) out.append(to_numpy(t));
              return out;
            };
            py::dict d;
            d["encoder_self"] = list(a.encoder_self);  // (B, H, S, S) per layer
            d["decoder_self"] = list(a.decoder_self);  // (B, H, T, T)
            d["cross"] = list(a.cross);                // (B, H, T, S)
            return d;
          },
          py::arg("src"), py::arg("src_lengths"), py::arg("tgt_in"))
      .def("greedy_decode", &models::Seq2Seq::greedy_decode, py::arg("sources"), py::arg("bos"),
           py::arg("eos"), py::arg("max_new_tokens"), py::call_guard<py::gil_scoped_release>());

  // ---- The GPT-2 language model (language_model/language_model.h) --------------------------------
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
        auto on_progress = [&](const models::LmProgress& p) {
          relay([&] {
            py::dict info;
            info["step"] = p.step;
            info["total"] = p.total;
            info["loss"] = p.loss;
            info["lr"] = p.lr;
            info["heldout_loss"] = p.val_loss >= 0 ? py::object(py::float_(p.val_loss)) : py::none();
            info["tokens_per_s"] = p.tokens_per_s;
            info["elapsed_s"] = p.elapsed_s;
            return info;
          });
        };
        models::LmTrainingResult r;
        {
          py::gil_scoped_release release;
          r = models::train_lm(o, on_progress, relay.stop());
        }
        relay.rethrow();
        py::dict out;
        out["steps"] = r.steps;
        out["interrupted"] = r.interrupted;
        out["seconds"] = r.seconds;
        out["tokens_per_s"] = r.tokens_per_s;
        out["loss"] = r.final_loss;
        out["heldout_loss"] = r.val_loss >= 0 ? py::object(py::float_(r.val_loss)) : py::none();
        out["parameters"] = r.num_parameters;
        out["train_tokens"] = r.train_tokens;
        out["vocab_size"] = r.vocab_size;
        out["checkpoint"] = r.checkpoint;
        return out;
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
  // A freshly initialised GPT-2 (Gpt2Weights::initialized) written as a Hugging Face
  // directory: the twin's starting point.
  m.def(
      "_gpt2_initial",
      [](const std::string& dir, const std::string& config_json, std::uint64_t seed) {
        const models::Gpt2Config c = models::Gpt2Config::from_json(config_json, "_gpt2_initial");
        models::Gpt2Weights w = models::Gpt2Weights::initialized(c, seed);
        models::save_gpt2(dir, c, w);
      },
      py::arg("dir"), py::arg("config_json"), py::arg("seed"));
  // The LM loss of windows (B, T + 1) under the model in `dir`, and its gradient under
  // Hugging Face's names and layouts (hf_state_dict) when asked.
  m.def(
      "_gpt2_lm_loss",
      [](const std::string& dir, const IdArray& tokens, bool with_grads) {
        QKV_CHECK(tokens.ndim() == 2 && tokens.shape(1) >= 2,
                  "_gpt2_lm_loss: tokens must be (B, T + 1) with T >= 1");
        const models::Gpt2Model model = models::Gpt2Model::load(dir);
        const std::int64_t B = tokens.shape(0), T = tokens.shape(1) - 1;
        const std::vector<std::int64_t> ids(tokens.data(), tokens.data() + tokens.size());
        models::Gpt2Weights grads = models::Gpt2Weights::zeros_like(model.config);
        double loss = 0;
        {
          py::gil_scoped_release release;
          loss = models::gpt2_lm_loss(model.config, model.weights, ids, B, T,
                                      with_grads ? &grads : nullptr).loss;
        }
        py::dict g;
        if (with_grads)
          for (const auto& [name, t] : models::hf_state_dict(grads)) g[py::str(name)] = to_numpy(t);
        return py::make_tuple(loss, g);
      },
      py::arg("dir"), py::arg("tokens"), py::arg("with_grads") = true);

  m.attr("_max_text_bytes") = qkv::io::kMaxLineBytes;

  // The date translator's vocabulary and decoding (dates/dates.h).
  m.def("_dates_encode", [](const std::string& text) {
    return qkv::dates::Vocabulary::dates().encode(text);
  });
  // Checked as `qkv translate` checks (models::translate_dates_checked): per input
  // (answer, problem), problem "" when the answer is the date the input names.
  m.def("_dates_translate", [](const models::Seq2Seq& s, const std::vector<std::string>& inputs) {
    std::vector<std::pair<std::string, std::string>> out;
    for (models::DateTranslation& t : models::translate_dates_checked(s, inputs))
      out.emplace_back(std::move(t.output), std::move(t.problem));
    return out;
  });
  m.def("_embedded_date_model", [] { return models::embedded_date_model(); });
}
