# Sources of src/models, appended to QKV_SOURCES (paths relative to the project root).
list(APPEND QKV_SOURCES src/models/bert.cpp)
list(APPEND QKV_SOURCES src/models/gpt2.cpp)
list(APPEND QKV_SOURCES src/models/dates.cpp)
list(APPEND QKV_SOURCES src/models/seq2seq.cpp)
list(APPEND QKV_SOURCES src/models/date_translator.cpp)
list(APPEND QKV_SOURCES src/models/embedded_model.cpp)
# models/dates, when present, is assembled into embedded_model.cpp (see that file).
set(QKV_DATE_MODEL_DIR ${CMAKE_CURRENT_LIST_DIR}/../../models/dates)
cmake_path(NORMAL_PATH QKV_DATE_MODEL_DIR)
