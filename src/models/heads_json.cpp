// heads_json (qkv/heads.h): a ranking as `qkv heads --json` writes it and qkv.heads returns it.
#include <nlohmann/json.hpp>

#include "qkv/heads.h"

namespace qkv::models {
namespace {

nlohmann::ordered_json probe_json(const HeadProbe& probe, const HeadProbeResult& r) {
  nlohmann::ordered_json j;
  j["text"] = probe.text;
  j["from"] = probe.from;
  j["to"] = probe.to;
  j["tokens"] = r.tokens;
  j["groups"] = nlohmann::ordered_json::array();
  for (const HeadProbeGroup& g : r.groups) {
    nlohmann::ordered_json jg;
    jg["name"] = g.name;
    if (g.query_tokens != r.tokens) jg["query_tokens"] = g.query_tokens;
    if (g.key_tokens != r.tokens) jg["key_tokens"] = g.key_tokens;
    jg["from_positions"] = g.from_positions;  // query rows: their mean
    jg["to_positions"] = g.to_positions;      // key columns: their sum
    j["groups"].push_back(std::move(jg));
  }
  j["skipped"] = nlohmann::ordered_json::array();
  for (const HeadProbeSkip& s : r.skipped) j["skipped"].push_back({{"group", s.group}, {"reason", s.reason}});
  return j;
}

}  // namespace

std::string heads_json(const Model& model, const std::vector<HeadProbe>& probes, const HeadRanking& ranking,
                       const HeadsJsonOptions& options) {
  QKV_CHECK(probes.size() == ranking.probes.size() && (options.lines.empty() || options.lines.size() == probes.size()),
            "heads_json: " << probes.size() << " probes, " << ranking.probes.size() << " results and "
                           << options.lines.size() << " lines do not belong together");
  nlohmann::ordered_json j;
  j["model_type"] = model.model_type();
  j["description"] = model.description();
  if (!options.file.empty()) j["file"] = options.file;
  j["probes"] = nlohmann::ordered_json::array();
  for (std::size_t n = 0; n < probes.size(); ++n) {
    nlohmann::ordered_json p;
    if (!options.lines.empty()) p["line"] = options.lines[n];
    p.update(probe_json(probes[n], ranking.probes[n]));
    j["probes"].push_back(std::move(p));
  }
  j["heads"] = nlohmann::ordered_json::array();
  for (std::size_t k = 0; k < ranking.heads.size(); ++k) {
    const HeadWeights& r = ranking.heads[k];
    nlohmann::ordered_json h;
    h["rank"] = k + 1;
    h["group"] = r.group;
    h["layer"] = r.layer;
    h["head"] = r.head;
    h["weight"] = r.mean;  // the one weight of a lone probe; the mean over several
    if (options.per_probe) {
      h["min"] = r.min;
      h["max"] = r.max;
      h["lines"] = r.count;
      nlohmann::ordered_json per = nlohmann::ordered_json::array();  // per probe; null where skipped
      for (double w : r.weights) per.push_back(w == w ? nlohmann::ordered_json(w) : nlohmann::ordered_json());
      h["weights"] = std::move(per);
    }
    j["heads"].push_back(std::move(h));
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace qkv::models
