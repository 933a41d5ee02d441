// The oneDNN engine, primitive execution and the backward passes' gemm (onednn.h).

#include "nn/onednn.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <tuple>

namespace qkv::nn::detail {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::primitive_attr scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

// At least `bytes` of this thread's scratch memory, 64-byte aligned (oneDNN's vectors).
void* thread_scratch(std::size_t bytes) {
  struct Buffer {
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    std::size_t bytes = 0;
  };
  thread_local Buffer buffer;
  if (bytes > buffer.bytes) {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    buffer.data.reset(std::aligned_alloc(64, rounded));
    if (buffer.data == nullptr) throw std::bad_alloc();
    buffer.bytes = rounded;
  }
  return buffer.data.get();
}

}  // namespace

void run(const dnnl::primitive& primitive, std::unordered_map<int, dnnl::memory> args) {
  const OmpThreadScope threads(num_threads());
  // Zero bytes when the primitive needs none or manages its own (library mode).
  const dnnl_memory_desc_t* scratch_md =
      dnnl_primitive_desc_query_md(primitive.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  const dnnl::memory::desc scratchpad =
      scratch_md != nullptr ? dnnl::memory::desc(*scratch_md) : dnnl::memory::desc();
  if (const std::size_t bytes = scratchpad.get_size(); bytes > 0)
    args.insert_or_assign(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad, cpu_engine(), thread_scratch(bytes)));
  dnnl::stream stream(cpu_engine());
  primitive.execute(stream, args);
  stream.wait();
}

void reorder(dnnl::memory from, dnnl::memory to) {
  const OmpThreadScope threads(num_threads());  // around the primitive's creation too
  run(dnnl::reorder(from, to, scratchpad_attr()), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

namespace {

using dt = dnnl::memory::data_type;
// M, N, K, trans_a, trans_b, accumulate, the inputs' data type
using GemmKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, bool, dt>;

// A stored (M, K) row-major, or (K, M) when transposed.
dnnl::memory::desc a_desc(std::int64_t M, std::int64_t K, bool trans_a, dt type) {
  return {{M, K}, type, trans_a ? dnnl::memory::dims{1, M} : dnnl::memory::dims{K, 1}};
}
// B stored (K, N) row-major, or (N, K) when transposed.
dnnl::memory::desc b_desc(std::int64_t K, std::int64_t N, bool trans_b, dt type) {
  return {{K, N}, type, trans_b ? dnnl::memory::dims{1, K} : dnnl::memory::dims{N, 1}};
}
dnnl::memory::desc c_desc(std::int64_t M, std::int64_t N) {
  return {{M, N}, dnnl::memory::data_type::f32, dnnl::memory::dims{N, 1}};
}

}  // namespace

namespace {

// C (f32) = [C +] op(A)·op(B), A and B of data type `type` (f32 or bf16).
void gemm_of(float* c, const void* a, const void* b, dt type, std::int64_t M, std::int64_t N,
             std::int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum
    if (!accumulate) std::fill_n(c, M * N, 0.f);
    return;
  }
  static PrimitiveCache<GemmKey, dnnl::matmul> cache(256);
  const dnnl::matmul prim = cache.get({M, N, K, trans_a, trans_b, accumulate, type}, [&] {
    dnnl::primitive_attr attr = scratchpad_attr();
    if (accumulate) {  // C = 1·C + A·B: oneDNN's sum post-op
      dnnl::post_ops ops;
      ops.append_sum(1.f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::desc desc(a_desc(M, K, trans_a, type), b_desc(K, N, trans_b, type), c_desc(M, N));
    return dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, cpu_engine()));
  });
  dnnl::engine& engine = cpu_engine();
  run(prim, {{DNNL_ARG_SRC, dnnl::memory(a_desc(M, K, trans_a, type), engine, const_cast<void*>(a))},
             {DNNL_ARG_WEIGHTS, dnnl::memory(b_desc(K, N, trans_b, type), engine, const_cast<void*>(b))},
             {DNNL_ARG_DST, dnnl::memory(c_desc(M, N), engine, c)}});
}

}  // namespace

void gemm(float* c, const float* a, const float* b, std::int64_t M, std::int64_t N,
          std::int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  gemm_of(c, a, b, dt::f32, M, N, K, trans_a, trans_b, accumulate);
}

void gemm_bf16(float* c, const std::uint16_t* a, const std::uint16_t* b, std::int64_t M,
               std::int64_t N, std::int64_t K, bool trans_a, bool trans_b, bool accumulate) {
  gemm_of(c, a, b, dt::bf16, M, N, K, trans_a, trans_b, accumulate);
}

}  // namespace qkv::nn::detail
