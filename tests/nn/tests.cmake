# GoogleTest sources of tests/nn, appended to QKV_UNIT_TESTS (relative to tests/).
list(APPEND QKV_UNIT_TESTS nn/test_nn.cpp)
list(APPEND QKV_UNIT_TESTS nn/test_backward.cpp)
