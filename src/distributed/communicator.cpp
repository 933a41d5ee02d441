// Session and Communicator over MPI (include/qkv/distributed.h).
#include "distributed/communicator.h"

#include <cstring>
#include <string>
#include <vector>

namespace qkv::distributed {

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(std::string(what) + " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

bool available() noexcept { return true; }

namespace {

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace

Session::Session() : Session(nullptr, nullptr) {}

Session::Session(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  // FUNNELED: qkv's kernels run OpenMP threads, but only the thread that made the
  // Session calls MPI.
  check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  initialized_here_ = true;
}

Session::~Session() {
  if (initialized_here_ && mpi_running()) MPI_Finalize();
}

Communicator::Impl::~Impl() {
  if (comm != MPI_COMM_NULL && mpi_running()) MPI_Comm_free(&comm);
}

namespace {

std::shared_ptr<Communicator::Impl> duplicate(MPI_Comm from) {
  QKV_CHECK(mpi_running(), "qkv::distributed::Communicator: MPI is not initialized (make a "
                           "qkv::distributed::Session first, or call MPI_Init)");
  auto impl = std::make_shared<Communicator::Impl>();
  check_mpi(MPI_Comm_dup(from, &impl->comm), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(impl->comm, &impl->rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(impl->comm, &impl->size), "MPI_Comm_size");
  return impl;
}

}  // namespace

Communicator Communicator::world() { return Communicator(duplicate(MPI_COMM_WORLD)); }

Communicator::Communicator(const void* mpi_comm, std::size_t size_of_comm) {
  QKV_CHECK(size_of_comm == sizeof(MPI_Comm),
            "qkv::distributed::Communicator: MPI_Comm of " << size_of_comm << " bytes, but qkv was built "
            "with an MPI whose MPI_Comm has " << sizeof(MPI_Comm) << " (a different MPI's mpi.h?)");
  MPI_Comm comm;
  std::memcpy(&comm, mpi_comm, sizeof comm);
  impl_ = duplicate(comm);
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }

void Communicator::barrier() const { check_mpi(MPI_Barrier(impl_->comm), "MPI_Barrier"); }

double Communicator::max(double value) const {
  double result = 0.0;
  check_mpi(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MAX, impl_->comm), "MPI_Allreduce");
  return result;
}

double Communicator::min(double value) const {
  double result = 0.0;
  check_mpi(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_MIN, impl_->comm), "MPI_Allreduce");
  return result;
}

std::vector<double> Communicator::all_gather(double value) const {
  std::vector<double> values(static_cast<std::size_t>(impl_->size));
  check_mpi(MPI_Allgather(&value, 1, MPI_DOUBLE, values.data(), 1, MPI_DOUBLE, impl_->comm), "MPI_Allgather");
  return values;
}

}  // namespace qkv::distributed
