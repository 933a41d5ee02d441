# GoogleTest sources of tests/tasks, appended to QKV_UNIT_TESTS (relative to tests/).
list(APPEND QKV_UNIT_TESTS tasks/test_dates.cpp)
list(APPEND QKV_UNIT_TESTS tasks/test_date_translator.cpp)
list(APPEND QKV_UNIT_TESTS tasks/test_date_checking.cpp)
list(APPEND QKV_UNIT_TESTS tasks/test_recommender.cpp)
list(APPEND QKV_UNIT_TESTS tasks/test_vision.cpp)
