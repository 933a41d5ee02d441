// The matcher of token_choice.h: names -> positions in a list of tokens.
#include "models/token_choice.h"

#include <algorithm>
#include <cstddef>

#include "qkv/error.h"
#include "text/unicode.h"

namespace qkv::models {
namespace {

const std::string kMarks[] = {"Ġ", "▁", "##", " "};  // each a prefix some tokenizer adds
const std::string kSpace = "␣";                       // the dates' space token, as shown

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// [CLS], [SEP], <s>, </s>, <|endoftext|>: a word of its own.
bool is_special(const std::string& t) {
  return t.size() >= 3 && ((t.front() == '[' && t.back() == ']') || (t.front() == '<' && t.back() == '>'));
}

// A token's part of its word's text: the token without its mark, "" for a lone mark
// (GPT-2's "Ġ" before a word its merges split as "Ġ" "h" "at").
std::string word_text(const std::string& token) {
  for (const std::string& mark : kMarks)
    if (starts_with(token, mark)) return token.substr(mark.size());
  return token;
}

// Whether the list marks the starts of its words (GPT-2, SentencePiece, characters with
// "␣") rather than their continuations (WordPiece).
bool marks_word_starts(const std::vector<std::string>& tokens) {
  return std::any_of(tokens.begin(), tokens.end(), [](const std::string& t) {
    return t == kSpace || starts_with(t, "Ġ") || starts_with(t, "▁") || starts_with(t, " ");
  });
}

bool begins_word(const std::vector<std::string>& tokens, std::size_t i, bool marked_starts) {
  const std::string& t = tokens[i];
  if (starts_with(t, "##")) return false;
  if (starts_with(t, "Ġ") || starts_with(t, "▁") || starts_with(t, " ") || is_special(t) || t == kSpace) return true;
  if (!marked_starts || i == 0) return true;
  return tokens[i - 1] == kSpace || is_special(tokens[i - 1]);
}

// The positions of the tokens `name` matches (rule 1). every = false: the exact matches,
// else (none) those without marks; every = true (NAME@N): both, in order, so that "the@2"
// is the second "the" of "the cat and the dog" (GPT-2: "the", then "Ġthe").
std::vector<std::int64_t> token_matches(const std::vector<std::string>& tokens, const std::string& name,
                                        bool every) {
  std::vector<std::int64_t> exact, loose, both;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const bool is = tokens[i] == name, like = without_marks(tokens[i]) == name;
    if (is) exact.push_back(static_cast<std::int64_t>(i));
    else if (like) loose.push_back(static_cast<std::int64_t>(i));
    if (is || like) both.push_back(static_cast<std::int64_t>(i));
  }
  if (every) return both;
  return exact.empty() ? loose : exact;
}

// The words `name` matches (rule 2), in order.
std::vector<TokenSpan> word_matches(const std::vector<std::string>& tokens, const std::string& name) {
  std::vector<TokenSpan> spans;
  if (name.empty()) return spans;
  const bool marked = marks_word_starts(tokens);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (!begins_word(tokens, i, marked)) continue;
    std::string joined;
    for (std::size_t j = i; j < tokens.size() && (j == i || !begins_word(tokens, j, marked)); ++j) {
      joined += word_text(tokens[j]);
      if (!starts_with(name, joined)) break;
      if (joined == name) {
        spans.push_back({static_cast<std::int64_t>(i), static_cast<std::int64_t>(j - i + 1)});
        break;
      }
    }
  }
  return spans;
}

TokenSpan nth(const std::vector<TokenSpan>& spans, std::int64_t occurrence) {
  const std::int64_t n = std::max<std::int64_t>(occurrence, 1);
  if (static_cast<std::int64_t>(spans.size()) < n) return {};
  return spans[static_cast<std::size_t>(n - 1)];
}

}  // namespace

std::string without_marks(const std::string& token) {
  for (const std::string& mark : kMarks)
    if (token.size() > mark.size() && starts_with(token, mark)) return token.substr(mark.size());
  return token;
}

bool begins_word(const std::vector<std::string>& tokens, std::size_t i) {
  return begins_word(tokens, i, marks_word_starts(tokens));
}

TokenChoice parse_token_choice(const std::string& name, const std::vector<std::vector<std::string>>& lists) {
  const std::size_t at = name.rfind('@');
  if (at == std::string::npos || at == 0 || at + 1 == name.size()) return {name, 0};
  for (const auto& tokens : lists)
    if (word_span(tokens, {name, 0}).found()) return {name, 0};
  std::int64_t n = 0;
  for (std::size_t i = at + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || n > (1 << 20)) return {name, 0};
    n = n * 10 + (name[i] - '0');
  }
  if (n < 1) throw Error("T@N counts occurrences from 1, got " + text::quote_value(name));
  return {name.substr(0, at), n};
}

TokenSpan token_span(const std::vector<std::string>& tokens, const TokenChoice& choice) {
  std::vector<TokenSpan> spans;
  for (std::int64_t i : token_matches(tokens, choice.name, choice.occurrence > 0)) spans.push_back({i, 1});
  return nth(spans, choice.occurrence);
}

TokenSpan word_span(const std::vector<std::string>& tokens, const TokenChoice& choice) {
  // In the order of the text, so that "the@2" of GPT-2's "t" "he" "Ġcat" "Ġthe" is "Ġthe"
  // (the first "the" a word of two tokens). A token inside a word already found is that
  // word (GPT-2's "Ġ" "on": "on" once, not twice).
  std::vector<TokenSpan> spans = word_matches(tokens, choice.name);
  const std::size_t words = spans.size();
  for (std::int64_t i : token_matches(tokens, choice.name, true))
    if (std::none_of(spans.begin(), spans.begin() + static_cast<std::ptrdiff_t>(words),
                     [&](const TokenSpan& s) { return s.first <= i && i < s.first + s.count; }))
      spans.push_back({i, 1});
  std::sort(spans.begin(), spans.end(), [](const TokenSpan& x, const TokenSpan& y) { return x.first < y.first; });
  return nth(spans, choice.occurrence);
}

std::string token_list(const std::vector<std::string>& tokens) {
  std::string s;
  for (const std::string& t : tokens) {
    if (!s.empty()) s += ' ';
    s += text::quote_value(t, 30);
  }
  return s;
}

}  // namespace qkv::models
