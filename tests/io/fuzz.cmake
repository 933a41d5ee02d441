# libFuzzer target for the safetensors reader (seeds: tests/fuzz/seeds/safetensors/).
# The safetensors writer writes through qkv/files.h (src/io/files.cpp: OpenSSL's SHA-256,
# bounded JSON for config.json's file records).
set(QKV_FILES_FUZZ_SOURCES src/io/files.cpp src/io/json_bounded.cpp src/io/read_file.cpp)
qkv_add_fuzzer(safetensors tests/fuzz/fuzz_safetensors.cpp src/io/safetensors.cpp ${QKV_FILES_FUZZ_SOURCES}
               src/core/tensor.cpp src/core/memory.cpp src/core/dtype.cpp -lcrypto)
