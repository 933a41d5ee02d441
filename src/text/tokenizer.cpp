// Tokenizer::load: the tokenizer files of a model directory, as Hugging Face lays them out.
#include "qkv/tokenizer.h"

#include <nlohmann/json.hpp>

#include "io/json_bounded.h"
#include "qkv/error.h"
#include "qkv/files.h"
#include "text/unicode.h"

namespace qkv {

Tokenizer Tokenizer::load(const std::filesystem::path& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  QKV_CHECK(fs::is_directory(directory, ec),
            "Tokenizer::load: '" << directory.string() << "' is not a directory");
  // A model directory written by qkv records its tokenizer files in config.json: files
  // that are not the ones written with the model are refused (qkv/files.h).
  if (fs::is_regular_file(directory / "config.json", ec)) check_model_files((directory / "config.json").string());
  // exists(), not is_regular_file(): a vocabulary that is a directory or a device must be
  // an error naming it (text::read_text_file), not skipped as if it were absent.
  const fs::path json = directory / "tokenizer.json";
  if (fs::exists(json, ec)) {
    const std::string content = text::read_text_file(json, "Tokenizer::load");
    std::string type;
    try {
      const nlohmann::json j = io::parse_json(content, "Tokenizer::load: '" + json.string() + "'");
      if (j.contains("model") && j["model"].is_object())
        type = j["model"].value("type", std::string());
    } catch (const nlohmann::json::exception& e) {
      throw Error("Tokenizer::load: malformed JSON in '" + json.string() + "': " + e.what());
    }
    if (type == "WordPiece") return Tokenizer(WordPieceTokenizer::from_tokenizer_json(json));
    if (type == "BPE") return Tokenizer(BpeTokenizer::from_tokenizer_json(json));
    if (type == "Unigram") return Tokenizer(SentencePieceTokenizer::from_tokenizer_json(json));
    throw Error("Tokenizer::load: model.type in '" + json.string() +
                "' must be \"WordPiece\", \"BPE\" or \"Unigram\", got \"" + type + "\"");
  }
  if (fs::exists(directory / "vocab.txt", ec))
    return Tokenizer(WordPieceTokenizer::from_vocab_txt(directory / "vocab.txt"));
  if (fs::exists(directory / "vocab.json", ec))
    return Tokenizer(BpeTokenizer::from_files(directory / "vocab.json", directory / "merges.txt"));
  throw Error("Tokenizer::load: '" + directory.string() +
              "' has none of tokenizer.json, vocab.txt, vocab.json + merges.txt");
}

std::vector<std::int64_t> Tokenizer::encode(std::string_view text) const {
  if (const auto* w = wordpiece()) return w->encode(text).ids;
  if (const auto* b = bpe()) return b->encode(text);
  return sentencepiece()->encode(text);
}

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids) const {
  return std::visit([&](const auto& t) { return t.decode(ids); }, impl_);
}

std::size_t Tokenizer::vocab_size() const {
  return std::visit([](const auto& t) { return t.vocab_size(); }, impl_);
}

std::optional<std::int64_t> Tokenizer::token_to_id(std::string_view token) const {
  return std::visit([&](const auto& t) { return t.token_to_id(token); }, impl_);
}

const std::string& Tokenizer::id_to_token(std::int64_t id) const {
  return std::visit([&](const auto& t) -> const std::string& { return t.id_to_token(id); }, impl_);
}

}  // namespace qkv
