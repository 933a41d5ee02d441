// For the tokenizer fuzzers: whether bytes are valid UTF-8, by ICU's own decoder,
// independent of the tokenizers' (so the fuzzers can check what encode() accepted).
#pragma once

#include <unicode/utf8.h>

#include <cstddef>
#include <cstdint>

inline bool valid_utf8(const std::uint8_t* s, std::size_t n) {
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(n);) {
    UChar32 c;
    U8_NEXT(s, i, static_cast<std::int32_t>(n), c);
    if (c < 0) return false;
  }
  return true;
}
