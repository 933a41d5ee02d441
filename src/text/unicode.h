// UTF-8 and the Unicode character classes the tokenizers need (ICU properties).
// Internal to src/text.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::text {

// The code points of text; throws qkv::Error "<who>: text is not valid UTF-8 at byte
// offset N" for overlong forms, surrogates, values above U+10FFFF and truncated sequences.
// offsets (if given) receives the byte offset of each code point, plus text.size() at the end.
std::vector<char32_t> decode_utf8(std::string_view text, const char* who,
                                  std::vector<std::size_t>* offsets = nullptr);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(const std::vector<char32_t>& cps);

bool is_letter(char32_t cp);  // \p{L}: Lu Ll Lt Lm Lo
bool is_number(char32_t cp);  // \p{N}: Nd Nl No
// \s of Python's `regex` module on str patterns: the Unicode White_Space property.
bool is_regex_space(char32_t cp);
// Python's str.isspace(): bidirectional class WS, B or S, or category Zs.
bool is_py_space(char32_t cp);
// BERT's _is_whitespace: space, \t, \n, \r or category Zs.
bool is_bert_whitespace(char32_t cp);
// BERT's _is_control as Hugging Face tokenizers has it: any C* category except \t \n \r.
bool is_bert_control(char32_t cp);
// BERT's _is_punctuation: ASCII 33-47, 58-64, 91-96, 123-126, or any P* category.
bool is_bert_punctuation(char32_t cp);
// BERT's _is_chinese_char: the CJK Unified Ideographs blocks and their extensions.
bool is_cjk_ideograph(char32_t cp);

// Full (not simple) lowercase mapping, ICU root locale, as Python's str.lower().
std::u32string to_lower(std::u32string_view word);
// NFD, then drop nonspacing marks (Mn), as BERT's _run_strip_accents.
std::u32string strip_accents(std::u32string_view word);

// Splits text around exact occurrences of the special tokens (longest first at each
// position); a segment's flag says whether it is one of them.
struct Segment {
  std::string_view text;
  bool special;
};
std::vector<Segment> split_specials(std::string_view text,
                                    const std::vector<std::string>& specials);

// The whole file; Error "<who>: cannot open '<path>'" when it is missing or unreadable.
std::string read_text_file(const std::filesystem::path& path, const char* who);

}  // namespace qkv::text
