# The distributed layer's tests (tests/distributed): one GoogleTest binary run under mpirun
# with 2, 3 and 4 ranks, one thread each (the test machines have 2 cores: 3 and 4 ranks
# oversubscribe them). Without MPI (QKV_MPI_ENABLED off) there is nothing to run: the
# distributed API then only throws, which qkv_unit_tests does not need to see.
if(QKV_MPI_ENABLED)
  add_executable(qkv_distributed_tests ${CMAKE_CURRENT_LIST_DIR}/test_ring.cpp
                                     ${CMAKE_CURRENT_LIST_DIR}/test_data_parallel.cpp)
  target_link_libraries(qkv_distributed_tests PRIVATE qkv_apps MPI::MPI_CXX GTest::gtest)
  target_include_directories(qkv_distributed_tests PRIVATE ${PROJECT_SOURCE_DIR}/src ${CMAKE_CURRENT_LIST_DIR}/..)
  # --allow-run-as-root: Open MPI refuses root otherwise (the test machines build as root);
  # --oversubscribe: more ranks than cores; --bind-to none: no rank pinned to a core.
  set(QKV_MPIRUN_FLAGS ${MPIEXEC_PREFLAGS} --oversubscribe --bind-to none)
  execute_process(COMMAND id -u OUTPUT_VARIABLE QKV_UID OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(QKV_UID STREQUAL "0")
    list(PREPEND QKV_MPIRUN_FLAGS --allow-run-as-root)
  endif()
  foreach(ranks 2 3 4)
    add_test(NAME distributed.ring_attention_np${ranks}
             COMMAND ${MPIEXEC_EXECUTABLE} ${QKV_MPIRUN_FLAGS} ${MPIEXEC_NUMPROC_FLAG} ${ranks}
                     $<TARGET_FILE:qkv_distributed_tests>)
    set_tests_properties(distributed.ring_attention_np${ranks} PROPERTIES
      TIMEOUT 120 LABELS distributed PROCESSORS ${ranks}
      ENVIRONMENT "QKV_NUM_THREADS=1;OMP_NUM_THREADS=1;QKV_BIND_THREADS=0")
  endforeach()
endif()
