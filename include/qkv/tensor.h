// qkv::Tensor — a strided n-dimensional view over shared, 64-byte-aligned storage.
//
// Shape and strides are in elements (not bytes), row-major by default. Views
// (transpose, permute, slice, select, unsqueeze, expand, a reshape of a contiguous
// tensor) share storage and copy nothing, so a (B, L, H, D) projection can be fed to
// attention as (B, H, L, D) by permute() alone. Strides may be 0 (broadcast) but not
// negative. Copies are explicit: contiguous(), clone(), to(dtype).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qkv/dtype.h"

namespace qkv {

using Shape = std::vector<std::int64_t>;
using Strides = std::vector<std::int64_t>;

inline constexpr std::size_t kTensorAlignment = 64;  // one cache line, one AVX-512 vector

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() == false

  // Owning allocations (64-byte aligned, row-major).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  static Tensor full(const Shape& shape, float value, DType dtype = DType::f32);
  // Copies `values` (row-major, size == numel) converting to `dtype` (round to nearest even).
  static Tensor from_vector(const Shape& shape, std::span<const float> values,
                            DType dtype = DType::f32);
  // The same from doubles (f64 keeps them exactly; other dtypes as store_from_f64).
  static Tensor from_vector_f64(const Shape& shape, std::span<const double> values,
                                DType dtype = DType::f64);
  // A view of memory owned by someone else; `owner` is kept alive as long as any view.
  static Tensor from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype,
                          std::shared_ptr<void> owner = nullptr);

  bool defined() const { return defined_; }
  DType dtype() const { return dtype_; }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  // Negative d counts from the end. Inline: kernels ask for strides in their loops.
  std::int64_t size(std::int64_t d) const { return shape_[dim_index(d, "Tensor::size")]; }
  std::int64_t stride(std::int64_t d) const { return strides_[dim_index(d, "Tensor::stride")]; }
  std::int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  // Pointer to element (0, ..., 0).
  void* data() { return data_; }
  const void* data() const { return data_; }
  template <class T> T* data_as() { return static_cast<T*>(data_); }
  template <class T> const T* data_as() const { return static_cast<const T*>(data_); }

  // Views: no copy.
  Tensor transpose(std::int64_t a, std::int64_t b) const;
  Tensor permute(const std::vector<std::int64_t>& order) const;
  Tensor slice(std::int64_t d, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor select(std::int64_t d, std::int64_t index) const;  // drops dimension d
  Tensor unsqueeze(std::int64_t d) const;
  Tensor expand(const Shape& shape) const;  // size-1 dimensions broadcast with stride 0
  Tensor view(const Shape& shape) const;    // contiguous tensors only; one -1 is inferred
  // A view when contiguous, else a contiguous copy.
  Tensor reshape(const Shape& shape) const;

  // Copies.
  Tensor contiguous() const;  // *this if already contiguous (shared), else a row-major copy
  Tensor clone() const;       // always a row-major copy
  Tensor to(DType dtype) const;
  void copy_from(const Tensor& src);  // same shape; converts dtype

  // Element access for tests, printing and the reference path (slow, bounds-checked).
  // get/set/to_vector work in f32 (an f64 element is rounded to f32); to_vector_f64 reads
  // every dtype exactly.
  float get(std::span<const std::int64_t> index) const;
  float get(std::initializer_list<std::int64_t> index) const {
    return get(std::span<const std::int64_t>(index.begin(), index.size()));
  }
  void set(std::span<const std::int64_t> index, float value);
  void set(std::initializer_list<std::int64_t> index, float value) {
    set(std::span<const std::int64_t>(index.begin(), index.size()), value);
  }
  std::vector<float> to_vector() const;  // logical row-major order
  std::vector<double> to_vector_f64() const;  // logical row-major order, exact

  std::string shape_string() const;  // "(2, 3, 4)"

 private:
  // d wrapped into [0, rank); throws qkv::Error naming `what` when out of range.
  std::size_t dim_index(std::int64_t d, const char* what) const {
    const auto rank = static_cast<std::int64_t>(shape_.size());
    if (d < -rank || d >= rank) throw_bad_dim(d, what);
    return static_cast<std::size_t>(d < 0 ? d + rank : d);
  }
  [[noreturn]] void throw_bad_dim(std::int64_t d, const char* what) const;
  std::int64_t offset_of(std::span<const std::int64_t> index, const char* what) const;

  std::shared_ptr<void> storage_;  // keeps the allocation alive
  void* data_ = nullptr;           // element (0, ..., 0)
  Shape shape_;                    // sizes per dimension
  Strides strides_;                // in elements, per dimension
  DType dtype_ = DType::f32;
  bool defined_ = false;
};

// Reads element `offset` (in elements from `base`) of a tensor of `dtype` as f32 (f64
// rounded to nearest).
float load_as_f32(const void* base, std::int64_t offset, DType dtype);
// Writes `value` converted to `dtype` (round to nearest even) at element `offset`.
void store_from_f32(void* base, std::int64_t offset, DType dtype, float value);
// The same in double: every dtype reads exactly; a store to f32 is static_cast, to bf16
// and f16 through f32 (dtype.h: as PyTorch).
double load_as_f64(const void* base, std::int64_t offset, DType dtype);
void store_from_f64(void* base, std::int64_t offset, DType dtype, double value);

std::string shape_to_string(const Shape& shape);

}  // namespace qkv
