// The host form of the CUDA forward: qkv::Tensor inputs in host memory, validated as
// qkv::attention validates them (problem.h), copied to the GPU, computed by forward.cu,
// copied back. What the GPU kernels do not do is refused by name before any copy
// (host_common.h).
#include <cuda_runtime_api.h>

#include "attention/cuda/host_common.h"

namespace qkv::cuda {

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& options) {
  const char* f = "qkv::cuda::attention: ";
  const qkv::detail::AttentionProblem p = detail::gpu_problem(q, k, v, options, f);
  QKV_CHECK(!options.return_probs, f << "return_probs is not supported on the GPU");

  AttentionResult result;
  result.out = Tensor::empty({p.B, p.Hq, p.Lq, p.Dv}, q.dtype());                    // (B, Hq, Lq, D)
  if (options.return_lse) result.lse = Tensor::empty({p.B, p.Hq, p.Lq}, DType::f32);  // (B, Hq, Lq)

  detail::DeviceInputs inputs;
  DeviceAttention a = detail::upload_inputs(p, options, q, k, v, inputs);
  detail::DeviceBuffer out(result.out.nbytes(), "out");
  detail::DeviceBuffer lse(options.return_lse ? result.lse.nbytes() : 0, "lse");
  a.out = out.get();
  a.lse = lse.as<float>();
  // Poison: every bit set is NaN in bf16, f16 and f32, so an element the kernels fail to
  // write shows up in the tests (tests/cuda) instead of passing as stale memory.
  if (out.get() != nullptr) detail::check_cuda(cudaMemset(out.get(), 0xff, result.out.nbytes()), "cudaMemset(out)");
  if (lse.get() != nullptr) detail::check_cuda(cudaMemset(lse.get(), 0xff, result.lse.nbytes()), "cudaMemset(lse)");
  attention_forward(a, nullptr);
  detail::check_cuda(cudaDeviceSynchronize(), "forward attention kernel");
  detail::download(result.out.data(), out, result.out.nbytes(), "cudaMemcpy(out)");
  if (options.return_lse) detail::download(result.lse.data(), lse, result.lse.nbytes(), "cudaMemcpy(lse)");
  return result;
}

}  // namespace qkv::cuda
