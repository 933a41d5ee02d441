// GPT-2's byte-level alphabet and pre-tokenization. Internal to src/text.
#pragma once

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

namespace qkv::text {

// bytes_to_unicode(): printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand for themselves; the other
// 68 bytes, in increasing order, become U+0100 + n so that no byte maps to whitespace or
// a control character. Sorted by code point, the 256 characters are in GPT-2's vocabulary
// order (ids 0..255 of its vocab.json).
struct ByteTable {
  std::array<char32_t, 256> to_char{};
  std::array<int, 324> to_byte{};  // code point -> byte, -1 if none; all chars are < 256 + 68
  ByteTable();
};
const ByteTable& byte_table();

// GPT-2's pre-tokenization regex, matched by hand over code points:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Returns [begin, end) code point ranges covering cps.
std::vector<std::pair<std::size_t, std::size_t>> gpt2_split(const std::vector<char32_t>& cps);

}  // namespace qkv::text
