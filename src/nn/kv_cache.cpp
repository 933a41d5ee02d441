// KVCache: the keys and values of past decoding steps, allocated once.

#include "nn/common.h"

namespace qkv::nn {

KVCache::KVCache(std::int64_t batch, std::int64_t heads, std::int64_t capacity,
                 std::int64_t head_dim, DType dtype) {
  QKV_CHECK(batch >= 0 && heads >= 0 && capacity >= 0 && head_dim >= 0,
            "KVCache: sizes must be >= 0, got (" << batch << ", " << heads << ", " << capacity
                                                 << ", " << head_dim << ")");
  // f64 is the reference attention's alone; the layers around a cache compute in f32.
  QKV_CHECK_TYPE(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
                 "KVCache: dtype must be f32, bf16 or f16, got " << dtype_name(dtype));
  k = Tensor::zeros({batch, heads, capacity, head_dim}, dtype);
  v = Tensor::zeros({batch, heads, capacity, head_dim}, dtype);
}

void KVCache::append(const Tensor& k_new, const Tensor& v_new) {
  QKV_CHECK(k.defined(), "KVCache::append: the cache is not allocated");
  QKV_CHECK(k_new.defined() && k_new.dim() == 4 && k_new.size(0) == k.size(0) &&
                k_new.size(1) == k.size(1) && k_new.size(3) == k.size(3),
            "KVCache::append: k_new must be (B, H, T, D) = (" << k.size(0) << ", " << k.size(1)
                << ", T, " << k.size(3) << "), got "
                << (k_new.defined() ? k_new.shape_string() : "undefined"));
  QKV_CHECK(v_new.defined() && v_new.shape() == k_new.shape(),
            "KVCache::append: v_new must be " << k_new.shape_string() << ", got "
                                              << (v_new.defined() ? v_new.shape_string() : "undefined"));
  const std::int64_t T = k_new.size(2);
  QKV_CHECK(length + T <= capacity(), "KVCache::append: " << length << " + " << T
                                                          << " tokens exceed the capacity "
                                                          << capacity());
  Tensor kd = k.slice(2, length, length + T);  // (B, H, T, D) view into the cache
  kd.copy_from(k_new);
  Tensor vd = v.slice(2, length, length + T);  // (B, H, T, D) view into the cache
  vd.copy_from(v_new);
  length += T;
}

Tensor KVCache::keys() const { return k.slice(2, 0, length); }
Tensor KVCache::values() const { return v.slice(2, 0, length); }

}  // namespace qkv::nn
