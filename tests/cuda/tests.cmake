# tests/cuda: the CUDA backend's tests, in their own binary (qkv_cuda_tests) so it can be
# shipped to a GPU machine alone (scripts/cuda/pack_device.sh). Without a usable GPU the
# GPU cases skip with the reason and the error-path cases run.
set(QKV_CUDA_TEST_SOURCES cuda/test_cuda_forward.cpp)
option(QKV_CUDA_BACKWARD_TESTS "Build tests/cuda/test_cuda_backward.cpp into qkv_cuda_tests" ON)
if(QKV_CUDA_BACKWARD_TESTS AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/cuda/test_cuda_backward.cpp)
  list(APPEND QKV_CUDA_TEST_SOURCES cuda/test_cuda_backward.cpp)
endif()
add_executable(qkv_cuda_tests ${QKV_CUDA_TEST_SOURCES})
target_link_libraries(qkv_cuda_tests PRIVATE qkv GTest::gtest GTest::gtest_main)
target_include_directories(qkv_cuda_tests PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_options(qkv_cuda_tests PRIVATE ${QKV_WARNINGS})
gtest_discover_tests(qkv_cuda_tests DISCOVERY_TIMEOUT 60 TEST_PREFIX cuda. PROPERTIES TIMEOUT 600)
