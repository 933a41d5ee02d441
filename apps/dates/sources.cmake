# Dates: the bilingual date generator, the translator's training and evaluation, the
# embedded model (models/dates) and `qkv translate`.
list(APPEND QKV_APPS_SOURCES apps/dates/dates.cpp apps/dates/date_translator.cpp apps/dates/embedded_model.cpp
                             apps/dates/options.cpp apps/dates/model_type.cpp)
list(APPEND QKV_APPS_CLI_SOURCES apps/dates/cli_translate.cpp)
list(APPEND QKV_APPS_UNIT_TESTS apps/dates/tests/test_dates.cpp apps/dates/tests/test_date_translator.cpp
                                apps/dates/tests/test_date_checking.cpp)
# models/dates, when present, is assembled into embedded_model.cpp (see that file).
set(QKV_DATE_MODEL_DIR ${CMAKE_CURRENT_LIST_DIR}/../../models/dates)
cmake_path(NORMAL_PATH QKV_DATE_MODEL_DIR)
list(APPEND QKV_APPS_PYTHON_SOURCES apps/dates/python.cpp)
