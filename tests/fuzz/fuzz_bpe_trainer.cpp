// libFuzzer target: byte-level BPE training on arbitrary bytes. train_bpe throws qkv::Error
// exactly when the input is empty, not valid UTF-8 or holds a NUL byte; otherwise its
// tokens are distinct, it made at most the merges asked for, and the tokenizer it makes
// gives the text back byte for byte.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "utf8_oracle.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1 << 14) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool acceptable = size > 0 && valid_utf8(data, size) && text.find('\0') == text.npos;
  try {
    const qkv::BpeVocabulary v = qkv::train_bpe(text, {.vocab_size = 300, .min_frequency = 1});
    if (!acceptable) std::abort();  // trained on what it must refuse
    if (v.merges.size() > 300 - 257 || v.tokens.size() != 257 + v.merges.size()) std::abort();
    if (std::set<std::string>(v.tokens.begin(), v.tokens.end()).size() != v.tokens.size())
      std::abort();  // a token twice
    const qkv::BpeTokenizer t = v.tokenizer();
    if (t.decode(t.encode(text)) != text) std::abort();  // not byte-exact
  } catch (const qkv::Error&) {
    if (acceptable) std::abort();  // refused a text it must train on
  }
  return 0;
}
