// rank_heads (qkv/heads.h): each probe's attention from the model registry, A and B found by
// token_choice.h's matcher in each group, every head's weight, then the heads over the probes.
#include "qkv/heads.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "models/token_choice.h"
#include "text/unicode.h"

namespace qkv::models {
namespace {

using text::quote_value;

// The weight of a head, for a split word (Clark et al. 2019): the mean over A's rows of the
// sum over B's columns. p: one layer (H, Lq, Lk), contiguous f32.
double weight(const float* p, std::int64_t Lq, std::int64_t Lk, std::int64_t head, TokenSpan from, TokenSpan to) {
  double sum = 0;
  for (std::int64_t i = from.first; i < from.first + from.count; ++i) {
    const float* row = p + (head * Lq + i) * Lk;
    for (std::int64_t j = to.first; j < to.first + to.count; ++j) sum += row[j];
  }
  return sum / static_cast<double>(from.count);
}

std::string missing_message(const HeadProbe& probe, const ModelAttention& a, bool from_missing) {
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

// A refusal of one probe, led by where it came from.
[[noreturn]] void refuse(const HeadProbe& probe, HeadsInput input, const std::string& message,
                         ErrorKind kind = ErrorKind::value) {
  throw HeadsError(input, probe.where.empty() ? message : probe.where + ": " + message, kind);
}

TokenChoice choice(const HeadProbe& probe, HeadsInput input, const std::vector<std::vector<std::string>>& lists) {
  try {
    return parse_token_choice(input == HeadsInput::from ? probe.from : probe.to, lists);
  } catch (const Error& e) {
    refuse(probe, input, e.what(), e.kind());
  }
}

std::vector<std::int64_t> positions(TokenSpan s) {
  std::vector<std::int64_t> p;
  for (std::int64_t i = s.first; i < s.first + s.count; ++i) p.push_back(i);
  return p;
}

HeadProbeResult probe_model(const Model& model, const HeadProbe& probe) {
  AttentionRequest request;
  request.text = probe.text;
  ModelAttention a;
  try {
    a = model.attention(request);
  } catch (const Error& e) {
    refuse(probe, HeadsInput::text, e.what(), e.kind());
  }
  std::vector<std::vector<std::string>> queries, keys;
  for (const auto& g : a.view.groups) {
    queries.push_back(g.query_tokens);
    keys.push_back(g.key_tokens);
  }
  const TokenChoice from = choice(probe, HeadsInput::from, queries);
  const TokenChoice to = choice(probe, HeadsInput::to, keys);

  HeadProbeResult r;
  r.tokens = a.tokens;
  bool any_from = false, any_to = false;
  for (const viz::AttentionGroup& g : a.view.groups) {
    const TokenSpan from_span = word_span(g.query_tokens, from), to_span = word_span(g.key_tokens, to);
    any_from = any_from || from_span.found();
    any_to = any_to || to_span.found();
    if (!from_span.found() || !to_span.found()) {
      std::string reason;
      if (!from_span.found()) reason = quote_value(probe.from) + " is not among its queries";
      if (!to_span.found()) reason += (reason.empty() ? "" : " and ") + quote_value(probe.to) + " is not among its keys";
      r.skipped.push_back({g.name, reason});
      continue;
    }
    HeadProbeGroup w{g.name, g.query_tokens, g.key_tokens, positions(from_span), positions(to_span), {}};
    for (const Tensor& layer : g.layers) {
      const Tensor p = layer.to(DType::f32).contiguous();  // (H, Lq, Lk)
      std::vector<double> heads;
      for (std::int64_t h = 0; h < p.size(0); ++h)
        heads.push_back(weight(p.data_as<float>(), p.size(1), p.size(2), h, from_span, to_span));
      w.weights.push_back(std::move(heads));
    }
    r.groups.push_back(std::move(w));
  }
  if (!any_from) refuse(probe, HeadsInput::from, missing_message(probe, a, true));
  if (!any_to) refuse(probe, HeadsInput::to, missing_message(probe, a, false));
  if (r.groups.empty()) {
    std::string message = "no attention group has " + quote_value(probe.from) + " among its queries and " +
                          quote_value(probe.to) + " among its keys:";
    for (const HeadProbeSkip& s : r.skipped) message += " the " + s.group + ": " + s.reason + ";";
    message.pop_back();
    refuse(probe, HeadsInput::to, message);
  }
  return r;
}

std::vector<HeadWeights> rank(const std::vector<HeadProbeResult>& results) {
  std::vector<HeadWeights> rows;
  const double none = std::numeric_limits<double>::quiet_NaN();
  auto row_of = [&](const std::string& group, std::int64_t layer, std::int64_t head) -> HeadWeights& {
    for (HeadWeights& r : rows)
      if (r.group == group && r.layer == layer && r.head == head) return r;
    rows.push_back({group, layer, head, std::vector<double>(results.size(), none)});
    return rows.back();
  };
  for (std::size_t n = 0; n < results.size(); ++n)
    for (const HeadProbeGroup& g : results[n].groups)
      for (std::size_t l = 0; l < g.weights.size(); ++l)
        for (std::size_t h = 0; h < g.weights[l].size(); ++h)
          row_of(g.name, static_cast<std::int64_t>(l), static_cast<std::int64_t>(h)).weights[n] = g.weights[l][h];
  for (HeadWeights& r : rows) {
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
  std::stable_sort(rows.begin(), rows.end(), [](const HeadWeights& x, const HeadWeights& y) { return x.mean > y.mean; });
  return rows;
}

}  // namespace

HeadRanking rank_heads(const Model& model, const std::vector<HeadProbe>& probes) {
  if (model.attention_input() != AttentionInput::text)
    throw HeadsError(HeadsInput::model, "qkv heads takes text models only (bert, gpt2, use_lite, qkv-seq2seq); the "
                                        "model is " + model.model_type() + ", whose input is " +
                                        describe(model.attention_input()));
  if (probes.empty()) throw HeadsError(HeadsInput::text, "give at least one probe (a text, its A and its B)");
  HeadRanking ranking;
  for (const HeadProbe& p : probes) ranking.probes.push_back(probe_model(model, p));
  ranking.heads = rank(ranking.probes);
  return ranking;
}

}  // namespace qkv::models
