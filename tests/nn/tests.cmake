# GoogleTest sources of tests/nn, appended to QKV_UNIT_TESTS (relative to tests/).
