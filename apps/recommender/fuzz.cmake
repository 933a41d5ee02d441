# libFuzzer target for the RFC 4180 CSV reader, with a round-trip oracle (seeds:
# tests/fuzz/seeds/csv/; qkv_add_fuzzer in tests/fuzz/CMakeLists.txt).
qkv_add_fuzzer(csv tests/fuzz/fuzz_csv.cpp apps/recommender/csv.cpp)
