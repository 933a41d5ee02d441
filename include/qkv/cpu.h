// What this CPU can do, detected once at run time (cpuid + xgetbv; AMX also asks
// Linux for permission to use the tile state). Kernels are chosen from this, never
// from compile-time flags, so one binary runs on every x86-64 machine.
#pragma once

#include <cstdint>
#include <string>

namespace qkv {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;  // 64-bit lane multiplies (vpmullq): dropout's counter hash
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool amx_tile = false;  // tiles usable: cpuid bit and OS permission granted
  bool amx_bf16 = false;
  std::string brand;  // e.g. "AMD EPYC 9R14" (empty where cpuid has none)
};

const CpuFeatures& cpu_features();
// One line: the brand and the feature names that are present.
std::string cpu_summary();

// The 64-byte operand of LDTILECFG (palette 1), for code that uses AMX tiles where
// cpu_features().amx_tile says so. qkv's tile code gives all eight tiles one shape.
struct alignas(64) AmxTileConfig {
  std::uint8_t palette_id = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};  // bytes per row of tile t
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

// Every tile `rows` rows of `row_bytes` bytes (at most 16 and 64).
constexpr AmxTileConfig amx_uniform_tile_config(std::uint8_t rows, std::uint16_t row_bytes) {
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = rows;
    config.colsb[t] = row_bytes;
  }
  return config;
}

}  // namespace qkv
