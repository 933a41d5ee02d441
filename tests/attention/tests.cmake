# GoogleTest sources of tests/attention, appended to QKV_UNIT_TESTS (relative to tests/).
list(APPEND QKV_UNIT_TESTS
  attention/test_reference.cpp
  attention/test_errors.cpp
  attention/test_fast.cpp
  attention/test_dispatch.cpp
  attention/test_backward.cpp
  attention/test_limits.cpp
  attention/test_float64.cpp
  attention/test_query_shift.cpp
)
