# libFuzzer targets of the vision application's readers (qkv_add_fuzzer in
# tests/fuzz/CMakeLists.txt): IDX, plain and gzip, with a round-trip oracle (seeds:
# tests/fuzz/seeds/idx/; the IDX writer writes through qkv/files.h); PNG (libpng) and PGM
# (seeds: tests/fuzz/seeds/image/).
qkv_add_fuzzer(idx tests/fuzz/fuzz_idx.cpp apps/vision/idx.cpp src/io/files.cpp src/io/json_bounded.cpp
               src/io/read_file.cpp -lz -lcrypto)
qkv_add_fuzzer(image tests/fuzz/fuzz_image.cpp apps/vision/image.cpp src/io/read_file.cpp -lpng -lz)
