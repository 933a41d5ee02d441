# libFuzzer target for the safetensors reader (seeds: tests/fuzz/seeds/safetensors/).
qkv_add_fuzzer(safetensors tests/fuzz/fuzz_safetensors.cpp src/io/safetensors.cpp src/io/read_file.cpp
               src/core/tensor.cpp src/core/memory.cpp src/core/dtype.cpp)
# libFuzzer target for the RFC 4180 CSV reader, with a round-trip oracle (seeds: tests/fuzz/seeds/csv/).
qkv_add_fuzzer(csv tests/fuzz/fuzz_csv.cpp src/io/csv.cpp)
