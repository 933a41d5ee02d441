// The training loop's checkpoint file (train/checkpoint.h).
#include "train/checkpoint.h"

#include <charconv>
#include <filesystem>

#include "io/json_bounded.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"

namespace qkv::train {

namespace {

constexpr const char* kMarker = "qkv_checkpoint";

// Two values of one identity key for a message: whole when short, else each around the
// first place they differ (a model's configuration: ...,"dim":16,"heads"... / ...,"dim":8,...).
std::pair<std::string, std::string> briefs(const std::string& a, const std::string& b) {
  const bool whole = a.size() <= 60 && b.size() <= 60;
  std::size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  const std::size_t from = whole || at <= 24 ? 0 : at - 24;
  const auto cut = [&](const std::string& v) {
    const std::string part = whole ? v : v.substr(std::min(from, v.size()), 48);
    std::string quoted = "'";
    if (from > 0) quoted += "...";
    quoted += part;
    if (from + part.size() < v.size()) quoted += "...";
    quoted += '\'';
    return quoted;
  };
  return {cut(a), cut(b)};
}

std::int64_t count_of(const std::string& text, const std::string& path, const char* key) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  QKV_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= 0,
            path << ": metadata \"" << key << "\" must be a count >= 0, got \"" << text << "\"");
  return v;
}

}  // namespace

nlohmann::json evaluations_json(const std::vector<Evaluation>& evaluations) {
  nlohmann::json e = nlohmann::json::array();
  for (const Evaluation& x : evaluations) e.push_back({x.step, x.score});
  return e;
}

void write_checkpoint_file(const std::string& path, const std::string& task,
                           const std::map<std::string, std::string>& identity,
                           const nn::ParameterList& parameters, const AdamW& opt,
                           const TrainingCheckpoint& ck) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : parameters) tensors.emplace_back(name, *t);
  for (auto& [name, t] : opt.state()) tensors.emplace_back("optimizer." + name, t);
  for (std::size_t i = 0; i < ck.best.size(); ++i) tensors.emplace_back("best." + parameters[i].first, ck.best[i]);
  std::map<std::string, std::string> meta;
  meta[kMarker] = "training";
  meta["task"] = task;
  meta["step"] = std::to_string(ck.step);
  meta["evaluations"] = evaluations_json(ck.evaluations).dump();
  for (const auto& [key, value] : identity) meta["run." + key] = value;
  save_safetensors(path, tensors, meta);
}

TrainingCheckpoint read_checkpoint(const std::string& path, const std::string& task,
                                   const std::map<std::string, std::string>& identity,
                                   const nn::ParameterList& parameters, AdamW& opt) {
  QKV_CHECK(std::filesystem::exists(path), "train " << task << ": --resume: no checkpoint at " << path);
  const SafeTensors ck = SafeTensors::open(path);
  const auto& meta = ck.metadata();
  QKV_CHECK(meta.count(kMarker) && meta.at(kMarker) == "training" && meta.count("task") && meta.count("step"),
            path << ": not a qkv training checkpoint (its metadata has no qkv_checkpoint, task and step; "
                    "one written by an older qkv cannot be resumed: train again without --resume)");
  QKV_CHECK(meta.at("task") == task, path << ": is a checkpoint of 'qkv train " << meta.at("task")
                                           << "', not of 'qkv train " << task << "'");
  std::string differ;
  for (const auto& [key, value] : identity) {
    const auto it = meta.find("run." + key);
    if (it != meta.end() && it->second == value) continue;
    const auto [there, now] = briefs(it == meta.end() ? std::string("(none)") : it->second, value);
    differ += (differ.empty() ? "" : "; ") + key + " " + there + " there, " + now + " now";
  }
  QKV_CHECK(differ.empty(), path << ": was written by a run with other options (" << differ
                                 << "); resume with the options it was started with, or train again without --resume");
  TrainingCheckpoint out;
  out.step = count_of(meta.at("step"), path, "step");
  nn::StateDict state, best;
  for (const auto& [name, t] : parameters) {
    QKV_CHECK(ck.contains(name), path << ": no tensor '" << name << "' (a damaged checkpoint?)");
    state[name] = ck.get(name).to(DType::f32).contiguous();
    if (ck.contains("best." + name)) best[name] = ck.get("best." + name).to(DType::f32).contiguous();
  }
  nn::load_state_dict(parameters, state);
  QKV_CHECK(best.empty() || best.size() == parameters.size(), path << ": holds the best weights of only some parameters");
  for (const auto& [name, t] : parameters) {
    if (best.empty()) break;
    const Tensor& b = best.at(name);
    QKV_CHECK(b.shape() == t->shape(), path << ": 'best." << name << "' must be " << t->shape_string() << ", got "
                                            << b.shape_string());
    out.best.push_back(b);
  }
  std::vector<std::pair<std::string, Tensor>> moments;
  for (const auto& name : ck.names())
    if (name.starts_with("optimizer.")) moments.emplace_back(name.substr(10), ck.get(name).to(DType::f32).contiguous());
  opt.load_state(moments, out.step);
  const nlohmann::json e = io::parse_json(meta.count("evaluations") ? meta.at("evaluations") : std::string("[]"),
                                          path + ": evaluations", false);
  QKV_CHECK(e.is_array(), path << ": metadata \"evaluations\" is not a JSON array");
  for (const auto& x : e) {
    QKV_CHECK(x.is_array() && x.size() == 2 && x[0].is_number_integer() && x[1].is_number(),
              path << ": metadata \"evaluations\" must be [[step, score], ...]");
    out.evaluations.push_back({x[0].get<std::int64_t>(), x[1].get<double>()});
  }
  return out;
}

}  // namespace qkv::train
