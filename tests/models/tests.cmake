# GoogleTest sources of tests/models, appended to QKV_UNIT_TESTS (relative to tests/).
list(APPEND QKV_UNIT_TESTS models/test_bert.cpp)
list(APPEND QKV_UNIT_TESTS models/test_gpt2.cpp)
list(APPEND QKV_UNIT_TESTS models/test_seq2seq.cpp)
