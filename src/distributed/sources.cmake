# Sources of src/distributed (ring attention over MPI), appended to QKV_SOURCES. Built on
# MPI when the top-level CMakeLists.txt found it (QKV_MPI_ENABLED); otherwise
# unavailable.cpp stands in, whose entry points throw qkv::Error. The sharding helpers need
# no MPI and are built either way.
list(APPEND QKV_SOURCES src/distributed/shard.cpp)
if(QKV_MPI_ENABLED)
  list(APPEND QKV_SOURCES
    src/distributed/communicator.cpp
    src/distributed/data_parallel.cpp
    src/distributed/ring.cpp
  )
  list(APPEND QKV_LAYER_LIBRARIES MPI::MPI_CXX)
else()
  list(APPEND QKV_SOURCES src/distributed/unavailable.cpp)
endif()
