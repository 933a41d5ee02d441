# GoogleTest sources of tests/train, appended to QKV_UNIT_TESTS (relative to tests/): what the
# one training loop runs (AdamW, the schedule, clipping, the loss) and the loop itself.
list(APPEND QKV_UNIT_TESTS
  train/test_optimizer.cpp
  train/test_loop.cpp
)
