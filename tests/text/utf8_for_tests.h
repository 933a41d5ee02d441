// UTF-8 encoding for building test inputs, written apart from src/text so the tokenizer
// tests do not use the decoder's own twin to make what it decodes.
#pragma once

#include <string>

inline void append_utf8_for_test(std::string& s, char32_t cp) {
  if (cp < 0x80)
    s += static_cast<char>(cp);
  else if (cp < 0x800)
    s += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  else if (cp < 0x10000)
    s += {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
          static_cast<char>(0x80 | (cp & 0x3F))};
  else
    s += {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
          static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
}
