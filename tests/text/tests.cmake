# GoogleTest sources of tests/text, appended to QKV_UNIT_TESTS (relative to tests/).
