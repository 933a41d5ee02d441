#include "text/unicode.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <fstream>
#include <sstream>
#include <string>

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

std::u32string strip_accents(std::u32string_view word) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  QKV_CHECK(U_SUCCESS(status),
            "strip_accents: ICU NFD normalizer unavailable: " << u_errorName(status));
  icu::UnicodeString s = nfd->normalize(to_icu(word), status);
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
  std::error_code ec;
  QKV_CHECK(std::filesystem::is_regular_file(path, ec),
            who << ": cannot open '" << path.string() << "': no such file");
  std::ifstream in(path, std::ios::binary);
  QKV_CHECK(in, who << ": cannot open '" << path.string() << "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  QKV_CHECK(!in.bad(), who << ": error reading '" << path.string() << "'");
  return ss.str();
}

}  // namespace qkv::text
