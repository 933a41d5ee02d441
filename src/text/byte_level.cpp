// GPT-2's byte-level alphabet and pre-tokenization (openai/gpt-2 src/encoder.py), shared by
// the tokenizer (bpe.cpp) and the trainer (bpe_trainer.cpp).
#include "text/byte_level.h"

#include "text/unicode.h"

namespace qkv::text {

ByteTable::ByteTable() {
  to_byte.fill(-1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    to_byte[to_char[b]] = b;
  }
}

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

std::vector<std::pair<std::size_t, std::size_t>> gpt2_split(const std::vector<char32_t>& cps) {
  const auto is_other = [](char32_t c) {
    return !is_regex_space(c) && !is_letter(c) && !is_number(c);
  };
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  const std::size_t n = cps.size();
  std::size_t i = 0;
  while (i < n) {
    const std::size_t begin = i;
    // Contractions (case-sensitive, as GPT-2's pattern).
    if (cps[i] == U'\'' && i + 1 < n) {
      const char32_t c1 = cps[i + 1], c2 = i + 2 < n ? cps[i + 2] : 0;
      std::size_t len = 0;
      if (c1 == U's' || c1 == U't' || c1 == U'm' || c1 == U'd')
        len = 2;
      else if ((c1 == U'r' && c2 == U'e') || (c1 == U'v' && c2 == U'e') ||
               (c1 == U'l' && c2 == U'l'))
        len = 3;
      if (len != 0) {
        pieces.emplace_back(begin, begin + len);
        i = begin + len;
        continue;
      }
    }
    // " ?X+" for X in {\p{L}, \p{N}, [^\s\p{L}\p{N}]}: an optional leading U+0020.
    const std::size_t s = (cps[i] == U' ' && i + 1 < n) ? i + 1 : i;
    bool matched = false;
    for (auto cls :
         {+[](char32_t c) { return is_letter(c); }, +[](char32_t c) { return is_number(c); }}) {
      if (!matched && cls(cps[s])) {
        std::size_t j = s;
        while (j < n && cls(cps[j])) ++j;
        pieces.emplace_back(begin, j);
        i = j;
        matched = true;
      }
    }
    if (!matched && is_other(cps[s])) {
      std::size_t j = s;
      while (j < n && is_other(cps[j])) ++j;
      pieces.emplace_back(begin, j);
      i = j;
      matched = true;
    }
    if (matched) continue;
    // cps[i] is whitespace. \s+(?!\S): the run, less its last character when a non-space
    // follows (that character then leads the next piece, e.g. " world"); \s+ otherwise.
    std::size_t j = i;
    while (j < n && is_regex_space(cps[j])) ++j;
    if (j < n && j - i > 1) --j;
    pieces.emplace_back(begin, j);
    i = j;
  }
  return pieces;
}

}  // namespace qkv::text
