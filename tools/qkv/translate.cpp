// qkv translate: dates written by people -> ISO 8601, with the embedded date model (or
// --model DIR), and what it attended to: the cross-attention as a terminal heatmap
// (--show), every attention of every layer and head as an HTML page (--html), one head as
// an SVG heatmap (--svg).
#include <fstream>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "print.h"
#include "qkv/dates.h"
#include "qkv/error.h"
#include "qkv/viz.h"

namespace qkv::cli {
namespace {

// The display tokens of ids (the space as "␣", so a label is never blank).
std::vector<std::string> tokens_of(const std::vector<std::int64_t>& ids) {
  const dates::Vocabulary& vocab = dates::Vocabulary::dates();
  std::vector<std::string> out;
  for (auto id : ids) {
    const std::string t = vocab.token(id);
    out.push_back(t == " " ? "␣" : t);
  }
  return out;
}

// One input's attention: the batch of one source and the decoded target, run once more
// with teacher forcing so every probability is the one behind each output character.
struct Explained {
  std::vector<std::string> source_tokens;  // S
  std::vector<std::string> target_in;      // T: <s> + output characters
  std::vector<std::string> target_out;     // T: output characters + </s>
  models::Seq2SeqAttention attention;
};

Explained explain(const models::Seq2Seq& model, const std::string& input, const std::string& output) {
  const dates::Vocabulary& vocab = dates::Vocabulary::dates();
  Explained e;
  models::Seq2SeqBatch b;
  b.batch = 1;
  b.src = vocab.encode(input);
  b.src_len = static_cast<std::int64_t>(b.src.size());
  b.src_lengths = {b.src_len};
  std::vector<std::int64_t> out_ids = vocab.encode(output);
  b.tgt_in = {dates::Vocabulary::bos};
  b.tgt_in.insert(b.tgt_in.end(), out_ids.begin(), out_ids.end());
  b.tgt_len = static_cast<std::int64_t>(b.tgt_in.size());
  std::vector<std::int64_t> target_out = out_ids;
  target_out.push_back(dates::Vocabulary::eos);
  model.forward(b, &e.attention);
  e.source_tokens = tokens_of(b.src);
  e.target_in = tokens_of(b.tgt_in);
  e.target_out = tokens_of(target_out);
  return e;
}

// (1, H, Lq, Lk) -> (H, Lq, Lk)
std::vector<Tensor> drop_batch(const std::vector<Tensor>& layers) {
  std::vector<Tensor> out;
  for (const auto& t : layers) out.push_back(t.select(0, 0));
  return out;
}

viz::AttentionView view_of(const Explained& e, const std::string& input, const std::string& output,
                           const std::string& title) {
  viz::AttentionView v;
  v.title = title;
  v.subtitle = input + "  →  " + output;
  v.groups.push_back({"encoder self-attention", e.source_tokens, e.source_tokens,
                      drop_batch(e.attention.encoder_self)});
  v.groups.push_back({"decoder masked self-attention", e.target_in, e.target_in,
                      drop_batch(e.attention.decoder_self)});
  v.groups.push_back({"cross-attention", e.target_in, e.source_tokens, drop_batch(e.attention.cross)});
  return v;
}

// The cross-attention of one layer, one head or the mean over heads, as a Matrix
// (output characters × input characters).
Matrix cross_matrix(const Explained& e, std::int64_t layer, std::int64_t head) {
  const Tensor& p = e.attention.cross[static_cast<std::size_t>(layer)];  // (1, H, T, S)
  const std::int64_t H = p.size(1), T = p.size(2), S = p.size(3);
  Matrix m(T, S);
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = 0; j < S; ++j) {
      double v = 0;
      if (head >= 0) {
        v = p.get({0, head, i, j});
      } else {
        for (std::int64_t h = 0; h < H; ++h) v += p.get({0, h, i, j});
        v /= static_cast<double>(H);
      }
      m(i, j) = v;
    }
  return m;
}

std::string json_line(const std::string& input, const std::string& output) {
  nlohmann::ordered_json j;
  j["input"] = input;
  j["output"] = output;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

int run_translate(const TranslateOptions& o, std::ostream& out) {
  std::vector<std::string> inputs = o.texts;
  if (!o.file.empty()) {
    std::ifstream f(o.file);
    QKV_CHECK(f.good(), "cannot read --file '" << o.file << "'");
    std::string line;
    while (std::getline(f, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty()) inputs.push_back(line);
    }
  }
  if (inputs.empty()) throw UsageError("TEXT", "give dates to translate, or --file");
  const bool embedded = o.model.empty();
  const models::Seq2Seq model = embedded ? models::embedded_date_model() : models::Seq2Seq::load(o.model);
  const std::int64_t layers = model.config.num_decoder_layers;
  const std::int64_t layer = o.layer < 0 ? layers - 1 : o.layer;
  if (layer >= layers)
    throw UsageError("--layer", format("the model has %lld decoder layers", static_cast<long long>(layers)));
  if (o.head >= model.config.nhead)
    throw UsageError("--head", format("the model has %lld heads", static_cast<long long>(model.config.nhead)));

  const std::vector<std::string> outputs = models::translate_dates(model, inputs);
  const std::string title = embedded ? "qkv date translator (embedded model)" : o.model;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (o.json) out << json_line(inputs[i], outputs[i]) << '\n';
    else if (!o.show) out << outputs[i] << '\n';
    if (!o.show) continue;
    const Explained e = explain(model, inputs[i], outputs[i]);
    out << (i ? "\n" : "") << inputs[i] << "  →  " << outputs[i] << '\n';
    out << "cross-attention, decoder layer " << layer << " (of 0-" << layers - 1 << "), "
        << (o.head < 0 ? std::string("mean of the heads")
                       : format("head %lld", static_cast<long long>(o.head)))
        << " (rows: output characters, columns: input characters):\n";
    // Each row is the query of the decoder input token (<s>, 2, 0, ...), which predicts
    // the next output character: label rows with what they produced.
    print_attention_heatmap(out, cross_matrix(e, layer, o.head), e.target_out, e.source_tokens);
  }
  if (!o.html.empty() || !o.svg.empty()) {
    const Explained e = explain(model, inputs.front(), outputs.front());
    const viz::AttentionView v = view_of(e, inputs.front(), outputs.front(), title);
    if (!o.html.empty()) {
      viz::write_file(o.html, viz::render_html(v));
      (o.json ? std::cerr : out) << "wrote " << o.html << " (every layer and head of \""
                                 << inputs.front() << "\")\n";
    }
    if (!o.svg.empty()) {
      viz::write_file(o.svg, viz::render_svg(v.groups[2], layer, o.head < 0 ? 0 : o.head));
      (o.json ? std::cerr : out) << "wrote " << o.svg << "\n";
    }
  }
  return 0;
}

}  // namespace qkv::cli
