// A token or word of a model's input, named by a user: `qkv run --token T` and `qkv explain
// --model --token T` (the token whose attention is listed), rank_heads (qkv/heads.h: `qkv
// heads --from A --to B`, Python's qkv.heads; the token or word whose attention to another
// is ranked). One matcher, so that every front end reads a name alike. (Internal to the
// library and the CLI: not installed.)
//
// A name is
//   1. a token: one spelled exactly so, or equal to it without the mark its tokenizer adds
//      (GPT-2's "Ġ", SentencePiece's "▁", WordPiece's "##", a leading space);
//   2. (word_span only) a word: the shortest run of tokens that starts at a token beginning a
//      word (begins_word), goes on only through tokens that continue it, and whose texts
//      without marks join to the name: "animal" is GPT-2's "Ġanim" "al", "unhappy"
//      WordPiece's "un" "##happy". The run need not reach the word's end: "hat" is the
//      "Ġ" "h" "at" of GPT-2's "hat," (whose "," continues the word).
// token_span (qkv run --token): NAME is the first exact match, else the first marks-free one;
// NAME@N the N-th (from 1) of both together, in order. word_span (qkv heads): NAME is the
// first token or word it matches in the order of the text, NAME@N the N-th. NAME@N is read
// so only when NAME@N itself names nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::models {

// A token without the mark its tokenizer adds: GPT-2's byte-level "Ġ" (a leading space),
// SentencePiece's "▁", WordPiece's "##" continuation, a leading space. A token that is only
// a mark stays as it is (so that "Ġ" names GPT-2's lone space token).
std::string without_marks(const std::string& token);

// Whether tokens[i] starts a word: a token marked as a word's start (Ġ, ▁, a space) or a
// special one ([CLS], <s>, <|endoftext|>) does, a "##" continuation does not; an unmarked
// token does in WordPiece's lists (whose words' starts carry no mark), and in lists that
// mark words' starts (GPT-2, SentencePiece, the dates' characters with "␣" between words)
// only first in the list or after a special token or "␣".
bool begins_word(const std::vector<std::string>& tokens, std::size_t i);

// NAME or NAME@N, as read against the token lists it is looked up in.
struct TokenChoice {
  std::string name;
  std::int64_t occurrence = 0;  // N of NAME@N; 0 = the first occurrence
};

// Throws qkv::Error "T@N counts occurrences from 1, got 'NAME@0'" (the caller names its
// option or argument).
TokenChoice parse_token_choice(const std::string& name, const std::vector<std::vector<std::string>>& lists);

// The tokens tokens[first, first + count) a choice names; count = 0 when it names none.
struct TokenSpan {
  std::int64_t first = 0;
  std::int64_t count = 0;
  bool found() const { return count > 0; }
};

// The choice as one token (rule 1), or not found.
TokenSpan token_span(const std::vector<std::string>& tokens, const TokenChoice& choice);
// The choice as a token (rule 1) or a word (rule 2), or not found.
TokenSpan word_span(const std::vector<std::string>& tokens, const TokenChoice& choice);

// The tokens, each quoted, for the message that a name is not among them.
std::string token_list(const std::vector<std::string>& tokens);

}  // namespace qkv::models
