#include "text/unicode.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <limits>
#include <string>

#include "io/read_file.h"
#include "qkv/error.h"

namespace qkv::text {

std::vector<char32_t> decode_utf8(std::string_view text, const char* who,
                                  std::vector<std::size_t>* offsets) {
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  if (offsets != nullptr) offsets->clear();
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char b = s[i];
    std::size_t len = 0;
    char32_t cp = 0, min = 0;
    if (b < 0x80) {
      len = 1, cp = b;
    } else if ((b & 0xE0) == 0xC0) {
      len = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, cp = b & 0x07, min = 0x10000;
    }
    bool ok = len != 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    QKV_CHECK(ok, who << ": text is not valid UTF-8 at byte offset " << i << " (byte 0x" << std::hex
                      << static_cast<unsigned>(b) << ")");
    if (offsets != nullptr) offsets->push_back(i);
    cps.push_back(cp);
    i += len;
  }
  if (offsets != nullptr) offsets->push_back(n);
  return cps;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

namespace {
std::int32_t category_mask(char32_t cp) { return U_GET_GC_MASK(static_cast<UChar32>(cp)); }
}  // namespace

bool is_letter(char32_t cp) { return (category_mask(cp) & U_GC_L_MASK) != 0; }
bool is_number(char32_t cp) { return (category_mask(cp) & U_GC_N_MASK) != 0; }

bool is_regex_space(char32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)) != 0; }

bool is_py_space(char32_t cp) {
  if ((category_mask(cp) & U_GC_ZS_MASK) != 0) return true;
  const UCharDirection d = u_charDirection(static_cast<UChar32>(cp));
  return d == U_WHITE_SPACE_NEUTRAL || d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR;
}

bool is_bert_whitespace(char32_t cp) {
  if (cp == U' ' || cp == U'\t' || cp == U'\n' || cp == U'\r') return true;
  return (category_mask(cp) & U_GC_ZS_MASK) != 0;
}

bool is_bert_control(char32_t cp) {
  if (cp == U'\t' || cp == U'\n' || cp == U'\r') return false;
  return (category_mask(cp) & U_GC_C_MASK) != 0;  // Cc Cf Cs Co Cn
}

bool is_bert_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126))
    return true;
  return (category_mask(cp) & U_GC_P_MASK) != 0;
}

bool is_cjk_ideograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

namespace {
icu::UnicodeString to_icu(std::u32string_view word) {
  return icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(word.data()),
                                       static_cast<int32_t>(word.size()));
}
std::u32string from_icu(const icu::UnicodeString& s) {
  std::u32string out;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}
}  // namespace

std::u32string to_lower(std::u32string_view word) {
  icu::UnicodeString s = to_icu(word);
  s.toLower(icu::Locale::getRoot());
  return from_icu(s);
}

namespace {

// The non-starters (canonical combining class not 0) at the start and at the end of a
// character's NFKD decomposition, and whether the decomposition is non-starters only.
struct NonStarters {
  int leading = 0;
  int trailing = 0;
  bool all = false;
};

NonStarters nonstarters(char32_t cp, const icu::Normalizer2& nfkd) {
  // Below U+00A0 (ASCII, C1 controls) every character is a starter without a decomposition.
  if (cp < 0xA0) return {};
  const auto c = static_cast<UChar32>(cp);
  icu::UnicodeString d;
  if (!nfkd.getDecomposition(c, d)) {
    const bool non = u_getCombiningClass(c) != 0;
    return {non ? 1 : 0, non ? 1 : 0, non};
  }
  NonStarters r;
  int count = 0;
  bool leading = true;
  for (int32_t i = 0; i < d.length();) {
    const UChar32 x = d.char32At(i);
    i += U16_LENGTH(x);
    ++count;
    if (u_getCombiningClass(x) != 0) {
      if (leading) ++r.leading;
      ++r.trailing;
    } else {
      leading = false;
      r.trailing = 0;
    }
  }
  r.all = r.leading == count;
  return r;
}

const icu::Normalizer2& nfkd_instance() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkd = icu::Normalizer2::getNFKDInstance(status);
  QKV_CHECK(U_SUCCESS(status), "stream_safe: ICU NFKD normalizer unavailable: " << u_errorName(status));
  return *nfkd;
}

}  // namespace

std::u32string stream_safe(std::u32string_view text) {
  const icu::Normalizer2& nfkd = nfkd_instance();
  std::u32string out;
  out.reserve(text.size());
  int count = 0;  // consecutive non-starters so far
  for (char32_t cp : text) {
    const NonStarters n = nonstarters(cp, nfkd);
    if (count + n.leading > kMaxNonStarters) {
      out.push_back(kCombiningGraphemeJoiner);
      count = 0;
    }
    count = n.all ? count + n.leading : n.trailing;
    out.push_back(cp);
  }
  return out;
}

std::uint64_t reordering_work_bound(std::u32string_view text) {
  // Counted without the cap: each character's non-starters extend the run.
  const icu::Normalizer2& nfkd = nfkd_instance();
  std::uint64_t work = 0, run = 0;
  const auto close = [&] { work += run * (run > 0 ? run - 1 : 0) / 2; };
  for (char32_t cp : text) {
    const NonStarters n = nonstarters(cp, nfkd);
    if (n.all) {
      run += static_cast<std::uint64_t>(n.leading);
    } else {
      run += static_cast<std::uint64_t>(n.leading);
      close();
      run = static_cast<std::uint64_t>(n.trailing);
    }
  }
  close();
  return work;
}

std::u32string nfkc(std::u32string_view text, const char* who) {
  const std::u32string safe = stream_safe(text);
  // ICU strings index with int32_t; a code point is at most 2 UTF-16 units.
  QKV_CHECK(safe.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()) / 2,
            who << ": the text is " << text.size() << " characters, more than ICU's 2^31 - 1 UTF-16 units");
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  QKV_CHECK(U_SUCCESS(status), who << ": ICU NFKC normalizer unavailable: " << u_errorName(status));
  const icu::UnicodeString normalized = nfkc->normalize(to_icu(safe), status);
  QKV_CHECK(U_SUCCESS(status), who << ": ICU NFKC failed on a text of " << text.size()
                                   << " characters: " << u_errorName(status));
  return from_icu(normalized);
}

std::u32string strip_accents(std::u32string_view word) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  QKV_CHECK(U_SUCCESS(status),
            "strip_accents: ICU NFD normalizer unavailable: " << u_errorName(status));
  icu::UnicodeString s = nfd->normalize(to_icu(stream_safe(word)), status);
  QKV_CHECK(U_SUCCESS(status), "strip_accents: ICU NFD failed: " << u_errorName(status));
  std::u32string out;
  for (char32_t cp : from_icu(s))
    if ((category_mask(cp) & U_GC_MN_MASK) == 0) out.push_back(cp);
  return out;
}

std::vector<Segment> split_specials(std::string_view text,
                                    const std::vector<std::string>& specials) {
  std::vector<Segment> out;
  std::size_t start = 0, i = 0;
  while (i < text.size()) {
    std::size_t best = 0;
    for (const std::string& s : specials)
      if (s.size() > best && text.substr(i).starts_with(s)) best = s.size();
    if (best == 0) {
      ++i;
      continue;
    }
    if (i > start) out.push_back({text.substr(start, i - start), false});
    out.push_back({text.substr(i, best), true});
    i += best;
    start = i;
  }
  if (start < text.size()) out.push_back({text.substr(start), false});
  return out;
}

std::string read_text_file(const std::filesystem::path& path, const char* who) {
  return io::read_file(path.string(), std::string(who) + ": file", kMaxVocabularyFileBytes);
}

namespace {

// The length of the well-formed UTF-8 sequence at text[i] (no overlong forms, surrogates
// or values above U+10FFFF), or 0.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  std::size_t n = 0;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, low = 0xA0;
  else if (c == 0xED) n = 3, high = 0x9F;
  else if (c >= 0xE1 && c <= 0xEF) n = 3;
  else if (c == 0xF0) n = 4, low = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, high = 0x8F;
  if (n == 0 || i + n > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

std::string quoted(std::string_view text, std::size_t max_bytes) {
  std::string out = "\"";
  std::size_t i = 0;
  while (i < text.size() && i < max_bytes) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // Whole characters only, and never a byte that is not UTF-8: messages reach Python,
    // which decodes them.
    const std::size_t n = c >= 0x80 ? utf8_sequence(text, i) : 0;
    if (n > 0 && i + n <= max_bytes) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    if (n > 0) break;  // the character does not fit: stop before it
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", c);
    out += hex;
    ++i;
  }
  if (i < text.size()) return out + "\"... (" + std::to_string(text.size()) + " bytes)";
  return out + "\"";
}

std::string escaped(std::string_view text, std::size_t max_chars, bool quotes, bool* cut) {
  std::string out;
  const auto* s = reinterpret_cast<const std::uint8_t*>(text.data());
  const auto length = static_cast<std::int32_t>(std::min<std::size_t>(text.size(), INT32_MAX));
  std::int32_t i = 0;
  std::size_t chars = 0;
  *cut = false;
  while (i < length) {
    if (chars++ == max_chars) {
      *cut = true;
      return out;
    }
    const std::int32_t start = i;
    UChar32 c = 0;
    U8_NEXT(s, i, length, c);
    // Cc (C0, DEL, C1), and Zl, Zp and Cf (bidi controls among them), which break or
    // reorder the line a terminal shows.
    const int type = c < 0 ? -1 : u_charType(c);
    if (c < 0 || type == U_CONTROL_CHAR || type == U_FORMAT_CHAR || type == U_LINE_SEPARATOR ||
        type == U_PARAGRAPH_SEPARATOR || (quotes && (c == '\'' || c == '\\'))) {
      for (std::int32_t k = start; k < i; ++k) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(s[k]));
        out += hex;
      }
    } else {
      out.append(text.substr(static_cast<std::size_t>(start), static_cast<std::size_t>(i - start)));
    }
  }
  return out;
}

std::string quote_value(std::string_view text, std::size_t max_chars) {
  bool cut = false;
  const std::string body = escaped(text, max_chars, true, &cut);
  return "'" + body + (cut ? "…' (" + std::to_string(text.size()) + " bytes)" : "'");
}

}  // namespace qkv::text
