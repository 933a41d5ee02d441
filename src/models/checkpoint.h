// What every model loader checks of a checkpoint beyond names and shapes: that the weights
// it reads are finite, and which of the file's tensors it did not read. Internal to
// src/models (bert.cpp, gpt2.cpp, seq2seq.cpp) and the applications under apps/ (their
// model loaders). The training checkpoint is the training loop's (src/train/checkpoint.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "io/json_config.h"
#include "qkv/safetensors.h"
#include "qkv/tensor.h"

namespace qkv::models::detail {

// Sizes in a config.json are at most 2^31 - 1: every real checkpoint's are far below, and
// products of two of them (the shapes the loaders check) then cannot overflow.
inline constexpr std::int64_t kMaxConfigSize = 2147483647;

// json[key], an integer in [1, kMaxConfigSize] (qkv::Error naming the file and the key).
std::int64_t config_size(const JsonConfig& json, const std::string& key);

// Throws qkv::Error naming `label` (the checkpoint), the tensor `name` and the index of its
// first NaN or ±inf. A weight that is not finite makes every output it reaches NaN: a
// diverged or corrupt checkpoint, refused at load rather than answered with. `t` is f32.
void check_finite(const Tensor& t, const std::string& label, const std::string& name);

// A run of numbered blocks in a checkpoint: tensors named prefix + "<n>." + ..., of which
// the model uses n < count (config.json's `key`).
struct Blocks {
  std::string prefix;  // e.g. "h." or "transformer.encoder.layers."
  std::int64_t count;
  std::string key;     // the config key that sets count, for the message
};

// The names of `tensors` that are not in `read` and that `ignored` does not accept, sorted.
// A tensor of a block numbered count or more is an error instead: the checkpoint has more
// layers than the config says, and running only some of them would give wrong answers.
std::vector<std::string> unused_tensors(const SafeTensors& tensors,
                                        const std::set<std::string>& read,
                                        const std::function<bool(const std::string&)>& ignored,
                                        const std::vector<Blocks>& blocks,
                                        const std::string& label);

}  // namespace qkv::models::detail
