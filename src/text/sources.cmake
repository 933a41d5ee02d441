# Sources of src/text, appended to QKV_SOURCES (paths relative to the project root).
# ICU gives the Unicode character classes, lowercasing, NFD and NFKC the tokenizers need.
list(APPEND QKV_SOURCES
  src/text/unicode.cpp
  src/text/wordpiece.cpp
  src/text/byte_level.cpp
  src/text/bpe.cpp
  src/text/bpe_trainer.cpp
  src/text/sentencepiece.cpp
  src/text/tokenizer.cpp
)
find_package(ICU REQUIRED COMPONENTS uc i18n)
list(APPEND QKV_LAYER_LIBRARIES ICU::uc ICU::i18n)
