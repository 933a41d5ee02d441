// UTF-8 and the Unicode character classes the tokenizers need (ICU properties).
// Internal to src/text.
#pragma once

#include <cstddef>
#include <cstdint>
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
// NFD of stream_safe(word), then drop nonspacing marks (Mn), as BERT's _run_strip_accents
// (the joiners stream_safe adds are Mn and go too).
std::u32string strip_accents(std::u32string_view word);

// UAX #15's Stream-Safe Text Format (section "Stream-Safe Text Format"): no run of more
// than kMaxNonStarters consecutive non-starters, counted in NFKD (a character adds the
// non-starters its NFKD decomposition begins with; one whose decomposition holds a starter
// restarts the count at the non-starters it ends with). Where a character would take the
// count past 30, U+034F COMBINING GRAPHEME JOINER (a starter that normalisation keeps and
// BERT's accent stripping drops, as it is Mn) goes before it and the count restarts.
// Why: ICU's canonical reordering sorts a run of non-starters by insertion, so a 1 MiB
// line of 'a' + U+0301 U+0316 repeated took 97 s in NFKC; with runs of at most 30 the
// reordering is linear. Text without a run of 31 (all real text) is returned unchanged.
constexpr int kMaxNonStarters = 30;
constexpr char32_t kCombiningGraphemeJoiner = 0x034F;
std::u32string stream_safe(std::u32string_view text);
// An upper bound on the swaps canonical reordering makes on text: the sum over its runs of
// consecutive non-starters (counted as stream_safe counts them) of r (r - 1) / 2. A
// measure of normalisation's work that tests check instead of timing it.
std::uint64_t reordering_work_bound(std::u32string_view text);
// NFKC (SentencePiece's normaliser) of stream_safe(text); Error "<who>: ..." when ICU fails
// or the text is longer than ICU's 2^31 - 1 UTF-16 units.
std::u32string nfkc(std::u32string_view text, const char* who);

// Splits text around exact occurrences of the special tokens (longest first at each
// position); a segment's flag says whether it is one of them.
struct Segment {
  std::string_view text;
  bool special;
};
std::vector<Segment> split_specials(std::string_view text,
                                    const std::vector<std::string>& specials);

// Vocabulary files: GPT-2's vocab.json is 1 MiB, the largest tokenizer.json files of
// current models (262k tokens) about 33 MiB. A larger file is refused before it is read:
// parsed JSON takes several times the file's size in memory.
constexpr std::uint64_t kMaxVocabularyFileBytes = std::uint64_t{64} << 20;
// A vocabulary token (a vocab.txt or merges.txt line) is at most this long; GPT-2's longest
// is 256 bytes. A longer line means the file is not a vocabulary.
constexpr std::size_t kMaxTokenBytes = 65536;

// The whole regular file (io::read_file, at most kMaxVocabularyFileBytes); Error
// "<who>: file '<path>': cannot open: ..." when it is missing or unreadable, names a
// directory or a device, or is too large.
std::string read_text_file(const std::filesystem::path& path, const char* who);

// text in double quotes for a message: control characters and bytes that are not UTF-8
// as \xNN (a message must stay valid UTF-8: Python decodes it), at most max_bytes of the
// text (cut at a character boundary, the full length noted).
std::string quoted(std::string_view text, std::size_t max_bytes = 60);

// At most max_chars characters of text, with control characters (Cc; Cf, Zl and Zp, which
// break or reorder the line a terminal shows; and, when `quotes`, single quotes and
// backslashes) and bytes that are not UTF-8 written \xNN; *cut tells whether characters
// were left out.
std::string escaped(std::string_view text, std::size_t max_chars, bool quotes, bool* cut);
// A value given by a user, as messages quote it: in single quotes, at most max_chars
// characters (then "…" and the full size in bytes), escaped as above, so that a hostile
// value can neither flood the terminal nor drive it with escape sequences.
std::string quote_value(std::string_view text, std::size_t max_chars = 60);

}  // namespace qkv::text
