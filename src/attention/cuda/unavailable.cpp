// include/qkv/cuda.h for a qkv built without CUDA (QKV_CUDA=OFF, or AUTO without a CUDA
// compiler): every entry point exists, so callers need no #ifdef, and says why it cannot run.
#include "qkv/cuda.h"
#include "qkv/error.h"

namespace qkv::cuda {
namespace {
constexpr const char* kReason = "qkv was built without CUDA (configure with -DQKV_CUDA=ON and a CUDA compiler)";
[[noreturn]] void refuse(const char* function) { throw Error(std::string(function) + ": " + kReason); }
}  // namespace

bool available() { return false; }
std::string unavailable_reason() { return kReason; }
std::string device_name() { refuse("qkv::cuda::device_name"); }
void attention_forward(const DeviceAttention&, void*) { refuse("qkv::cuda::attention_forward"); }
void attention_backward(const DeviceAttentionBackward&, void*) { refuse("qkv::cuda::attention_backward"); }
AttentionResult attention(const Tensor&, const Tensor&, const Tensor&, const AttentionOptions&) {
  refuse("qkv::cuda::attention");
}
AttentionGradients attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&, const AttentionOptions&) {
  refuse("qkv::cuda::attention_backward");
}

}  // namespace qkv::cuda
