// torch-style state dicts (load_state_dict, state_dict) and the seeded initialisation the
// module constructors share.

#include <set>

#include "nn/common.h"
#include "qkv/rng.h"

namespace qkv::nn {

namespace detail {

void fill_uniform(Tensor& t, double bound, std::uint64_t seed) {
  Rng rng(seed);
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
}

}  // namespace detail

void load_state_dict(const ParameterList& parameters, const StateDict& state, bool strict) {
  std::set<std::string> used;
  for (const auto& [name, param] : parameters) {
    auto it = state.find(name);
    QKV_CHECK(it != state.end(), "load_state_dict: missing parameter '" << name << "' of shape "
                                                                       << param->shape_string());
    const Tensor& src = it->second;
    QKV_CHECK(src.defined(), "load_state_dict: parameter '" << name << "' is undefined");
    QKV_CHECK_TYPE(src.dtype() != DType::boolean,
                   "load_state_dict: parameter '" << name << "' must be floating, got bool");
    QKV_CHECK(src.shape() == param->shape(),
              "load_state_dict: parameter '" << name << "' must have shape "
                                             << param->shape_string() << ", got "
                                             << src.shape_string());
    // A fresh allocation, so layers that were copied from one another (and so share
    // storage) do not change together.
    Tensor fresh = Tensor::empty(param->shape());
    fresh.copy_from(src);
    *param = fresh;
    used.insert(name);
  }
  if (strict) {
    for (const auto& [name, tensor] : state)
      QKV_CHECK(used.count(name), "load_state_dict: unexpected entry '" << name
                                                                        << "' matches no parameter");
  }
}

StateDict state_dict(const ParameterList& parameters) {
  StateDict state;
  for (const auto& [name, param] : parameters) state.emplace(name, *param);
  return state;
}

}  // namespace qkv::nn
