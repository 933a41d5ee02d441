#pragma once

namespace qkv {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace qkv
