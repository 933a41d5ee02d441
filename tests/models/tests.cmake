# GoogleTest sources of tests/models, appended to QKV_UNIT_TESTS (relative to tests/).
