// qkv tokenize: the ids of a text (or of every line of a file) under a Hugging Face
// tokenizer directory — BERT WordPiece ([CLS] text [SEP]), GPT-2 byte-level BPE or
// SentencePiece unigram (the plain ids), whichever Tokenizer::load finds.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "commands.h"
#include "io/text_input.h"
#include "print.h"
#include "qkv/error.h"
#include "qkv/tokenizer.h"

namespace qkv::cli {
namespace {

void encode_line(const Tokenizer& tokenizer, const std::string& text, bool json,
                 std::ostream& out) {
  std::vector<std::int64_t> ids;
  std::vector<std::string> tokens;
  if (const WordPieceTokenizer* wp = tokenizer.wordpiece()) {
    Encoding e = wp->encode(text);
    ids = std::move(e.ids);
    tokens = std::move(e.tokens);
  } else {
    // BPE: "Ġ" stands for a space; SentencePiece: "▁".
    ids = tokenizer.encode(text);
    for (auto id : ids) tokens.push_back(tokenizer.id_to_token(id));
  }
  if (json) {
    nlohmann::json j;
    j["ids"] = ids;
    j["tokens"] = tokens;
    out << j.dump() << '\n';
    return;
  }
  for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  out << '\n';
}

}  // namespace

int run_tokenize(const TokenizeOptions& o, std::ostream& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  QKV_CHECK(fs::is_directory(o.model, ec),
            "model directory " << quote_path(o.model) << " does not exist");
  const Tokenizer tokenizer = Tokenizer::load(o.model);
  if (!o.has_file) {
    try {
      encode_line(tokenizer, o.text, o.json, out);
    } catch (const Error& e) {
      throw Error(std::string("--text: ") + e.what());
    }
    return 0;
  }
  if (o.file.empty()) throw UsageError("--file", "must name a file, or '-' for standard input");
  // Line by line, so that input of any length streams through in bounded memory; a line
  // that cannot be encoded stops the command, naming its line.
  io::LineReader reader(o.file, "--file");
  for (std::string line; reader.next(line);) {
    try {
      encode_line(tokenizer, line, o.json, out);
    } catch (const Error& e) {
      out.flush();
      throw Error(reader.where() + ": " + e.what());
    }
  }
  return 0;
}

}  // namespace qkv::cli
