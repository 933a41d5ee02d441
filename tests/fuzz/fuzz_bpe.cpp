// libFuzzer target: byte-level BPE on arbitrary bytes. encode() throws qkv::Error exactly
// when the input is not valid UTF-8; otherwise decode(encode(x)) == x byte for byte.
#include <unicode/utf8.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "utf8_oracle.h"

namespace {

// GPT-2's bytes_to_unicode symbol of byte b, as UTF-8.
std::string byte_symbol(unsigned b) {
  unsigned n = 0, cp = b;
  for (unsigned c = 0; c < 256; ++c) {
    const bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
    if (!printable) {
      if (c == b) cp = 256 + n;
      ++n;
    }
  }
  std::string s;
  if (cp < 0x80)
    s += static_cast<char>(cp);
  else
    s += {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
  return s;
}

const qkv::BpeTokenizer& tokenizer() {
  static const auto t = [] {
    std::map<std::string, std::int64_t> vocab;
    for (unsigned b = 0; b < 256; ++b) vocab[byte_symbol(b)] = b;
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"Ġ", "t"},    {"h", "e"}, {"Ġt", "he"}, {"l", "l"}, {"he", "ll"},
        {"hell", "o"}, {"Ġ", "Ġ"}, {"ĠĠ", "ĠĠ"}, {"'", "s"}, {"1", "2"},
        {"12", "12"},  {"ä", "¸"}, {"Ã", "©"},   {"Ċ", "Ċ"}};
    std::int64_t id = 256;
    for (const auto& [a, b] : merges) vocab.emplace(a + b, id++);
    vocab["<|endoftext|>"] = id;
    return qkv::BpeTokenizer::from_vocab_and_merges(vocab, merges);
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1 << 16) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = valid_utf8(data, size);
  const auto& t = tokenizer();
  try {
    const std::vector<std::int64_t> ids = t.encode(text);
    if (!valid) std::abort();                 // accepted bytes that are not UTF-8
    if (t.decode(ids) != text) std::abort();  // not byte-exact
  } catch (const qkv::Error&) {
    if (valid) std::abort();  // rejected valid UTF-8
  }
  return 0;
}
