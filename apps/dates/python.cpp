// The date translator for Python: its training (qkv.train("dates"), through the one training
// loop), its vocabulary and checked decoding (dates/dates.h) and the embedded model
// (qkv.translate_dates). The model itself is qkv/seq2seq.h's _Seq2Seq
// (python/bindings_train.cpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings_options.h"
#include "bindings_training.h"
#include "dates/dates.h"
#include "qkv/seq2seq.h"

namespace py = pybind11;
namespace models = qkv::models;

void register_dates(py::module_& m) {
  // qkv.train("dates"), from the task's one option declaration.
  qkv_python::def_training(m, models::date_training_options(),
                           [](const models::DateTrainingOptions& o, const auto& on_progress, const auto* stop) {
                             return models::train_dates(o, on_progress, stop).to_json(o);
                           });
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
  // One date's attention with the model's answer (models::date_attention, what qkv run and
  // qkv translate --html show): (answer, problem, source tokens, target tokens (<s> +
  // answer), encoder self, decoder self, cross), each a list of per-layer (1, H, Lq, Lk).
  m.def("_date_attention", [](const models::Seq2Seq& s, const std::string& text) {
    const models::DateTranslation t = models::translate_dates_checked(s, {text}).front();
    if (t.output.empty()) throw qkv::Error(t.problem);
    const models::DateAttention e = models::date_attention(s, text, t.output);
    const auto layers = [](const std::vector<qkv::Tensor>& v) {
      py::list out;
      for (const qkv::Tensor& a : v) out.append(qkv_python::to_numpy(a));
      return out;
    };
    return py::make_tuple(t.output, t.problem, e.source_tokens, e.target_in,
                          layers(e.attention.encoder_self), layers(e.attention.decoder_self),
                          layers(e.attention.cross));
  });
}
