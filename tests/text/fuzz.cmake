# libFuzzer targets of the text layer (qkv_add_fuzzer in tests/fuzz/CMakeLists.txt).
set(QKV_TEXT_FUZZ_SOURCES src/text/unicode.cpp src/text/wordpiece.cpp src/text/byte_level.cpp
                           src/text/bpe.cpp src/text/bpe_trainer.cpp src/text/sentencepiece.cpp
                           src/text/tokenizer.cpp src/io/read_file.cpp src/io/json_bounded.cpp
                           src/io/files.cpp)
qkv_add_fuzzer(wordpiece tests/fuzz/fuzz_wordpiece.cpp ${QKV_TEXT_FUZZ_SOURCES} -licuuc -licui18n -licudata -lcrypto)
qkv_add_fuzzer(bpe tests/fuzz/fuzz_bpe.cpp ${QKV_TEXT_FUZZ_SOURCES} -licuuc -licui18n -licudata -lcrypto)
qkv_add_fuzzer(bpe_trainer tests/fuzz/fuzz_bpe_trainer.cpp ${QKV_TEXT_FUZZ_SOURCES} -licuuc -licui18n -licudata -lcrypto)
qkv_add_fuzzer(sentencepiece tests/fuzz/fuzz_sentencepiece.cpp ${QKV_TEXT_FUZZ_SOURCES} -licuuc -licui18n -licudata -lcrypto)
