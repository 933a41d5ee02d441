# Sources of src/io, appended to QKV_SOURCES (paths relative to the project root).
list(APPEND QKV_SOURCES src/io/safetensors.cpp src/io/json_config.cpp src/io/read_file.cpp src/io/files.cpp)
list(APPEND QKV_SOURCES src/io/text_input.cpp src/io/csv.cpp src/io/idx.cpp src/io/image.cpp)
# Bounded JSON parsing: every JSON text read goes through io::parse_json (json_bounded.h).
list(APPEND QKV_SOURCES src/io/json_bounded.cpp)
# ICU checks that the lines of text inputs are UTF-8 (text_input.cpp).
find_package(ICU REQUIRED COMPONENTS uc)
list(APPEND QKV_LAYER_LIBRARIES ICU::uc)
# zlib inflates gzip-compressed IDX files (idx.cpp, Fashion-MNIST ships them so); libpng
# reads PNG images (image.cpp).
find_package(ZLIB REQUIRED)
find_package(PNG REQUIRED)
list(APPEND QKV_LAYER_LIBRARIES ZLIB::ZLIB PNG::PNG)
# SHA-256 (OpenSSL's libcrypto): a model directory's config.json records its files' digests,
# and the search index its corpus' (files.cpp).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
list(APPEND QKV_LAYER_LIBRARIES OpenSSL::Crypto)
