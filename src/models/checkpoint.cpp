// Checks shared by the model loaders (models/checkpoint.h).
#include "models/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qkv/error.h"

namespace qkv::models::detail {

namespace {

// The first element of p[0, n) whose exponent bits are all ones (±inf, NaN), or -1. The
// inner test is a compare and an OR on integer lanes, which the compiler vectorises with
// the baseline instruction set; blocks end the scan soon after a bad value.
std::int64_t first_non_finite(const float* p, std::int64_t n) {
  constexpr std::uint32_t kExponent = 0x7f800000u;
  constexpr std::int64_t kBlock = 4096;
  for (std::int64_t begin = 0; begin < n; begin += kBlock) {
    const std::int64_t end = std::min(n, begin + kBlock);
    std::uint32_t bad = 0;
    for (std::int64_t i = begin; i < end; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, p + i, sizeof bits);
      bad |= static_cast<std::uint32_t>((bits & kExponent) == kExponent);
    }
    if (bad != 0)
      for (std::int64_t i = begin; i < end; ++i)
        if (!std::isfinite(p[i])) return i;
  }
  return -1;
}

std::string index_text(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (std::size_t d = 0; d < index.size(); ++d) s += (d ? ", " : "") + std::to_string(index[d]);
  return s + "]";
}

// The number after `prefix` in `name` when name is prefix + digits + ".", else -1.
std::int64_t block_number(const std::string& name, const std::string& prefix) {
  if (!name.starts_with(prefix)) return -1;
  std::size_t i = prefix.size();
  std::int64_t n = 0;
  const std::size_t first = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - first < 18)
    n = n * 10 + (name[i++] - '0');
  if (i == first || i >= name.size() || name[i] != '.') return -1;
  return n;
}

}  // namespace

void check_finite(const Tensor& t, const std::string& label, const std::string& name) {
  const Tensor c = t.contiguous();
  const std::int64_t bad = first_non_finite(c.data_as<float>(), c.numel());
  if (bad < 0) return;
  const float value = c.data_as<float>()[bad];
  const char* what = std::isnan(value) ? "NaN" : value > 0 ? "+inf" : "-inf";
  throw Error(label + ": tensor '" + name + "' holds " + what + " at index " +
              index_text(bad, c.shape()) + " (shape " + shape_to_string(c.shape()) +
              "); the weights must be finite (is the checkpoint corrupt, or saved from a run "
              "that diverged?)");
}

std::vector<std::string> unused_tensors(const SafeTensors& tensors,
                                        const std::set<std::string>& read,
                                        const std::function<bool(const std::string&)>& ignored,
                                        const std::vector<Blocks>& blocks,
                                        const std::string& label) {
  std::vector<std::string> unused;
  for (const std::string& name : tensors.names()) {  // sorted
    if (read.count(name) != 0) continue;
    for (const Blocks& b : blocks) {
      const std::int64_t n = block_number(name, b.prefix);
      QKV_CHECK(n < b.count,
                label << ": the checkpoint has tensor '" << name << "' of block " << n
                      << ", but config.json's " << b.key << " = " << b.count
                      << " (blocks 0.." << b.count - 1
                      << "); the config and the weights do not belong together");
    }
    if (ignored && ignored(name)) continue;
    unused.push_back(name);
  }
  return unused;
}

std::int64_t config_size(const JsonConfig& json, const std::string& key) {
  const std::int64_t v = json.get_int(key);
  QKV_CHECK(v > 0 && v <= kMaxConfigSize, json.label() << ": \"" << key
                                                      << "\" must be an integer in [1, "
                                                      << kMaxConfigSize << "], got " << v);
  return v;
}

}  // namespace qkv::models::detail
