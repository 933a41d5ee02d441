// Training for Python: the encoder–decoder model of qkv/seq2seq.h (_qkv._Seq2Seq) with its
// forward_backward, and GPT-2's (_gpt2_lm_loss and _gpt2_initial for the torch twin and the
// tests), so tests can hold losses and every gradient against torch autograd. The language
// model's training loop (_train_lm) and the date translator's decoding are bound with their
// applications (apps/language_model/python.cpp, apps/dates/python.cpp).
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
#include "qkv/error.h"
#include "qkv/gpt2.h"
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

}
