// libFuzzer target: WordPiece encode / encode_pair / decode on arbitrary bytes. Bad UTF-8
// must surface as qkv::Error (never a crash); valid UTF-8 must encode.
#include <unicode/utf8.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "utf8_oracle.h"

namespace {

const qkv::WordPieceTokenizer& tokenizer() {
  static const auto t = qkv::WordPieceTokenizer::from_vocab(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un",    "##aff", "##able", "a",  "##a",
       "b",     "##b",   "ab",    "##ab",  "hello",  "world", ",",     "!",      "我", "cafe",
       "##é",   "'",     "s",     "##s",   "x",      "##x",   "1",     "##2"},
      /*lowercase=*/true);
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1 << 16) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = valid_utf8(data, size);
  const auto& t = tokenizer();
  try {
    const qkv::Encoding e = t.encode(text);
    if (e.ids.size() < 2 || e.ids.front() != t.cls_id() || e.ids.back() != t.sep_id() ||
        e.tokens.size() != e.ids.size() || e.token_type_ids.size() != e.ids.size())
      std::abort();
    for (std::int64_t id : e.ids)
      if (id < 0 || id >= static_cast<std::int64_t>(t.vocab_size())) std::abort();
    (void)t.decode(e.ids);
    const qkv::Encoding p = t.encode_pair(text.substr(0, size / 2), text.substr(size / 2));
    if (p.token_type_ids.size() != p.ids.size() || p.token_type_ids.back() != 1) std::abort();
  } catch (const qkv::Error&) {
    // Splitting valid UTF-8 in the middle may make the pair halves invalid; encode() alone
    // must not throw on valid input.
    if (valid) {
      try {
        (void)t.encode(text);
      } catch (const qkv::Error&) {
        std::abort();
      }
    }
  }
  return 0;
}
