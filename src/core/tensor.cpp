#include "qkv/tensor.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>
#include <type_traits>

#include "core/storage.h"
#include "qkv/error.h"

namespace qkv {
namespace {

std::int64_t checked_numel(const Shape& shape, const char* what) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) {
    QKV_CHECK(s >= 0, what << ": sizes must be >= 0, got shape " << shape_to_string(shape));
    QKV_CHECK(s == 0 || n <= (std::int64_t{1} << 40) / s,
              what << ": shape " << shape_to_string(shape) << " has too many elements");
    n *= s;
  }
  return n;
}

Strides row_major_strides(const Shape& shape) {
  Strides strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<std::int64_t>(shape[d], 1);
  }
  return strides;
}

[[noreturn]] void throw_dim_out_of_range(std::int64_t d, std::int64_t rank, const char* what) {
  throw Error(std::string(what) + ": dimension " + std::to_string(d) +
              " is out of range for a tensor of rank " + std::to_string(rank));
}

std::int64_t wrap_dim(std::int64_t d, std::int64_t rank, const char* what) {
  if (d < -rank || d >= rank) throw_dim_out_of_range(d, rank, what);
  return d < 0 ? d + rank : d;
}

// Calls f(logical_index, element_offset) for every element in row-major order.
template <class F>
void for_each_offset(const Shape& shape, const Strides& strides, F&& f) {
  const std::int64_t rank = static_cast<std::int64_t>(shape.size());
  const std::int64_t n = std::accumulate(shape.begin(), shape.end(), std::int64_t{1},
                                         std::multiplies<>());
  if (n == 0) return;
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t offset = 0;
  for (std::int64_t linear = 0; linear < n; ++linear) {
    f(linear, offset);
    for (std::int64_t d = rank - 1; d >= 0; --d) {  // odometer increment
      if (++index[d] < shape[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

// The byte range [first, last) an element layout touches.
std::pair<const std::byte*, const std::byte*> byte_extent(const void* data, const Shape& shape,
                                                          const Strides& strides,
                                                          std::size_t element) {
  std::int64_t low = 0, high = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::int64_t reach = (shape[d] - 1) * strides[d];
    (reach < 0 ? low : high) += reach;
  }
  const auto* base = static_cast<const std::byte*>(data);
  return {base + low * static_cast<std::int64_t>(element),
          base + (high + 1) * static_cast<std::int64_t>(element)};
}

// Whether two non-empty tensors' memory may overlap (their byte ranges intersect).
bool overlaps(const Tensor& a, const Tensor& b) {
  const auto [a0, a1] = byte_extent(a.data(), a.shape(), a.strides(), dtype_size(a.dtype()));
  const auto [b0, b1] = byte_extent(b.data(), b.shape(), b.strides(), dtype_size(b.dtype()));
  return a0 < b1 && b0 < a1;
}

// n elements of type T (a same-size stand-in for the dtype) from element offset src_at,
// step src_step, to dst_at, step dst_step.
template <class T>
void copy_strided(const std::byte* from, std::int64_t src_at, std::int64_t src_step,
                  std::byte* to, std::int64_t dst_at, std::int64_t dst_step, std::int64_t n) {
  const T* s = reinterpret_cast<const T*>(from) + src_at;
  T* d = reinterpret_cast<T*>(to) + dst_at;
  for (std::int64_t c = 0; c < n; ++c) d[c * dst_step] = s[c * src_step];
}

// n elements from element offset src_at (step src_step) of a `from`-dtype array to dst_at
// (step dst_step) of a `to`-dtype array, converted (round to nearest even). The common
// pairs have typed loops; the rest go through f32 element by element, or through double
// where f64 is one side (so that f64 values are not rounded to f32 on the way).
void convert_strided(const void* from, DType from_dtype, std::int64_t src_at,
                     std::int64_t src_step, void* to, DType to_dtype, std::int64_t dst_at,
                     std::int64_t dst_step, std::int64_t n) {
  if (from_dtype == DType::f32 && to_dtype == DType::f64) {
    const float* s = static_cast<const float*>(from) + src_at;
    double* d = static_cast<double*>(to) + dst_at;
    for (std::int64_t c = 0; c < n; ++c) d[c * dst_step] = s[c * src_step];
  } else if (from_dtype == DType::f64 && to_dtype == DType::f32) {
    const double* s = static_cast<const double*>(from) + src_at;
    float* d = static_cast<float*>(to) + dst_at;
    for (std::int64_t c = 0; c < n; ++c) d[c * dst_step] = static_cast<float>(s[c * src_step]);
  } else if (from_dtype == DType::f64 || to_dtype == DType::f64) {
    for (std::int64_t c = 0; c < n; ++c)
      store_from_f64(to, dst_at + c * dst_step, to_dtype,
                     load_as_f64(from, src_at + c * src_step, from_dtype));
  } else if (from_dtype == DType::f32 && to_dtype == DType::bf16) {
    const float* s = static_cast<const float*>(from) + src_at;
    std::uint16_t* d = static_cast<std::uint16_t*>(to) + dst_at;
    for (std::int64_t c = 0; c < n; ++c) d[c * dst_step] = f32_to_bf16(s[c * src_step]);
  } else if (from_dtype == DType::bf16 && to_dtype == DType::f32) {
    const std::uint16_t* s = static_cast<const std::uint16_t*>(from) + src_at;
    float* d = static_cast<float*>(to) + dst_at;
    for (std::int64_t c = 0; c < n; ++c) d[c * dst_step] = bf16_to_f32(s[c * src_step]);
  } else {
    for (std::int64_t c = 0; c < n; ++c)
      store_from_f32(to, dst_at + c * dst_step, to_dtype,
                     load_as_f32(from, src_at + c * src_step, from_dtype));
  }
}

// dst = src for two same-shape, non-overlapping tensors, one row of the last dimension at
// a time: memcpy where the dtypes agree and both rows are contiguous (a permuted copy such
// as (B, H, L, D) -> (B, L, H, D) is then one memcpy per D-row), typed loops otherwise.
void copy_rows(const Tensor& src, Tensor& dst) {
  const Shape& shape = dst.shape();
  const auto rank = static_cast<std::int64_t>(shape.size());
  const std::int64_t n = shape.back();
  const std::int64_t src_step = src.strides().back(), dst_step = dst.strides().back();
  const std::size_t element = dtype_size(dst.dtype());
  const auto* from = static_cast<const std::byte*>(src.data());
  auto* to = static_cast<std::byte*>(dst.data());
  std::int64_t rows = 1;
  for (std::int64_t d = 0; d + 1 < rank; ++d) rows *= shape[d];
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  std::int64_t src_at = 0, dst_at = 0;  // element offsets of the current row
  for (std::int64_t r = 0; r < rows; ++r) {
    if (src.dtype() != dst.dtype()) {
      convert_strided(src.data(), src.dtype(), src_at, src_step, dst.data(), dst.dtype(), dst_at,
                      dst_step, n);
    } else if (src_step == 1 && dst_step == 1) {
      std::memcpy(to + dst_at * static_cast<std::int64_t>(element),
                  from + src_at * static_cast<std::int64_t>(element),
                  static_cast<std::size_t>(n) * element);
    } else if (element == 8) {
      copy_strided<std::uint64_t>(from, src_at, src_step, to, dst_at, dst_step, n);
    } else if (element == 4) {
      copy_strided<std::uint32_t>(from, src_at, src_step, to, dst_at, dst_step, n);
    } else if (element == 2) {
      copy_strided<std::uint16_t>(from, src_at, src_step, to, dst_at, dst_step, n);
    } else {
      copy_strided<std::uint8_t>(from, src_at, src_step, to, dst_at, dst_step, n);
    }
    for (std::int64_t d = rank - 2; d >= 0; --d) {  // odometer over the leading dimensions
      if (++index[d] < shape[d]) {
        src_at += src.strides()[d];
        dst_at += dst.strides()[d];
        break;
      }
      src_at -= src.strides()[d] * (shape[d] - 1);
      dst_at -= dst.strides()[d] * (shape[d] - 1);
      index[d] = 0;
    }
  }
}

}  // namespace

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) out << ',';
  out << ')';
  return out.str();
}

float load_as_f32(const void* base, std::int64_t offset, DType dtype) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[offset];
    case DType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(base)[offset]);
    case DType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(base)[offset]);
    case DType::boolean: return static_cast<const std::uint8_t*>(base)[offset] ? 1.0f : 0.0f;
    case DType::f64: return static_cast<float>(static_cast<const double*>(base)[offset]);
  }
  return 0.0f;
}

void store_from_f32(void* base, std::int64_t offset, DType dtype, float value) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[offset] = value; return;
    case DType::bf16: static_cast<std::uint16_t*>(base)[offset] = f32_to_bf16(value); return;
    case DType::f16: static_cast<std::uint16_t*>(base)[offset] = f32_to_f16(value); return;
    case DType::boolean: static_cast<std::uint8_t*>(base)[offset] = value != 0.0f; return;
    case DType::f64: static_cast<double*>(base)[offset] = value; return;
  }
}

double load_as_f64(const void* base, std::int64_t offset, DType dtype) {
  if (dtype == DType::f64) return static_cast<const double*>(base)[offset];
  return load_as_f32(base, offset, dtype);  // exact: f32, bf16, f16 and bool are floats
}

void store_from_f64(void* base, std::int64_t offset, DType dtype, double value) {
  if (dtype == DType::f64) static_cast<double*>(base)[offset] = value;
  else if (dtype == DType::boolean) static_cast<std::uint8_t*>(base)[offset] = value != 0.0;
  else store_from_f32(base, offset, dtype, static_cast<float>(value));  // bf16, f16: as PyTorch
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  const std::int64_t n = checked_numel(shape, "Tensor::empty");
  std::shared_ptr<void> storage =
      allocate_storage(static_cast<std::size_t>(n) * dtype_size(dtype), "Tensor::empty");
  Tensor t;
  t.data_ = storage.get();
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.strides_ = row_major_strides(shape);
  t.dtype_ = dtype;
  t.defined_ = true;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, DType dtype) {
  Tensor t = empty(shape, dtype);
  for (std::int64_t i = 0, n = t.numel(); i < n; ++i) store_from_f32(t.data_, i, dtype, value);
  return t;
}

namespace {

// A tensor of `shape` holding `values` (float or double), each stored as `dtype` does.
template <class T>
Tensor tensor_from_values(const char* who, const Shape& shape, std::span<const T> values,
                          DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  QKV_CHECK(static_cast<std::int64_t>(values.size()) == t.numel(),
            who << ": shape " << shape_to_string(shape) << " needs " << t.numel()
                << " values, got " << values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    if constexpr (std::is_same_v<T, double>)
      store_from_f64(t.data(), static_cast<std::int64_t>(i), dtype, values[i]);
    else
      store_from_f32(t.data(), static_cast<std::int64_t>(i), dtype, values[i]);
  }
  return t;
}

}  // namespace

Tensor Tensor::from_vector(const Shape& shape, std::span<const float> values, DType dtype) {
  return tensor_from_values("Tensor::from_vector", shape, values, dtype);
}

Tensor Tensor::from_vector_f64(const Shape& shape, std::span<const double> values, DType dtype) {
  return tensor_from_values("Tensor::from_vector_f64", shape, values, dtype);
}

Tensor Tensor::from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype,
                         std::shared_ptr<void> owner) {
  const std::int64_t n = checked_numel(shape, "Tensor::from_blob");
  QKV_CHECK(strides.size() == shape.size(), "Tensor::from_blob: " << strides.size()
                                                << " strides for a shape of rank " << shape.size());
  for (std::int64_t s : strides)
    QKV_CHECK(s >= 0, "Tensor::from_blob: strides must be >= 0, got " << shape_to_string(strides));
  QKV_CHECK(data != nullptr || n == 0, "Tensor::from_blob: null data for " << n << " elements");
  Tensor t;
  t.storage_ = std::move(owner);
  t.data_ = data;
  t.shape_ = shape;
  t.strides_ = strides;
  t.dtype_ = dtype;
  t.defined_ = true;
  return t;
}

void Tensor::throw_bad_dim(std::int64_t d, const char* what) const {
  throw_dim_out_of_range(d, dim(), what);
}

std::int64_t Tensor::numel() const {
  return std::accumulate(shape_.begin(), shape_.end(), std::int64_t{1}, std::multiplies<>());
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // nothing to lay out (as PyTorch says of empty tensors)
  std::int64_t expected = 1;
  for (std::int64_t d = dim() - 1; d >= 0; --d) {
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

Tensor Tensor::transpose(std::int64_t a, std::int64_t b) const {
  Tensor t = *this;
  a = wrap_dim(a, dim(), "Tensor::transpose");
  b = wrap_dim(b, dim(), "Tensor::transpose");
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::permute(const std::vector<std::int64_t>& order) const {
  QKV_CHECK(static_cast<std::int64_t>(order.size()) == dim(),
            "Tensor::permute: order has " << order.size() << " entries for a tensor of rank " << dim());
  Tensor t = *this;
  std::vector<bool> seen(order.size(), false);
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::int64_t d = wrap_dim(order[i], dim(), "Tensor::permute");
    QKV_CHECK(!seen[d], "Tensor::permute: dimension " << d << " appears twice");
    seen[d] = true;
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end, std::int64_t step) const {
  d = wrap_dim(d, dim(), "Tensor::slice");
  QKV_CHECK(step >= 1, "Tensor::slice: step must be >= 1, got " << step);
  const std::int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<std::int64_t>(start, 0, n);
  end = std::clamp<std::int64_t>(end, start, n);
  Tensor t = *this;
  if (start < n) t.data_ = static_cast<std::byte*>(data_) + start * strides_[d] * dtype_size(dtype_);
  t.shape_[d] = (end - start + step - 1) / step;
  t.strides_[d] = strides_[d] * step;
  return t;
}

Tensor Tensor::select(std::int64_t d, std::int64_t index) const {
  d = wrap_dim(d, dim(), "Tensor::select");
  QKV_CHECK(index >= -shape_[d] && index < shape_[d],
            "Tensor::select: index " << index << " is out of range for size " << shape_[d]);
  if (index < 0) index += shape_[d];
  Tensor t = *this;
  t.data_ = static_cast<std::byte*>(data_) + index * strides_[d] * dtype_size(dtype_);
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  d = wrap_dim(d, dim() + 1, "Tensor::unsqueeze");
  Tensor t = *this;
  const std::int64_t stride = d < dim() ? strides_[d] * shape_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, stride);
  return t;
}

Tensor Tensor::expand(const Shape& shape) const {
  QKV_CHECK(static_cast<std::int64_t>(shape.size()) >= dim(),
            "Tensor::expand: cannot expand " << shape_string() << " to " << shape_to_string(shape));
  Tensor t = *this;
  const std::size_t lead = shape.size() - shape_.size();
  t.shape_ = shape;
  t.strides_.assign(shape.size(), 0);
  for (std::size_t i = 0; i < shape_.size(); ++i) {
    const std::int64_t want = shape[lead + i];
    QKV_CHECK(shape_[i] == want || shape_[i] == 1,
              "Tensor::expand: cannot expand " << shape_string() << " to " << shape_to_string(shape));
    t.strides_[lead + i] = shape_[i] == want ? strides_[i] : 0;
  }
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  QKV_CHECK(is_contiguous(), "Tensor::view: needs a contiguous tensor, got shape "
                                 << shape_string() << " strides " << shape_to_string(strides_));
  Shape resolved = shape;
  std::int64_t known = 1;
  std::int64_t infer = -1;
  for (std::size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      QKV_CHECK(infer < 0, "Tensor::view: only one dimension may be -1");
      infer = static_cast<std::int64_t>(i);
    } else {
      QKV_CHECK(resolved[i] >= 0, "Tensor::view: invalid size " << resolved[i]);
      known *= resolved[i];
    }
  }
  if (infer >= 0) {
    QKV_CHECK(known > 0 && numel() % known == 0,
              "Tensor::view: cannot view " << shape_string() << " as " << shape_to_string(shape));
    resolved[infer] = numel() / known;
  }
  QKV_CHECK(checked_numel(resolved, "Tensor::view") == numel(),
            "Tensor::view: cannot view " << shape_string() << " (" << numel() << " elements) as "
                                         << shape_to_string(shape));
  Tensor t = *this;
  t.shape_ = resolved;
  t.strides_ = row_major_strides(resolved);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  return is_contiguous() ? view(shape) : contiguous().view(shape);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const { return to(dtype_); }

Tensor Tensor::to(DType dtype) const {
  QKV_CHECK(defined(), "Tensor::to: undefined tensor");
  Tensor t = empty(shape_, dtype);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  QKV_CHECK(src.shape_ == shape_, "Tensor::copy_from: shape " << src.shape_string()
                                                              << " does not match " << shape_string());
  if (numel() == 0) return;
  if (dim() >= 1 && !overlaps(src, *this)) {
    copy_rows(src, *this);
    return;
  }
  // Gather the source in logical order, then scatter into this tensor's layout (also
  // right when the two share memory). In double where f64 is involved, to round once.
  if (src.dtype_ == DType::f64 || dtype_ == DType::f64) {
    std::vector<double> values = src.to_vector_f64();
    std::int64_t i = 0;
    for_each_offset(shape_, strides_, [&](std::int64_t, std::int64_t offset) {
      store_from_f64(data_, offset, dtype_, values[i++]);
    });
    return;
  }
  std::vector<float> values = src.to_vector();
  std::int64_t i = 0;
  for_each_offset(shape_, strides_, [&](std::int64_t, std::int64_t offset) {
    store_from_f32(data_, offset, dtype_, values[i++]);
  });
}

std::int64_t Tensor::offset_of(std::span<const std::int64_t> index, const char* what) const {
  QKV_CHECK(static_cast<std::int64_t>(index.size()) == dim(),
            what << ": " << index.size() << " indices for a tensor of rank " << dim());
  std::int64_t offset = 0;
  for (std::int64_t d = 0; d < dim(); ++d) {
    QKV_CHECK(index[d] >= 0 && index[d] < shape_[d],
              what << ": index " << index[d] << " out of range for dimension " << d
                   << " of size " << shape_[d]);
    offset += index[d] * strides_[d];
  }
  return offset;
}

float Tensor::get(std::span<const std::int64_t> index) const {
  return load_as_f32(data_, offset_of(index, "Tensor::get"), dtype_);
}

void Tensor::set(std::span<const std::int64_t> index, float value) {
  store_from_f32(data_, offset_of(index, "Tensor::set"), dtype_, value);
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> values(static_cast<std::size_t>(numel()));
  for_each_offset(shape_, strides_, [&](std::int64_t linear, std::int64_t offset) {
    values[linear] = load_as_f32(data_, offset, dtype_);
  });
  return values;
}

std::vector<double> Tensor::to_vector_f64() const {
  std::vector<double> values(static_cast<std::size_t>(numel()));
  for_each_offset(shape_, strides_, [&](std::int64_t linear, std::int64_t offset) {
    values[linear] = load_as_f64(data_, offset, dtype_);
  });
  return values;
}

std::string Tensor::shape_string() const { return shape_to_string(shape_); }

}  // namespace qkv
