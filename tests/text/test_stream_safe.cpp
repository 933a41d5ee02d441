// UAX #15's Stream-Safe Text Format (text::stream_safe) and the normalisers that use it
// (issue 48 row 9): a run of combining marks is cut every 30 non-starters by U+034F, so
// normalisation's canonical reordering is linear in the text, not quadratic.
#include <gtest/gtest.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <string>
#include <vector>

#include "qkv/tokenizer.h"
#include "text/unicode.h"
#include "utf8_for_tests.h"

namespace {

using qkv::text::kCombiningGraphemeJoiner;
using qkv::text::stream_safe;

std::u32string marks(int n, char32_t mark = U'\u0301') { return std::u32string(n, mark); }

// ICU's NFKC of text as it is (no stream-safe step): what the normaliser gave before.
std::u32string icu_nfkc(const std::u32string& text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  const icu::UnicodeString s = nfkc->normalize(
      icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(text.data()),
                                    static_cast<int32_t>(text.size())),
      status);
  EXPECT_TRUE(U_SUCCESS(status));
  std::u32string out;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

TEST(StreamSafe, ThirtyNonStartersStayAndTheThirtyFirstGetsAJoiner) {
  // UAX #15: a run of at most 30 non-starters is stream-safe; the 31st gets U+034F before it.
  for (int n : {1, 29, 30}) {
    const std::u32string text = U"a" + marks(n);
    EXPECT_EQ(stream_safe(text), text) << n << " non-starters";
  }
  EXPECT_EQ(stream_safe(U"a" + marks(31)), U"a" + marks(30) + kCombiningGraphemeJoiner + marks(1));
  // A run of 61: joiners after the 30th and the 60th.
  EXPECT_EQ(stream_safe(U"a" + marks(61)), U"a" + marks(30) + kCombiningGraphemeJoiner + marks(30) +
                                               kCombiningGraphemeJoiner + marks(1));
  // A run with nothing before it counts the same.
  EXPECT_EQ(stream_safe(marks(31)), marks(30) + kCombiningGraphemeJoiner + marks(1));
}

TEST(StreamSafe, StartersResetTheCount) {
  const std::u32string text = U"a" + marks(25) + U"b" + marks(25) + U"\uAC00" + marks(30);
  EXPECT_EQ(stream_safe(text), text);
  // The joiner itself is a starter: a text that is already stream-safe stays as it is.
  const std::u32string safe = stream_safe(U"a" + marks(100));
  EXPECT_EQ(stream_safe(safe), safe);
}

TEST(StreamSafe, CountsNonStartersOfTheNfkdDecomposition) {
  // U+0344 COMBINING GREEK DIALYTIKA TONOS decomposes to U+0308 U+0301: two non-starters.
  EXPECT_EQ(stream_safe(U"a" + marks(15, U'\u0344')), U"a" + marks(15, U'\u0344'));
  EXPECT_EQ(stream_safe(U"a" + marks(16, U'\u0344')),
            U"a" + marks(15, U'\u0344') + kCombiningGraphemeJoiner + marks(1, U'\u0344'));
  // U+1E09 (c, cedilla, acute in NFKD) is a starter that ends in two non-starters: 28 marks
  // after it make 30, 29 make 31.
  EXPECT_EQ(stream_safe(U"\u1E09" + marks(28)), U"\u1E09" + marks(28));
  EXPECT_EQ(stream_safe(U"\u1E09" + marks(29)),
            U"\u1E09" + marks(28) + kCombiningGraphemeJoiner + marks(1));
  // U+00A8 DIAERESIS is U+0020 U+0308 in NFKD: one trailing non-starter.
  EXPECT_EQ(stream_safe(U"\u00A8" + marks(30)),
            U"\u00A8" + marks(29) + kCombiningGraphemeJoiner + marks(1));
}

TEST(StreamSafe, OrdinaryTextNormalisesExactlyAsBefore) {
  for (const std::u32string& text :
       {std::u32string(U"caf\u00E9 cafe\u0301"), std::u32string(U"Ti\u1EBFng Vi\u1EC7t c\u00F3 d\u1EA5u"),
        std::u32string(U"Tie\u0302\u0301ng Vie\u0323\u0302t"),          // decomposed Vietnamese
        std::u32string(U"\uD55C\uAD6D\uC5B4 \u1112\u1161\u11AB"),        // Hangul, syllables and jamo
        std::u32string(U"\uFB01 \u2460 \u00BD \uFF21 q\u0307\u0323"),   // compatibility, reordering
        std::u32string(U"a") + marks(30, U'\u0316')}) {
    EXPECT_EQ(stream_safe(text), text);
    EXPECT_EQ(qkv::text::nfkc(text, "test"), icu_nfkc(text));
  }
  EXPECT_EQ(qkv::text::strip_accents(U"Tie\u0302\u0301ng Vi\u1EC7t"), U"Tieng Viet");
}

TEST(StreamSafe, NormalisationWorkIsLinearInALongRunOfMarks) {
  // Row 9's line: 'a' + (U+0301 U+0316) * 249000, under 1 MiB of UTF-8. Canonical
  // reordering sorts a run of non-starters by insertion: at most r (r - 1) / 2 swaps for a
  // run of r (reordering_work_bound). As it is, the line has one run of 498000 marks.
  std::u32string line = U"a";
  for (int i = 0; i < 249000; ++i) line += U"\u0301\u0316";
  const std::uint64_t n = line.size();
  EXPECT_EQ(qkv::text::reordering_work_bound(line), 498000ull * 497999 / 2);
  const std::u32string safe = stream_safe(line);
  // Runs of at most 30: at most 30 * 29 / 2 swaps per 30 marks, under 15 per character.
  // ASSERT: without the joiners the normalisers below would take minutes.
  ASSERT_LE(qkv::text::reordering_work_bound(safe), 15 * n);
  EXPECT_LE(safe.size(), n + n / 30 + 1);
  // The normalisers get the stream-safe text: NFKC of the line keeps the joiners, and NFD
  // with accents stripped leaves the letter (the joiners are Mn and are stripped too).
  const std::u32string normalized = qkv::text::nfkc(line, "test");
  EXPECT_EQ(normalized, icu_nfkc(safe));
  EXPECT_EQ(std::count(normalized.begin(), normalized.end(), kCombiningGraphemeJoiner),
            static_cast<std::ptrdiff_t>(safe.size() - line.size()));
  EXPECT_EQ(qkv::text::strip_accents(line), U"a");
}

TEST(StreamSafe, SentencePieceSeesTheJoiner) {
  // A vocabulary with the joiner as a piece: encode of 'a' + 31 marks has its id where the
  // joiner goes, so the tokenizer normalises the stream-safe text.
  // U+0316 (below, class 220): NFKC composes no letter with it, as it would 'a' + U+0301.
  std::string cgj, acute;
  append_utf8_for_test(cgj, kCombiningGraphemeJoiner);
  append_utf8_for_test(acute, U'\u0316');
  const auto t = qkv::SentencePieceTokenizer::from_pieces(
      {"<unk>", "\xE2\x96\x81" "a", acute, cgj}, {0.0, -1.0, -1.0, -1.0}, 0, {});
  std::vector<std::int64_t> expected = t.encode("a");
  const std::size_t prefix = expected.size();
  expected.insert(expected.end(), 30, 2);
  expected.push_back(3);
  expected.push_back(2);
  std::string text = "a";
  for (int i = 0; i < 31; ++i) text += acute;
  EXPECT_EQ(t.encode(text), expected);
  text.resize(text.size() - acute.size());  // 30 marks: no joiner
  expected.resize(prefix + 30);
  EXPECT_EQ(t.encode(text), expected);
}

}  // namespace
