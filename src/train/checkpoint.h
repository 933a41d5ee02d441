// The training loop's checkpoint (qkv/trainer.h): one safetensors file holding
//   <name>                      the weights, under the task's parameter names
//   optimizer.<name>.exp_avg    AdamW's first and second moments
//   optimizer.<name>.exp_avg_sq
//   best.<name>                 the weights of the best evaluation, when the loop keeps them
// and the metadata
//   qkv_checkpoint = "training", task, step, evaluations ([[step, score], ...] as JSON),
//   run.<key> for every key of the run's identity.
// Internal to src/train.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/nn.h"
#include "qkv/tensor.h"
#include "qkv/train.h"
#include "qkv/trainer.h"

namespace qkv::train {

// [[step, score], ...]: the evaluations as the checkpoint's metadata and the result's JSON hold them.
nlohmann::json evaluations_json(const std::vector<Evaluation>& evaluations);

struct TrainingCheckpoint {
  std::int64_t step = 0;
  std::vector<Evaluation> evaluations;
  std::vector<Tensor> best;  // in the parameters' order; empty = none
};

// Written through the one atomic writer (save_safetensors -> AtomicFile): a kill or a full
// disk leaves the previous checkpoint whole. Creates the file's directory.
void write_checkpoint_file(const std::string& path, const std::string& task,
                           const std::map<std::string, std::string>& identity,
                           const nn::ParameterList& parameters, const AdamW& opt,
                           const TrainingCheckpoint& checkpoint);

// Reads a checkpoint back: the weights into `parameters`, the moments and step into `opt`,
// the rest returned. qkv::Error, naming the file, for one that is missing, damaged (not
// safetensors, a tensor missing or of another shape, a step that is not a count), of
// another task, or of a run whose identity differs from `identity` (every key that differs
// named, with both values).
TrainingCheckpoint read_checkpoint(const std::string& path, const std::string& task,
                                   const std::map<std::string, std::string>& identity,
                                   const nn::ParameterList& parameters, AdamW& opt);

}  // namespace qkv::train
