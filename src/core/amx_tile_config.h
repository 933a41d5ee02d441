// The 64-byte operand of LDTILECFG (palette 1), for code that uses AMX tiles where
// cpu_features().amx_tile says so: the amx kernel variants (attention/kernels/amx_tiles.inc)
// and bench/ceilings.cpp. Internal: no public function takes or returns a tile
// configuration. qkv's tile code gives all eight tiles one shape.
#pragma once

#include <cstdint>

namespace qkv {

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
