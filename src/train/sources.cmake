# Sources of src/train, appended to QKV_SOURCES: the one training loop (qkv/trainer.h), its
# checkpoint and progress, and what it runs (AdamW, the schedule, clipping, the loss: qkv/train.h).
list(APPEND QKV_SOURCES
  src/train/optimizer.cpp
  src/train/checkpoint.cpp
  src/train/progress.cpp
  src/train/loop.cpp
)
