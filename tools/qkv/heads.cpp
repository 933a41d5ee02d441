// qkv heads: every layer and head of a text model (every attention group of it) ranked by
// the weight a token or word A of a text puts on a token or word B — the probing of Clark et
// al. 2019, "What does BERT look at?" (§3: a word split into several tokens attends with
// the mean of its tokens' rows and is attended to with the sum of its tokens' columns).
// With --file, each line a sentence and its pair, the heads are ranked by their mean
// weight over the lines. Names are read by token_choice.h, as qkv run --token reads them.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "io/text_input.h"
#include "print.h"
#include "qkv/error.h"
#include "qkv/model_registry.h"
#include "token_choice.h"

namespace qkv::cli {
namespace {

// One sentence and its pair: from --text/--from/--to, or one line of --file.
struct Probe {
  std::string text, from, to;
  std::int64_t line = 0;  // of --file, from 1; 0 for --text
  std::string where;      // "--file 'f' line 3" for messages; "" for --text
};

// One group of one probe: where A and B are, and each head's weight, [layer][head].
struct GroupWeights {
  std::size_t group = 0;  // index into the view's groups
  TokenSpan from, to;
  std::vector<std::vector<double>> weights;
};

struct Skipped {
  std::string group, reason;
};

struct ProbeResult {
  std::vector<std::string> tokens;  // the input's tokens (the first group's queries)
  std::vector<viz::AttentionGroup> groups;  // without their layers: names and token lists
  std::vector<GroupWeights> found;
  std::vector<Skipped> skipped;
};

std::vector<Probe> read_probes(const std::string& path) {
  io::LineReaderOptions options;
  options.allow_empty = true;  // said below in the words of the format
  io::LineReader reader(path, "--file", options);
  std::vector<Probe> probes;
  std::string line;
  while (reader.next(line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos || line[0] == '#') continue;
    std::vector<std::string> fields;
    for (std::size_t start = 0;;) {
      const std::size_t tab = line.find('\t', start);
      fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (fields.size() != 3 || fields[0].empty() || fields[1].empty() || fields[2].empty())
      throw Error(reader.where() + ": expected sentence<TAB>from<TAB>to (three fields, none empty), got " +
                  std::to_string(fields.size()) + (fields.size() == 1 ? " field" : " fields") +
                  (fields.size() == 3 ? " with an empty one" : "") + ": " + quote_value(line));
    probes.push_back({fields[0], fields[1], fields[2], reader.line_number(), reader.where()});
  }
  if (probes.empty())
    throw Error(reader.name() + " holds no line sentence<TAB>from<TAB>to (blank lines and lines "
                "starting with '#' are skipped)");
  return probes;
}

// What the weight of a head is, for a split word (Clark et al. 2019): the mean over A's
// rows of the sum over B's columns. p: one layer (H, Lq, Lk), contiguous f32.
double weight(const float* p, std::int64_t Lq, std::int64_t Lk, std::int64_t head, TokenSpan from, TokenSpan to) {
  double sum = 0;
  for (std::int64_t i = from.first; i < from.first + from.count; ++i) {
    const float* row = p + (head * Lq + i) * Lk;
    for (std::int64_t j = to.first; j < to.first + to.count; ++j) sum += row[j];
  }
  return sum / static_cast<double>(from.count);
}

std::string missing_message(const Probe& probe, const models::ModelAttention& a, bool from_missing) {
  const std::string& name = from_missing ? probe.from : probe.to;
  std::string message = quote_value(name) + " is not a token or word of the " +
                        (probe.where.empty() ? "text" : "sentence");
  if (a.view.groups.size() > 1) message += from_missing ? " among any group's queries" : " among any group's keys";
  message += "; its tokens: " + token_list(a.tokens);
  for (const auto& g : a.view.groups) {
    const auto& list = from_missing ? g.query_tokens : g.key_tokens;
    if (list != a.tokens) message += std::string("; the ") + (from_missing ? "queries" : "keys") + " of the " +
                                     g.name + ": " + token_list(list);
  }
  return message;
}

// Refuses a name that is in no group as a usage error for --text (the option to change),
// and as a failure naming the line for --file (the file to change).
[[noreturn]] void refuse(const Probe& probe, const std::string& option, const std::string& message) {
  if (probe.where.empty()) throw UsageError(option, message);
  throw Error(probe.where + ": " + message);
}

ProbeResult probe_model(const models::Model& model, const Probe& probe) {
  models::AttentionRequest request;
  request.text = probe.text;
  models::ModelAttention a;
  try {
    a = model.attention(request);
  } catch (const Error& e) {
    throw Error((probe.where.empty() ? "--text" : probe.where) + ": " + e.what(), e.kind());
  }
  std::vector<std::vector<std::string>> queries, keys;
  for (const auto& g : a.view.groups) {
    queries.push_back(g.query_tokens);
    keys.push_back(g.key_tokens);
  }
  const TokenChoice from = parse_token_choice("--from", probe.from, queries);
  const TokenChoice to = parse_token_choice("--to", probe.to, keys);

  ProbeResult r;
  r.tokens = a.tokens;
  bool any_from = false, any_to = false;
  for (std::size_t k = 0; k < a.view.groups.size(); ++k) {
    const viz::AttentionGroup& g = a.view.groups[k];
    viz::AttentionGroup names;
    names.name = g.name;
    names.query_tokens = g.query_tokens;
    names.key_tokens = g.key_tokens;
    r.groups.push_back(std::move(names));
    GroupWeights w;
    w.group = k;
    w.from = word_span(g.query_tokens, from);
    w.to = word_span(g.key_tokens, to);
    any_from = any_from || w.from.found();
    any_to = any_to || w.to.found();
    if (!w.from.found() || !w.to.found()) {
      std::vector<std::string> missing;
      if (!w.from.found()) missing.push_back(quote_value(probe.from) + " is not among its queries");
      if (!w.to.found()) missing.push_back(quote_value(probe.to) + " is not among its keys");
      r.skipped.push_back({g.name, english_list(missing)});
      continue;
    }
    for (const Tensor& layer : g.layers) {
      const Tensor p = layer.to(DType::f32).contiguous();  // (H, Lq, Lk)
      std::vector<double> heads;
      for (std::int64_t h = 0; h < p.size(0); ++h)
        heads.push_back(weight(p.data_as<float>(), p.size(1), p.size(2), h, w.from, w.to));
      w.weights.push_back(std::move(heads));
    }
    r.found.push_back(std::move(w));
  }
  if (!any_from) refuse(probe, "--from", missing_message(probe, a, true));
  if (!any_to) refuse(probe, "--to", missing_message(probe, a, false));
  if (r.found.empty()) {
    std::string message = "no attention group has " + quote_value(probe.from) + " among its queries and " +
                          quote_value(probe.to) + " among its keys:";
    for (const Skipped& s : r.skipped) message += " the " + s.group + ": " + s.reason + ";";
    message.pop_back();
    refuse(probe, "--to", message);
  }
  return r;
}

// One head over every probe: its weight in each (NaN where its group was skipped).
struct HeadRow {
  std::string group;
  std::int64_t layer = 0, head = 0;
  std::vector<double> weights;  // per probe
  double mean = 0, min = 0, max = 0;
  std::int64_t count = 0;       // probes where its group had A and B
};

std::vector<HeadRow> rank_heads(const std::vector<ProbeResult>& results) {
  std::vector<HeadRow> rows;
  const double none = std::numeric_limits<double>::quiet_NaN();
  auto row_of = [&](const std::string& group, std::int64_t layer, std::int64_t head) -> HeadRow& {
    for (HeadRow& r : rows)
      if (r.group == group && r.layer == layer && r.head == head) return r;
    rows.push_back({group, layer, head, std::vector<double>(results.size(), none)});
    return rows.back();
  };
  for (std::size_t n = 0; n < results.size(); ++n)
    for (const GroupWeights& g : results[n].found)
      for (std::size_t l = 0; l < g.weights.size(); ++l)
        for (std::size_t h = 0; h < g.weights[l].size(); ++h)
          row_of(results[n].groups[g.group].name, static_cast<std::int64_t>(l), static_cast<std::int64_t>(h))
              .weights[n] = g.weights[l][h];
  for (HeadRow& r : rows) {
    double sum = 0;
    r.min = std::numeric_limits<double>::infinity();
    r.max = -r.min;
    for (double w : r.weights) {
      if (w != w) continue;  // NaN: skipped there
      sum += w;
      r.min = std::min(r.min, w);
      r.max = std::max(r.max, w);
      ++r.count;
    }
    r.mean = sum / static_cast<double>(r.count);
  }
  // Heaviest first; ties keep the order of groups, layers and heads.
  std::stable_sort(rows.begin(), rows.end(), [](const HeadRow& x, const HeadRow& y) { return x.mean > y.mean; });
  return rows;
}

std::string span_text(const std::vector<std::string>& tokens, TokenSpan s) {
  std::string t = s.count == 1 ? format("token %lld", static_cast<long long>(s.first))
                               : format("tokens %lld-%lld", static_cast<long long>(s.first),
                                        static_cast<long long>(s.first + s.count - 1));
  for (std::int64_t i = s.first; i < s.first + s.count; ++i)
    t += " " + quote_value(tokens[static_cast<std::size_t>(i)], 30);
  return t;
}

nlohmann::ordered_json probe_json(const Probe& probe, const ProbeResult& r) {
  nlohmann::ordered_json j;
  if (probe.line > 0) j["line"] = probe.line;
  j["text"] = probe.text;
  j["from"] = probe.from;
  j["to"] = probe.to;
  j["tokens"] = r.tokens;
  j["groups"] = nlohmann::ordered_json::array();
  for (const GroupWeights& w : r.found) {
    const viz::AttentionGroup& g = r.groups[w.group];
    nlohmann::ordered_json jg;
    jg["name"] = g.name;
    if (g.query_tokens != r.tokens) jg["query_tokens"] = g.query_tokens;
    if (g.key_tokens != r.tokens) jg["key_tokens"] = g.key_tokens;
    auto positions = [](TokenSpan s) {
      std::vector<std::int64_t> p;
      for (std::int64_t i = s.first; i < s.first + s.count; ++i) p.push_back(i);
      return p;
    };
    jg["from_positions"] = positions(w.from);  // query rows: their mean
    jg["to_positions"] = positions(w.to);      // key columns: their sum
    j["groups"].push_back(std::move(jg));
  }
  j["skipped"] = nlohmann::ordered_json::array();
  for (const Skipped& s : r.skipped) j["skipped"].push_back({{"group", s.group}, {"reason", s.reason}});
  return j;
}

void print_json(std::ostream& out, const models::Model& model, const HeadsOptions& o,
                const std::vector<Probe>& probes, const std::vector<ProbeResult>& results,
                const std::vector<HeadRow>& rows) {
  nlohmann::ordered_json j;
  j["model_type"] = model.model_type();
  j["description"] = model.description();
  if (o.has_file) j["file"] = o.file;
  j["probes"] = nlohmann::ordered_json::array();
  for (std::size_t n = 0; n < probes.size(); ++n) j["probes"].push_back(probe_json(probes[n], results[n]));
  j["heads"] = nlohmann::ordered_json::array();
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const HeadRow& r = rows[k];
    nlohmann::ordered_json h;
    h["rank"] = k + 1;
    h["group"] = r.group;
    h["layer"] = r.layer;
    h["head"] = r.head;
    h["weight"] = r.mean;  // the one weight with --text; the mean over the lines with --file
    if (o.has_file) {
      h["min"] = r.min;
      h["max"] = r.max;
      h["lines"] = r.count;
      nlohmann::ordered_json per = nlohmann::ordered_json::array();  // per probe; null where skipped
      for (double w : r.weights) per.push_back(w == w ? nlohmann::ordered_json(w) : nlohmann::ordered_json());
      h["weights"] = std::move(per);
    }
    j["heads"].push_back(std::move(h));
  }
  out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
}

void print_tokens(std::ostream& out, const std::vector<std::string>& tokens) {
  std::string line = "tokens (" + std::to_string(tokens.size()) + "):";
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    const std::string item = " " + std::to_string(k) + ":" + printable(tokens[k], 30);
    if (display_width(line) + display_width(item) > kMaxWidth) {
      out << line << '\n';
      line = "  ";
    }
    line += item;
  }
  out << line << '\n';
}

void print_text(std::ostream& out, const models::Model& model, const HeadsOptions& o,
                const std::vector<Probe>& probes, const std::vector<ProbeResult>& results,
                const std::vector<HeadRow>& rows) {
  out << "model: " << printable(o.model) << " (" << printable(model.description()) << ")\n";
  if (o.has_file) {
    out << "file: " << printable(o.file) << " (" << probes.size() << (probes.size() == 1 ? " line" : " lines")
        << "); the weight of each head is its mean over the lines\n";
  } else {
    const ProbeResult& r = results.front();
    out << "text: " << printable(o.text) << '\n';
    print_tokens(out, r.tokens);
    for (const GroupWeights& w : r.found) {
      const viz::AttentionGroup& g = r.groups[w.group];
      out << g.name << ": from " << span_text(g.query_tokens, w.from)
          << (w.from.count > 1 ? " (the mean of their rows)" : "") << " to " << span_text(g.key_tokens, w.to)
          << (w.to.count > 1 ? " (the sum of their columns)" : "") << '\n';
    }
  }
  std::vector<std::string> skipped;
  for (std::size_t n = 0; n < results.size(); ++n)
    for (const Skipped& s : results[n].skipped)
      skipped.push_back(s.group + (o.has_file ? format(" on line %lld", static_cast<long long>(probes[n].line)) : "") +
                        " (" + s.reason + ")");
  if (!skipped.empty()) {
    out << "skipped: ";
    for (std::size_t k = 0; k < skipped.size(); ++k) out << (k ? "; " : "") << printable(skipped[k]);
    out << '\n';
  }
  const std::size_t shown = o.top == 0 ? rows.size() : std::min(rows.size(), static_cast<std::size_t>(o.top));
  int width = 5;
  for (const HeadRow& r : rows) width = std::max(width, display_width(r.group));
  if (o.has_file) out << "\nthe heads by the mean weight each line's from puts on its to";
  else out << "\nthe heads by the weight " << quote_value(o.from) << " puts on " << quote_value(o.to);
  out << ", top " << shown << " of " << rows.size() << ":\n";
  out << "rank  " << pad_right("group", width) << "  layer  head  "
      << (o.has_file ? "  mean     min     max  lines" : "weight") << '\n';
  for (std::size_t k = 0; k < shown; ++k) {
    const HeadRow& r = rows[k];
    out << format("%4zu  ", k + 1) << pad_right(r.group, width)
        << format("  %5lld  %4lld  ", static_cast<long long>(r.layer), static_cast<long long>(r.head));
    if (o.has_file) out << format("%6.4f  %6.4f  %6.4f  %5lld", r.mean, r.min, r.max, static_cast<long long>(r.count));
    else out << format("%6.4f", r.mean);
    out << '\n';
  }
}

const char* input_words(models::AttentionInput input) {
  switch (input) {
    case models::AttentionInput::image: return "an image";
    case models::AttentionInput::user: return "a user's history";
    case models::AttentionInput::none: return "nothing (it has no attention)";
    case models::AttentionInput::text: break;
  }
  return "a text";
}

}  // namespace

int run_heads(const HeadsOptions& o, std::ostream& out) {
  if (o.has_text == o.has_file)
    throw UsageError(o.has_text ? "--file" : "--text",
                     o.has_text ? "give --text (with --from and --to) or --file, not both"
                                : "give --text with --from and --to, or --file");
  if (o.has_file && (o.has_from || o.has_to))
    throw UsageError(o.has_from ? "--from" : "--to", "is for --text; each line of --file names its own pair");
  if (o.has_text && !o.has_from) throw UsageError("--from", "give the token or word of --text that attends");
  if (o.has_text && !o.has_to) throw UsageError("--to", "give the token or word of --text attended to");
  const std::unique_ptr<models::Model> model = models::load_model(o.model);
  if (model->attention_input() != models::AttentionInput::text)
    throw UsageError("--model", "qkv heads takes text models only (bert, gpt2, use_lite, qkv-seq2seq); " +
                                    quote_value(o.model) + " is " + model->model_type() + ", whose input is " +
                                    input_words(model->attention_input()));
  const std::vector<Probe> probes = o.has_file ? read_probes(o.file) : std::vector<Probe>{{o.text, o.from, o.to, 0, ""}};
  std::vector<ProbeResult> results;
  for (const Probe& p : probes) results.push_back(probe_model(*model, p));
  const std::vector<HeadRow> rows = rank_heads(results);
  if (o.json) print_json(out, *model, o, probes, results, rows);
  else print_text(out, *model, o, probes, results, rows);
  return 0;
}

}  // namespace qkv::cli
