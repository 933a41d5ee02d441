# Sources of src/io, appended to QKV_SOURCES (paths relative to the project root): the
# checkpoint and configuration formats every model reads, the one file writer, and user text.
# The applications' data readers (CSV, IDX, PNG) live with their applications under apps/.
list(APPEND QKV_SOURCES src/io/safetensors.cpp src/io/json_config.cpp src/io/read_file.cpp src/io/files.cpp)
list(APPEND QKV_SOURCES src/io/text_input.cpp src/io/options.cpp)
# Bounded JSON parsing: every JSON text read goes through io::parse_json (json_bounded.h).
list(APPEND QKV_SOURCES src/io/json_bounded.cpp)
# ICU checks that the lines of text inputs are UTF-8 (text_input.cpp).
find_package(ICU REQUIRED COMPONENTS uc)
list(APPEND QKV_LAYER_LIBRARIES ICU::uc)
# SHA-256 (OpenSSL's libcrypto): the one writer records the digest of every file it writes
# in a model directory's config.json, and every loader checks them (files.cpp).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
list(APPEND QKV_LAYER_LIBRARIES OpenSSL::Crypto)
