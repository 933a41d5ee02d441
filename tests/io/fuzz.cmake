# libFuzzer target for the safetensors reader (seeds: tests/fuzz/seeds/safetensors/).
qkv_add_fuzzer(safetensors tests/fuzz/fuzz_safetensors.cpp src/io/safetensors.cpp src/io/read_file.cpp
               src/core/tensor.cpp src/core/memory.cpp src/core/dtype.cpp)
