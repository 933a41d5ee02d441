# GoogleTest sources of tests/io, appended to QKV_UNIT_TESTS (relative to tests/).
list(APPEND QKV_UNIT_TESTS io/test_safetensors.cpp io/test_json_config.cpp io/test_text_input.cpp
     io/test_files.cpp io/test_options.cpp)
