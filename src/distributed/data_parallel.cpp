// Data-parallel training over MPI (include/qkv/distributed.h): the parameters broadcast from
// one rank, and the gradient reducer that sums gradients over the ranks in buckets started
// during the backward.
#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "distributed/communicator.h"

namespace qkv::distributed {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Collective: every rank's `value` equal, else the same qkv::Error on every rank.
void check_agree(double value, const Communicator& comm, const std::string& what) {
  const double lo = comm.min(value), hi = comm.max(value);
  QKV_CHECK(lo == hi, what << " differs across the " << comm.size() << " ranks (from " << lo << " to " << hi << ")");
}

}  // namespace

double Communicator::sum(double value) const {
  double result = 0.0;
  check_mpi(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, MPI_SUM, impl_->comm), "MPI_Allreduce");
  return result;
}

void Communicator::abort(int code) const {
  MPI_Abort(impl_->comm, code);
  std::abort();  // MPI_Abort does not return; if it ever did, this process must still end
}

void check_same_everywhere(const std::string& key, const Communicator& comm, const std::string& what) {
  const std::uint64_t h = std::hash<std::string>{}(key);
  // Two halves of 32 bits, each exact in a double.
  const double high = static_cast<double>(h >> 32), low = static_cast<double>(h & 0xffffffffu);
  QKV_CHECK(comm.min(high) == comm.max(high) && comm.min(low) == comm.max(low),
            what << ": the " << comm.size() << " ranks were given different options (every rank of "
                    "mpirun must run the same command)");
}

void broadcast(const nn::ParameterList& tensors, const Communicator& comm, int root) {
  QKV_CHECK(root >= 0 && root < comm.size(),
            "qkv::distributed::broadcast: root " << root << " is not a rank of " << comm.size());
  double bytes = 0;
  for (const auto& [name, t] : tensors) {
    QKV_CHECK(t != nullptr && t->defined() && t->is_contiguous(),
              "qkv::distributed::broadcast: '" << name << "' must be a defined contiguous tensor");
    bytes += static_cast<double>(t->nbytes());
  }
  check_agree(static_cast<double>(tensors.size()), comm, "qkv::distributed::broadcast: the number of tensors");
  check_agree(bytes, comm, "qkv::distributed::broadcast: the tensors' total size in bytes");
  for (const auto& [name, t] : tensors) {
    QKV_CHECK(t->nbytes() <= static_cast<std::size_t>(INT32_MAX),
              "qkv::distributed::broadcast: '" << name << "' is over 2 GiB");
    check_mpi(MPI_Bcast(t->data(), static_cast<int>(t->nbytes()), MPI_BYTE, root, comm.impl().comm),
              "MPI_Bcast");
  }
}

struct GradientReducer::State {
  struct Bucket {
    std::vector<Tensor*> members;   // in the order they are packed
    std::vector<float> buffer;      // Σ members' sizes
    int waiting = 0;                // members not yet ready in this step
    bool started = false;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  Communicator comm;
  std::vector<Bucket> buckets;
  std::unordered_map<const Tensor*, std::size_t> bucket_of;
  std::vector<const Tensor*> ready_this_step;  // to refuse a gradient reported twice
  std::size_t next_start = 0;                  // buckets start in index order
  float weight = 1.0f;
  ReductionTimings timings;

  explicit State(const Communicator& c) : comm(c) {}

  void start(Bucket& bucket) {
    const auto t0 = Clock::now();
    std::size_t at = 0;
    for (Tensor* g : bucket.members) {
      const float* src = g->data_as<float>();
      const auto n = static_cast<std::size_t>(g->numel());
      for (std::size_t i = 0; i < n; ++i) bucket.buffer[at + i] = src[i] * weight;
      at += n;
    }
    timings.pack_ms += ms_since(t0);
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, bucket.buffer.data(), static_cast<int>(bucket.buffer.size()),
                             MPI_FLOAT, MPI_SUM, comm.impl().comm, &bucket.request),
              "MPI_Iallreduce");
    bucket.started = true;
  }
  // Starts, in order, every bucket whose members are all ready.
  void start_ready(bool during_backward) {
    while (next_start < buckets.size() && buckets[next_start].waiting == 0) {
      start(buckets[next_start]);
      if (during_backward) ++timings.started_early;
      ++next_start;
    }
  }
  // Lets the reductions in flight move (Open MPI progresses only inside MPI calls).
  void progress() {
    const auto t0 = Clock::now();
    std::vector<MPI_Request> requests;
    for (std::size_t b = 0; b < next_start; ++b)
      if (buckets[b].request != MPI_REQUEST_NULL) requests.push_back(buckets[b].request);
    if (requests.empty()) return;
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall");
    // MPI_Testall frees completed requests only when all are done; keep the handles in sync.
    if (done)
      for (std::size_t b = 0; b < next_start; ++b) buckets[b].request = MPI_REQUEST_NULL;
    timings.progress_ms += ms_since(t0);
  }
};

GradientReducer::GradientReducer(const nn::ParameterList& grads, const Communicator& comm,
                                 std::size_t bucket_bytes)
    : state_(std::make_unique<State>(comm)) {
  QKV_CHECK(bucket_bytes >= sizeof(float), "GradientReducer: bucket_bytes must be at least 4, got " << bucket_bytes);
  double total = 0;
  // Reverse order: the backward reports the last modules first.
  for (auto it = grads.rbegin(); it != grads.rend(); ++it) {
    const auto& [name, g] = *it;
    QKV_CHECK(g != nullptr && g->defined() && g->dtype() == DType::f32 && g->is_contiguous(),
              "GradientReducer: gradient '" << name << "' must be a defined contiguous f32 tensor");
    QKV_CHECK(!state_->bucket_of.count(g), "GradientReducer: gradient '" << name << "' is listed twice");
    const std::size_t bytes = static_cast<std::size_t>(g->numel()) * sizeof(float);
    if (state_->buckets.empty() ||
        (!state_->buckets.back().members.empty() && state_->buckets.back().buffer.size() * sizeof(float) + bytes > bucket_bytes)) {
      state_->buckets.emplace_back();
    }
    State::Bucket& bucket = state_->buckets.back();
    bucket.members.push_back(g);
    bucket.buffer.resize(bucket.buffer.size() + static_cast<std::size_t>(g->numel()));
    state_->bucket_of[g] = state_->buckets.size() - 1;
    total += static_cast<double>(g->numel());
  }
  for (const State::Bucket& b : state_->buckets)
    QKV_CHECK(b.buffer.size() <= static_cast<std::size_t>(INT32_MAX),
              "GradientReducer: a bucket of " << b.buffer.size() << " floats exceeds MPI's int count");
  // Every rank must bucket the same way, or the reductions would not pair up.
  check_agree(static_cast<double>(grads.size()), comm, "GradientReducer: the number of gradients");
  check_agree(total, comm, "GradientReducer: the gradients' total number of elements");
  check_agree(static_cast<double>(state_->buckets.size()), comm, "GradientReducer: the number of buckets");
  hook_ = [this](const nn::ParameterList& ready_grads) { ready(ready_grads); };
  begin(1.0);
}

GradientReducer::~GradientReducer() {
  // A step abandoned by an exception: its reductions must still complete before the buffers go.
  for (State::Bucket& b : state_->buckets)
    if (b.request != MPI_REQUEST_NULL) MPI_Wait(&b.request, MPI_STATUS_IGNORE);
}

void GradientReducer::begin(double weight) {
  for (State::Bucket& b : state_->buckets) {
    QKV_CHECK(b.request == MPI_REQUEST_NULL && (!b.started || state_->next_start == state_->buckets.size()),
              "GradientReducer::begin: the previous step was not finished");
    b.waiting = static_cast<int>(b.members.size());
    b.started = false;
  }
  state_->next_start = 0;
  state_->ready_this_step.clear();
  state_->weight = static_cast<float>(weight);
  state_->timings = ReductionTimings{};
  state_->timings.buckets = static_cast<int>(state_->buckets.size());
}

void GradientReducer::ready(const nn::ParameterList& grads) {
  for (const auto& [name, g] : grads) {
    const auto it = state_->bucket_of.find(g);
    QKV_CHECK(it != state_->bucket_of.end(),
              "GradientReducer::ready: '" << name << "' is not one of the gradients it reduces");
    QKV_CHECK(std::find(state_->ready_this_step.begin(), state_->ready_this_step.end(), g) ==
                  state_->ready_this_step.end(),
              "GradientReducer::ready: '" << name << "' was reported twice in one step");
    state_->ready_this_step.push_back(g);
    --state_->buckets[it->second].waiting;
  }
  state_->start_ready(true);
  state_->progress();
}

ReductionTimings GradientReducer::finish() {
  for (State::Bucket& b : state_->buckets) b.waiting = 0;  // what was never reported is ready now
  state_->start_ready(false);
  const auto t0 = Clock::now();
  for (State::Bucket& b : state_->buckets)
    if (b.request != MPI_REQUEST_NULL) check_mpi(MPI_Wait(&b.request, MPI_STATUS_IGNORE), "MPI_Wait");
  state_->timings.wait_ms = ms_since(t0);
  const auto t1 = Clock::now();
  for (State::Bucket& b : state_->buckets) {
    std::size_t at = 0;
    for (Tensor* g : b.members) {
      const auto n = static_cast<std::size_t>(g->numel());
      std::memcpy(g->data(), b.buffer.data() + at, n * sizeof(float));
      at += n;
    }
  }
  state_->timings.pack_ms += ms_since(t1);
  return state_->timings;
}

}  // namespace qkv::distributed
