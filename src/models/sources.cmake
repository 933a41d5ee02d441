# Sources of src/models, appended to QKV_SOURCES (paths relative to the project root).
list(APPEND QKV_SOURCES src/models/bert.cpp)
list(APPEND QKV_SOURCES src/models/gpt2.cpp)
list(APPEND QKV_SOURCES src/models/gpt2_train.cpp)
list(APPEND QKV_SOURCES src/models/seq2seq.cpp)
list(APPEND QKV_SOURCES src/models/use_lite.cpp)
list(APPEND QKV_SOURCES src/models/checkpoint.cpp)
list(APPEND QKV_SOURCES src/models/sasrec.cpp)
list(APPEND QKV_SOURCES src/models/vit.cpp)
