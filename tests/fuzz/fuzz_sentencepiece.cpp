// libFuzzer target: SentencePiece unigram (the USE pipeline's rules) on arbitrary bytes.
// encode() throws qkv::Error exactly when the input is not valid UTF-8; otherwise every id
// is in range and matchable (or the unknown id), no two unknowns are adjacent, and when no
// unknown and no piece above U+FFFF was chosen (those make the backtrack skip symbols, as
// the pipeline's does) decode(encode(x)) is NFKC(x) with "▁" read as a space.
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/error.h"
#include "qkv/tokenizer.h"
#include "utf8_oracle.h"

namespace {

constexpr std::int64_t kAstralId = 26;  // "😀", two UTF-16 code units

const qkv::SentencePieceTokenizer& tokenizer() {
  // Reserved 0-5 as in the USE vocabulary; score-0 pieces (the "best 0 is unset" rule),
  // ties, a duplicate ("y"), a piece reachable only through a reserved prefix ("zzz"),
  // pieces with no single-symbol prefix ("cd"), targets of NFKC ("fi", "1", "kg").
  static const auto t = [] {
    // clang-format off
    const std::vector<std::pair<std::string, double>> vocab = {
        {"\xEF\xBF\xBD", 0}, {"<s>", 0},  {"</s>", 0},     {"<pad>", 0},    {"zz", 0},    // 0-4
        {"q", 0},            {"▁", -2},   {"a", -1},       {"b", -1},       {"▁a", -3},   // 5-9
        {"ab", -2},          {"▁:", 0},   {":", 0},        {")", -1},       {"cd", -1},   // 10-14
        {"de", -1},          {"e", -1},   {"é", -1.5},     {"fi", -0.5},    {"1", -1},    // 15-19
        {"kg", -2},          {"y", -8},   {"y", -0.5},     {"▁▁", -2.5},    {"f", -1},    // 20-24
        {"0", -1},           {"😀", -1},  {"▁the", -2},    {"the", -2.5},   {"he", -1.5}, // 25-29
        {"h", -1},           {"t", -1},   {"zzz", -0.25},  {"z", -1},       {":00", 0},   // 30-34
        {"▁1", -1.75},                                                                    // 35
    };
    // clang-format on
    std::vector<std::string> pieces;
    std::vector<double> scores;
    for (const auto& [piece, score] : vocab) {
      pieces.push_back(piece);
      scores.push_back(score);
    }
    return qkv::SentencePieceTokenizer::from_pieces(pieces, scores, 0, {1, 2, 3, 4, 5});
  }();
  return t;
}

// NFKC(text) with every "▁" as a space: what decode(encode(text)) must give.
std::string expected_decode(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  if (U_FAILURE(status)) std::abort();
  icu::UnicodeString s = nfkc->normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(
                                             text.data(), static_cast<std::int32_t>(text.size()))),
                                         status);
  if (U_FAILURE(status)) std::abort();
  s.findAndReplace(icu::UnicodeString(static_cast<UChar32>(0x2581)), icu::UnicodeString(u' '));
  std::string out;
  s.toUTF8String(out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1 << 16) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = valid_utf8(data, size);
  const auto& t = tokenizer();
  std::vector<std::int64_t> ids;
  try {
    ids = t.encode(text);
  } catch (const qkv::Error&) {
    if (valid) std::abort();  // rejected valid UTF-8
    return 0;
  }
  if (!valid) std::abort();  // accepted bytes that are not UTF-8
  if (size > 0 && ids.empty()) std::abort();
  bool unknown = false, astral = false, previous_unknown = false;
  for (std::int64_t id : ids) {
    if (id < 0 || id >= static_cast<std::int64_t>(t.vocab_size())) std::abort();
    const bool is_unknown = id == t.unk_id();
    if (!is_unknown && t.is_reserved(id)) std::abort();  // a reserved piece matched
    if (is_unknown && previous_unknown) std::abort();    // unknowns not merged
    previous_unknown = is_unknown;
    unknown = unknown || is_unknown;
    astral = astral || id == kAstralId;
  }
  if (!unknown && !astral && t.decode(ids) != expected_decode(text)) std::abort();
  return 0;
}
