# GoogleTest sources of tests/io, appended to QKV_UNIT_TESTS (relative to tests/).
