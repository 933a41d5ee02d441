# libFuzzer target for the safetensors reader (seeds: tests/fuzz/seeds/safetensors/).
qkv_add_fuzzer(safetensors tests/fuzz/fuzz_safetensors.cpp src/io/safetensors.cpp src/io/read_file.cpp
               src/core/tensor.cpp src/core/memory.cpp src/core/dtype.cpp)
# libFuzzer target for the RFC 4180 CSV reader, with a round-trip oracle (seeds: tests/fuzz/seeds/csv/).
qkv_add_fuzzer(csv tests/fuzz/fuzz_csv.cpp src/io/csv.cpp)
# libFuzzer target for the IDX reader, plain and gzip, with a round-trip oracle (seeds:
# tests/fuzz/seeds/idx/).
qkv_add_fuzzer(idx tests/fuzz/fuzz_idx.cpp src/io/idx.cpp src/io/read_file.cpp -lz)
# libFuzzer target for the PNG (libpng) and PGM reader (seeds: tests/fuzz/seeds/image/).
qkv_add_fuzzer(image tests/fuzz/fuzz_image.cpp src/io/image.cpp src/io/read_file.cpp -lpng -lz)
