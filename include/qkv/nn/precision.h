// Mixed-precision products for training: PyTorch's CPU autocast with dtype=torch.bfloat16.
//
// Within a ProductPrecision(DType::bf16) scope on a thread, the matrix products of qkv::nn
// take their inputs rounded to bf16 (round to nearest even) and accumulate in f32:
//   - linear() with a plain weight: x and W rounded, y = x·Wᵀ in f32, bias and epilogue in f32;
//   - Linear::forward with a record keeps x in bf16 (half the memory), and
//     linear_backward() runs dx = dy·W and dW += dyᵀ·x on bf16 inputs (dy, W, x) into f32;
//   - MultiheadAttention hands q, k and v to the attention kernel in bf16 (its vdpbf16ps
//     path), forward and backward, and keeps them in bf16 for the backward.
// Everything else stays f32, as under torch.autocast: the weights (the master copy the
// optimizer updates), their gradients and AdamW's moments, LayerNorm's statistics, softmax,
// GELU, dropout, the residual stream and every loss. With f32 (the default), nothing
// changes: the products are f32, exactly as outside any scope.
//
// The scope is thread-local, as torch's autocast state is: the one training loop
// (qkv/trainer.h) opens it around each step's forward and backward on the thread that runs
// them; evaluation runs outside it, in f32.
//
// Only where the CPU multiplies bf16 pairs natively (AVX512-BF16 or AMX): elsewhere oneDNN
// would emulate bf16 at a fraction of f32's speed, so check_bf16_products refuses instead.
#pragma once

#include <string>

#include "qkv/dtype.h"

namespace qkv::nn {

// This thread's product dtype: f32 outside any scope, else the innermost scope's.
DType product_dtype();

// Sets this thread's product dtype (f32 or bf16) for its lifetime; restores the one before.
class ProductPrecision {
 public:
  explicit ProductPrecision(DType products);
  ~ProductPrecision();
  ProductPrecision(const ProductPrecision&) = delete;
  ProductPrecision& operator=(const ProductPrecision&) = delete;

 private:
  DType before_;
};

// Throws qkv::Error (a ValueError in Python), starting with `who`, unless this process multiplies
// bf16 pairs natively: the CPU has AVX512-BF16 (or AMX-BF16) and the attention kernels'
// instruction set (QKV_ISA, qkv::fast_kernel_isa) is one that uses them (avx512_bf16, amx).
void check_bf16_products(const std::string& who);

// "f32" -> DType::f32, "bf16" -> DType::bf16; anything else: qkv::Error naming `who`.
DType parse_precision(const std::string& name, const std::string& who);

}  // namespace qkv::nn
