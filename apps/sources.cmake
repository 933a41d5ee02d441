# The applications, on top of the library: each folder holds one application's sources, its
# data readers, its `qkv` subcommand, its Python binding and its tests, and appends them to
#   QKV_APPS_SOURCES         the qkv_apps library (paths relative to the project root)
#   QKV_APPS_LIBRARIES       what only applications link (zlib, libpng)
#   QKV_APPS_CLI_SOURCES     build/qkv's subcommands (tools/qkv)
#   QKV_APPS_PYTHON_SOURCES  the Python module's bindings (python/)
#   QKV_APPS_UNIT_TESTS      GoogleTest sources (tests/)
# An application includes the library's headers and its own ("dates/dates.h"), never another
# application's; tests/layers/check_layers.py holds every file to that.
set(QKV_APPS_SOURCES apps/model_types.cpp)  # every application's model types, registered
set(QKV_APPS_LIBRARIES)
set(QKV_APPS_CLI_SOURCES)
set(QKV_APPS_PYTHON_SOURCES)
set(QKV_APPS_UNIT_TESTS)
include(${CMAKE_CURRENT_LIST_DIR}/dates/sources.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/language_model/sources.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/search/sources.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/recommender/sources.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/vision/sources.cmake)
