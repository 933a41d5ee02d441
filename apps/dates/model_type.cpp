// "qkv-seq2seq" in the model registry (qkv/model_registry.h): a directory written by
// `qkv train dates` (models/dates is the embedded one), loaded by Seq2Seq::load, whose
// attention on a date is the three groups `qkv translate --html` shows (date_attention).
#include <memory>
#include <sstream>
#include <string>

#include "dates/dates.h"
#include "qkv/error.h"
#include "qkv/model_registry.h"

namespace qkv::dates {
namespace {

class DateModelEntry final : public models::Model {
 public:
  explicit DateModelEntry(const std::string& dir) : dir_(dir), model_(models::Seq2Seq::load(dir)) {}
  std::string model_type() const override { return "qkv-seq2seq"; }
  std::string description() const override {
    const models::Seq2SeqConfig& c = model_.config;
    std::ostringstream s;
    s << "date translator (encoder–decoder): " << c.num_encoder_layers << " encoder and "
      << c.num_decoder_layers << " decoder layers, " << c.nhead << " heads, d_model " << c.d_model
      << "; the input's tokens are its characters";
    return s.str();
  }
  models::AttentionInput attention_input() const override { return models::AttentionInput::text; }
  models::ModelAttention attention(const models::AttentionRequest& r) const override {
    QKV_CHECK(!r.text.empty(), "qkv-seq2seq shows the attention over a date: give a non-empty text");
    // The model's answer, checked as qkv translate checks it: a refused answer is still the
    // one the attention produced, so it is shown, marked.
    const models::DateTranslation t = models::translate_dates_checked(model_, {r.text}).front();
    QKV_CHECK(!t.output.empty(), "the text " << r.text.substr(0, 60) << " was refused: " << t.problem);
    models::ModelAttention a;
    const models::DateAttention e = models::date_attention(model_, r.text, t.output);
    a.tokens = e.source_tokens;
    a.view = models::date_attention_view(e, r.text, t.output + (t.ok() ? "" : " (guess, refused)"),
                                         viz::page_title("date translator", dir_));
    return a;
  }
  models::LayerWalk layer_walk(const models::AttentionRequest& r, std::int64_t layer) const override {
    // The encoder's layers, over the date's characters: the decoder's run on the answer and
    // attends to the encoder too (cross-attention), which a walk of one self-attention layer
    // does not show.
    models::LayerWalk w;
    w.tokens = attention(r).tokens;  // refuses a text that is no date, as attention() does
    const std::vector<std::int64_t> src = dates::Vocabulary::dates().encode(r.text);
    w.group = "encoder self-attention";
    w.about = "the date translator's encoder layers (its decoder is not walked), pre-norm as GPT-2, with ReLU";
    const auto& layers = model_.transformer.encoder_layers;
    const bool exists = layer >= 0 && layer < static_cast<std::int64_t>(layers.size());
    return models::walk_layer(w, model_.encoder_hidden_states(src),
                              exists ? layers[static_cast<std::size_t>(layer)] : nn::TransformerEncoderLayer{}, layer);
  }

 private:
  std::string dir_;
  models::Seq2Seq model_;
};

}  // namespace

void register_date_model_type() {
  models::register_model_type("qkv-seq2seq", [](const std::string& dir) -> std::unique_ptr<models::Model> {
    return std::make_unique<DateModelEntry>(dir);
  });
}

}  // namespace qkv::dates
