# Sources of src/io, appended to QKV_SOURCES (paths relative to the project root).
list(APPEND QKV_SOURCES src/io/safetensors.cpp src/io/json_config.cpp src/io/read_file.cpp)
