// The thread's product dtype (qkv/nn/precision.h) and the check that bf16 runs natively.

#include "qkv/nn/precision.h"

#include <cstring>

#include "core/parallel.h"
#include "nn/common.h"
#include "qkv/attention.h"
#include "qkv/cpu.h"
#include "qkv/error.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace {
thread_local DType current_products = DType::f32;
}  // namespace

DType product_dtype() { return current_products; }

ProductPrecision::ProductPrecision(DType products) : before_(current_products) {
  QKV_CHECK_TYPE(products == DType::f32 || products == DType::bf16,
                 "ProductPrecision: the products run in f32 or bf16, got " << dtype_name(products));
  current_products = products;
}

ProductPrecision::~ProductPrecision() { current_products = before_; }

void check_bf16_products(const std::string& who) {
  const CpuFeatures& f = cpu_features();
  QKV_CHECK(f.avx512_bf16 || f.amx_bf16,
            who << ": this CPU has no bf16 dot product (AVX512-BF16 or AMX-BF16; it has "
                << cpu_summary()
                << "); oneDNN would emulate bf16 there at a fraction of f32's speed, so bf16 "
                   "training is refused: train in f32");
  const char* isa = fast_kernel_isa();
  QKV_CHECK(std::strcmp(isa, "avx512_bf16") == 0 || std::strcmp(isa, "amx") == 0 ||
                std::strcmp(isa, "amx_emulated") == 0,
            who << ": the attention kernels run the instruction set " << isa
                << " (QKV_ISA), which has no bf16 dot product; unset QKV_ISA or set it to "
                   "avx512_bf16 to train in bf16");
}

DType parse_precision(const std::string& name, const std::string& who) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  throw Error(who + ": precision must be f32 or bf16, got '" + name + "'");
}

namespace detail {

Tensor contiguous_bf16(const Tensor& x, const char* fn, const char* name) {
  if (x.defined() && x.dtype() == DType::bf16 && x.is_contiguous()) return x;
  const Tensor f = contiguous_f32(x, fn, name);
  Tensor out = Tensor::empty(x.shape(), DType::bf16);
  const float* from = f.data_as<float>();
  std::uint16_t* to = out.data_as<std::uint16_t>();
  const std::int64_t n = out.numel();
  qkv::detail::parallel_chunks("nn.to_bf16", n, n >= (1 << 16), num_threads(),
                               [&](std::int64_t i0, std::int64_t i1) {
                                 for (std::int64_t i = i0; i < i1; ++i) to[i] = f32_to_bf16(from[i]);
                               });
  return out;
}

}  // namespace detail

}  // namespace qkv::nn
