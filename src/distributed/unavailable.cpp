// The distributed API of a qkv built without MPI (CMake QKV_MPI=OFF, or AUTO without MPI
// found): declared as always, every entry point that needs MPI throws qkv::Error.
#include <string>

#include "qkv/distributed.h"
#include "qkv/error.h"

namespace qkv::distributed {
namespace {

[[noreturn]] void unavailable(const char* what) {
  throw Error(std::string(what) +
              ": qkv was built without MPI (configure with -DQKV_MPI=ON and an MPI installed, "
              "e.g. Debian's libopenmpi-dev)");
}

}  // namespace

struct Communicator::Impl {};

bool available() noexcept { return false; }

Session::Session() { unavailable("qkv::distributed::Session"); }
Session::Session(int*, char***) { unavailable("qkv::distributed::Session"); }
Session::~Session() = default;

Communicator Communicator::world() { unavailable("qkv::distributed::Communicator::world"); }
Communicator::Communicator(const void*, std::size_t) { unavailable("qkv::distributed::Communicator"); }
int Communicator::rank() const { unavailable("qkv::distributed::Communicator::rank"); }
int Communicator::size() const { unavailable("qkv::distributed::Communicator::size"); }
void Communicator::barrier() const { unavailable("qkv::distributed::Communicator::barrier"); }
double Communicator::max(double) const { unavailable("qkv::distributed::Communicator::max"); }
double Communicator::min(double) const { unavailable("qkv::distributed::Communicator::min"); }
std::vector<double> Communicator::all_gather(double) const { unavailable("qkv::distributed::Communicator::all_gather"); }
double Communicator::sum(double) const { unavailable("qkv::distributed::Communicator::sum"); }
void Communicator::abort(int) const { unavailable("qkv::distributed::Communicator::abort"); }

void broadcast(const nn::ParameterList&, const Communicator&, int) { unavailable("qkv::distributed::broadcast"); }
void check_same_everywhere(const std::string&, const Communicator&, const std::string&) {
  unavailable("qkv::distributed::check_same_everywhere");
}

struct GradientReducer::State {};
GradientReducer::GradientReducer(const nn::ParameterList&, const Communicator&, std::size_t) {
  unavailable("qkv::distributed::GradientReducer");
}
GradientReducer::~GradientReducer() = default;
void GradientReducer::begin(double) { unavailable("qkv::distributed::GradientReducer::begin"); }
void GradientReducer::ready(const nn::ParameterList&) { unavailable("qkv::distributed::GradientReducer::ready"); }
ReductionTimings GradientReducer::finish() { unavailable("qkv::distributed::GradientReducer::finish"); }

RingAttentionResult ring_attention(const Tensor&, const Tensor&, const Tensor&,
                                   const AttentionOptions&, const Communicator&) {
  unavailable("ring_attention");
}

RingAttentionGradients ring_attention_backward(const Tensor&, const Tensor&, const Tensor&,
                                               const Tensor&, const Tensor&, const Tensor&,
                                               const AttentionOptions&, const Communicator&) {
  unavailable("ring_attention_backward");
}

Tensor gather_sequence(const Tensor&, const Communicator&, std::int64_t) { unavailable("gather_sequence"); }
double ring_exchange_ms(const Tensor&, const Tensor&, const Communicator&) { unavailable("ring_exchange_ms"); }

}  // namespace qkv::distributed
