# Sources of src/tasks, appended to QKV_SOURCES (paths relative to the project root).
# A task is data, a training loop and an evaluation around a model of src/models.
list(APPEND QKV_SOURCES src/tasks/dates.cpp)
list(APPEND QKV_SOURCES src/tasks/date_translator.cpp)
list(APPEND QKV_SOURCES src/tasks/language_model.cpp)
list(APPEND QKV_SOURCES src/tasks/embedded_model.cpp)
# Semantic search over a corpus; its index file is checked by SHA-256 (io/files.cpp).
list(APPEND QKV_SOURCES src/tasks/search.cpp)
# models/dates, when present, is assembled into embedded_model.cpp (see that file).
set(QKV_DATE_MODEL_DIR ${CMAKE_CURRENT_LIST_DIR}/../../models/dates)
cmake_path(NORMAL_PATH QKV_DATE_MODEL_DIR)
list(APPEND QKV_SOURCES src/tasks/recommender.cpp)
list(APPEND QKV_SOURCES src/tasks/vision.cpp)
