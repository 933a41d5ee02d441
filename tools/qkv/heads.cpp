// qkv heads: every layer and head of a text model (every attention group of it) ranked by
// the weight a token or word A of a text puts on a token or word B — the probing of Clark et
// al. 2019, "What does BERT look at?" (§3: a word split into several tokens attends with
// the mean of its tokens' rows and is attended to with the sum of its tokens' columns).
// With --file, each line a sentence and its pair, the heads are ranked by their mean
// weight over the lines. The ranking is the library's (qkv/heads.h, Python's qkv.heads too);
// here: the options, --file and the output.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "io/text_input.h"
#include "print.h"
#include "qkv/error.h"
#include "qkv/heads.h"
#include "qkv/model_registry.h"

namespace qkv::cli {
namespace {

using models::HeadProbe;
using models::HeadProbeGroup;
using models::HeadRanking;
using models::HeadWeights;

// One sentence and its pair: from --text/--from/--to, or one line of --file.
struct Probe {
  HeadProbe probe;        // probe.where: "--file 'f' line 3" for messages; "" for --text
  std::int64_t line = 0;  // of --file, from 1; 0 for --text
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
    probes.push_back({{fields[0], fields[1], fields[2], reader.where()}, reader.line_number()});
  }
  if (probes.empty())
    throw Error(reader.name() + " holds no line sentence<TAB>from<TAB>to (blank lines and lines "
                "starting with '#' are skipped)");
  return probes;
}

// positions: consecutive, at least one.
std::string span_text(const std::vector<std::string>& tokens, const std::vector<std::int64_t>& positions) {
  std::string t = positions.size() == 1 ? format("token %lld", static_cast<long long>(positions.front()))
                                        : format("tokens %lld-%lld", static_cast<long long>(positions.front()),
                                                 static_cast<long long>(positions.back()));
  for (std::int64_t i : positions) t += " " + quote_value(tokens[static_cast<std::size_t>(i)], 30);
  return t;
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
                const std::vector<Probe>& probes, const HeadRanking& ranking) {
  out << "model: " << printable(o.model) << " (" << printable(model.description()) << ")\n";
  if (o.has_file) {
    out << "file: " << printable(o.file) << " (" << probes.size() << (probes.size() == 1 ? " line" : " lines")
        << "); the weight of each head is its mean over the lines\n";
  } else {
    const models::HeadProbeResult& r = ranking.probes.front();
    out << "text: " << printable(o.text) << '\n';
    print_tokens(out, r.tokens);
    for (const HeadProbeGroup& g : r.groups)
      out << g.name << ": from " << span_text(g.query_tokens, g.from_positions)
          << (g.from_positions.size() > 1 ? " (the mean of their rows)" : "") << " to "
          << span_text(g.key_tokens, g.to_positions) << (g.to_positions.size() > 1 ? " (the sum of their columns)" : "")
          << '\n';
  }
  std::vector<std::string> skipped;
  for (std::size_t n = 0; n < ranking.probes.size(); ++n)
    for (const models::HeadProbeSkip& s : ranking.probes[n].skipped)
      skipped.push_back(s.group + (o.has_file ? format(" on line %lld", static_cast<long long>(probes[n].line)) : "") +
                        " (" + s.reason + ")");
  if (!skipped.empty()) {
    out << "skipped: ";
    for (std::size_t k = 0; k < skipped.size(); ++k) out << (k ? "; " : "") << printable(skipped[k]);
    out << '\n';
  }
  const std::vector<HeadWeights>& rows = ranking.heads;
  const std::size_t shown = o.top == 0 ? rows.size() : std::min(rows.size(), static_cast<std::size_t>(o.top));
  int width = 5;
  for (const HeadWeights& r : rows) width = std::max(width, display_width(r.group));
  if (o.has_file) out << "\nthe heads by the mean weight each line's from puts on its to";
  else out << "\nthe heads by the weight " << quote_value(o.from) << " puts on " << quote_value(o.to);
  out << ", top " << shown << " of " << rows.size() << ":\n";
  out << "rank  " << pad_right("group", width) << "  layer  head  "
      << (o.has_file ? "  mean     min     max  lines" : "weight") << '\n';
  for (std::size_t k = 0; k < shown; ++k) {
    const HeadWeights& r = rows[k];
    out << format("%4zu  ", k + 1) << pad_right(r.group, width)
        << format("  %5lld  %4lld  ", static_cast<long long>(r.layer), static_cast<long long>(r.head));
    if (o.has_file) out << format("%6.4f  %6.4f  %6.4f  %5lld", r.mean, r.min, r.max, static_cast<long long>(r.count));
    else out << format("%6.4f", r.mean);
    out << '\n';
  }
}

// The library's refusals as `qkv heads` reports them: for --text, a usage error of the
// option to change (exit 2), or a failure of --text's input (exit 1); a --file line's are
// failures naming the line (the probe's `where`) already.
[[noreturn]] void report(const models::HeadsError& e, bool text) {
  if (e.input() == models::HeadsInput::model) throw UsageError("--model", e.what());
  if (!text) throw;
  switch (e.input()) {
    case models::HeadsInput::from: throw UsageError("--from", e.what());
    case models::HeadsInput::to: throw UsageError("--to", e.what());
    default: throw Error(std::string("--text: ") + e.what(), e.kind());
  }
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
  const std::vector<Probe> probes = o.has_file ? read_probes(o.file) : std::vector<Probe>{{{o.text, o.from, o.to, ""}, 0}};
  std::vector<HeadProbe> asked;
  for (const Probe& p : probes) asked.push_back(p.probe);
  HeadRanking ranking;
  try {
    ranking = models::rank_heads(*model, asked);
  } catch (const models::HeadsError& e) {
    report(e, o.has_text);
  }
  if (o.json) {
    models::HeadsJsonOptions j;
    j.per_probe = o.has_file;
    if (o.has_file) j.file = o.file;
    for (const Probe& p : probes)
      if (p.line > 0) j.lines.push_back(p.line);
    out << models::heads_json(*model, asked, ranking, j) << '\n';
  } else {
    print_text(out, *model, o, probes, ranking);
  }
  return 0;
}

}  // namespace qkv::cli
