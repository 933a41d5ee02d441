// qkv translate: dates written by people -> ISO 8601, with the embedded date model (or
// --model DIR), and what it attended to: the cross-attention as a terminal heatmap
// (--show), every attention of every layer and head as an HTML page (--html), one head as
// an SVG heatmap (--svg).
#include <exception>
#include <iostream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "io/text_input.h"
#include "print.h"
#include "dates/dates.h"
#include "qkv/error.h"
#include "qkv/viz.h"

namespace qkv::cli {
namespace {

// The cross-attention of one layer, one head or the mean over heads, as a Matrix
// (output characters × input characters).
Matrix cross_matrix(const models::DateAttention& e, std::int64_t layer, std::int64_t head) {
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

// One object per input: {"input", "output"}, or for a refused input "output": null and
// "error" (and "guess" with --raw).
std::string json_line(const std::string& input, const models::DateTranslation& t, bool raw) {
  nlohmann::ordered_json j;
  j["input"] = input;
  if (t.ok()) {
    j["output"] = t.output;
  } else {
    j["output"] = nullptr;
    if (raw && !t.output.empty()) j["guess"] = t.output;
    j["error"] = t.problem;
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Inputs arrive in batches of this many (the positional ones, then --file's lines), so a
// file of any length streams through in bounded memory, as translate_dates decodes.
constexpr std::size_t kBatch = 512;

struct Input {
  std::string text;
  std::string name;  // "input 3" or "--file 'dates.txt' line 7"
};

}  // namespace

int run_translate(const TranslateOptions& o, std::ostream& out) {
  if (o.texts.empty() && !o.has_file)
    throw UsageError("TEXT", "give dates to translate, or --file");
  if (o.has_file && o.file.empty())
    throw UsageError("--file", "must name a file, or '-' for standard input");
  Inputs input_files;
  if (o.has_file) add_input(input_files, "--file", o.file);
  add_directory_inputs(input_files, "--model", o.model);
  if (!o.html.empty()) check_output_path("--html", o.html, input_files);
  if (!o.svg.empty()) check_output_path("--svg", o.svg, input_files);
  const bool embedded = o.model.empty();
  const models::Seq2Seq model = embedded ? models::embedded_date_model() : models::Seq2Seq::load(o.model);
  const std::int64_t layers = model.config.num_decoder_layers;
  const std::int64_t layer = o.layer < 0 ? layers - 1 : o.layer;
  if (layer >= layers)
    throw UsageError("--layer", format("must be in [0, %lld) for this model, got %lld",
                                       static_cast<long long>(layers),
                                       static_cast<long long>(layer)));
  if (o.head >= model.config.nhead)
    throw UsageError("--head", format("must be in [0, %lld) for this model, got %lld",
                                      static_cast<long long>(model.config.nhead),
                                      static_cast<long long>(o.head)));

  std::optional<io::LineReader> reader;
  if (o.has_file) reader.emplace(o.file, "--file");
  std::size_t next_text = 0;
  // A line the reader refuses ends the input: the lines before it are still translated,
  // then its error is raised.
  std::exception_ptr read_error;
  // The next batch: positional inputs first, then non-empty lines of --file.
  const auto read_batch = [&] {
    std::vector<Input> batch;
    for (; next_text < o.texts.size() && batch.size() < kBatch; ++next_text)
      batch.push_back({o.texts[next_text], "input " + std::to_string(next_text + 1)});
    std::string line;
    try {
      while (reader && !read_error && batch.size() < kBatch && reader->next(line))
        if (!line.empty()) batch.push_back({line, reader->where()});
    } catch (const Error&) {
      read_error = std::current_exception();
    }
    return batch;
  };

  const std::string title = embedded ? "date translator (embedded model)" : viz::page_title("date translator", o.model);
  std::int64_t inputs = 0, refused = 0;
  std::optional<Input> first;
  models::DateTranslation first_translation;
  for (std::vector<Input> batch = read_batch(); !batch.empty(); batch = read_batch()) {
    std::vector<std::string> texts;
    for (const Input& in : batch) texts.push_back(in.text);
    const std::vector<models::DateTranslation> got = models::translate_dates_checked(model, texts);
    if (!first) {
      first = batch.front();
      first_translation = got.front();
    }
    for (std::size_t i = 0; i < batch.size(); ++i, ++inputs) {
      const models::DateTranslation& t = got[i];
      const std::string& input = batch[i].text;
      if (!t.ok()) {
        ++refused;
        out.flush();  // what came before stays before the message
        std::cerr << "qkv: error: " << printable(batch[i].name) << " " << quote_value(input) << ": "
                  << t.problem << '\n';
      }
      const bool shown = t.ok() || (o.raw && !t.output.empty());
      if (o.json) out << json_line(input, t, o.raw) << '\n';
      else if (!o.show && shown) out << t.output << (t.ok() ? "" : "  (guess, refused)") << '\n';
      if (!o.show || !shown) continue;
      const models::DateAttention e = models::date_attention(model, input, t.output);
      out << (inputs ? "\n" : "") << input << "  →  " << t.output
          << (t.ok() ? "" : "  (guess, refused)") << '\n';
      out << "cross-attention, decoder "
          << layer_head_words(layer, layers, o.head, model.config.nhead, "rows: output characters, columns: input characters")
          << ":\n";
      // Each row is the query of the decoder input token (<s>, 2, 0, ...), which predicts
      // the next output character: label rows with what they produced.
      print_attention_heatmap(out, cross_matrix(e, layer, o.head), e.target_out, e.source_tokens);
    }
  }
  if (read_error) {
    out.flush();
    std::rethrow_exception(read_error);
  }
  if (!first) throw Error(reader->name() + ": has no dates to translate (only empty lines)");

  const models::DateTranslation& t = first_translation;
  const bool pages = !o.html.empty() || !o.svg.empty();
  if (pages && !t.ok() && !(o.raw && !t.output.empty())) {
    std::cerr << "qkv: error: --html/--svg: not written, as " << printable(first->name)
              << " was refused (--raw shows the model's guess)\n";
  } else if (pages) {
    const std::string output = t.output + (t.ok() ? "" : " (guess, refused)");
    const models::DateAttention e = models::date_attention(model, first->text, t.output);
    const viz::AttentionView v = models::date_attention_view(e, first->text, output, title);
    if (!o.html.empty()) {
      viz::write_file(o.html, viz::render_html(v));
      (o.json ? std::cerr : out) << "wrote " << printable(o.html) << " (every layer and head of \""
                                 << printable(first->text) << "\")\n";
    }
    if (!o.svg.empty()) {
      viz::write_file(o.svg, viz::render_svg(v.groups[2], layer, o.head < 0 ? 0 : o.head));
      (o.json ? std::cerr : out) << "wrote " << printable(o.svg) << "\n";
    }
  }
  if (refused > 0) {
    out.flush();
    std::cerr << "qkv: error: " << refused << " of " << inputs << " input"
              << (inputs == 1 ? " was" : "s were") << " not translated"
              << (o.raw ? "" : " (--raw prints the model's guesses, marked)") << '\n';
    return kExitFailure;
  }
  return 0;
}

}  // namespace qkv::cli
