// Communicator::Impl: the MPI communicator behind the opaque handle of
// include/qkv/distributed.h, and the error check every MPI call goes through.
#pragma once

#include <mpi.h>

#include <string>

#include "qkv/distributed.h"
#include "qkv/error.h"

namespace qkv::distributed {

struct Communicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;  // qkv's own duplicate
  int rank = 0;
  int size = 1;
  ~Impl();
};

// Throws qkv::Error naming the call when an MPI call did not return MPI_SUCCESS (qkv's
// communicators use MPI_ERRORS_RETURN, so errors come back instead of aborting).
void check_mpi(int code, const char* what);

}  // namespace qkv::distributed
