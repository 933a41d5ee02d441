# libFuzzer target for the safetensors reader (seeds: tests/fuzz/seeds/safetensors/).
# The safetensors writer and the IDX writer write through qkv/files.h (src/io/files.cpp:
# OpenSSL's SHA-256, bounded JSON for config.json's file records).
set(QKV_FILES_FUZZ_SOURCES src/io/files.cpp src/io/json_bounded.cpp src/io/read_file.cpp)
qkv_add_fuzzer(safetensors tests/fuzz/fuzz_safetensors.cpp src/io/safetensors.cpp ${QKV_FILES_FUZZ_SOURCES}
               src/core/tensor.cpp src/core/memory.cpp src/core/dtype.cpp -lcrypto)
# libFuzzer target for the RFC 4180 CSV reader, with a round-trip oracle (seeds: tests/fuzz/seeds/csv/).
qkv_add_fuzzer(csv tests/fuzz/fuzz_csv.cpp src/io/csv.cpp)
# libFuzzer target for the IDX reader, plain and gzip, with a round-trip oracle (seeds:
# tests/fuzz/seeds/idx/).
qkv_add_fuzzer(idx tests/fuzz/fuzz_idx.cpp src/io/idx.cpp ${QKV_FILES_FUZZ_SOURCES} -lz -lcrypto)
# libFuzzer target for the PNG (libpng) and PGM reader (seeds: tests/fuzz/seeds/image/).
qkv_add_fuzzer(image tests/fuzz/fuzz_image.cpp src/io/image.cpp src/io/read_file.cpp -lpng -lz)
