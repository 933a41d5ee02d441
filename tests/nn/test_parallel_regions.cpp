// Every parallel region of the library carries an exception thrown inside it to the caller
// (src/core/parallel.h). detail::fail_region_for_test makes each region in turn throw from
// every unit it runs, on whichever thread runs it; the public call that goes through the
// region must then throw qkv::Error naming the region, and the process must live on (an
// exception escaping an OpenMP region is std::terminate). A region missing from this list,
// or a call that no longer goes through its region, fails the test.
// The attention entry points also stop for the interrupt flag (qkv/threads.h).
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "attention/random_inputs.h"
#include "core/parallel.h"
#include "qkv/attention.h"
#include "qkv/error.h"
#include "qkv/nn.h"
#include "qkv/threads.h"
#include "qkv/train.h"

namespace qkv {
namespace {

using testing::random_tensor;

struct Site {
  const char* region;
  std::function<void()> call;  // goes through `region` (among others, possibly)
  bool needs_cpu_support = false;  // may throw before the region on CPUs without the feature
};

struct Restore {
  int threads = num_threads();
  ~Restore() {
    detail::fail_region_for_test(nullptr);
    clear_interrupt();
    set_num_threads(threads);
  }
};

std::vector<Site> sites() {
  Rng rng(7);
  const Tensor q = random_tensor({1, 2, 130, 16}, rng), k = random_tensor({1, 2, 130, 16}, rng);
  const Tensor v = random_tensor({1, 2, 130, 16}, rng);
  const Tensor q1 = random_tensor({1, 2, 1, 16}, rng), k_long = random_tensor({1, 2, 2048, 16}, rng);
  const Tensor v_long = random_tensor({1, 2, 2048, 16}, rng);
  AttentionOptions fast, reference;
  fast.impl = AttentionImpl::fast;
  fast.return_lse = true;
  reference.impl = AttentionImpl::reference;
  const Tensor x = random_tensor({4, 20000}, rng), dy = random_tensor({4, 64}, rng);
  const Tensor tokens = random_tensor({1, 8, 32}, rng);
  std::vector<Site> s = {
      {"attention.forward", [=] { attention(q, k, v, fast); }},
      {"attention.value_check", [=] { attention(q, k, v, fast); }},
      {"attention.decode", [=] { attention(q1, k_long, v_long, fast); }},
      {"attention.widen", [=] { attention(q.to(DType::f16), k.to(DType::f16), v.to(DType::f16), fast); }},
      {"attention.reference", [=] { attention(q, k, v, reference); }},
      {"attention.backward", [=] {
         AttentionOptions o = fast;
         o.return_lse = false;
         const AttentionResult r = attention(q, k, v, fast);
         attention_backward(r.out, q, k, v, r.out, r.lse, o);
       }},
      {"attention.backward_reference", [=] {
         const AttentionResult r = attention(q, k, v, fast);
         attention_backward(r.out, q, k, v, r.out, r.lse, reference);
       }},
      {"nn.gelu", [=] { nn::gelu(x); }},
      {"nn.gelu", [=] { nn::gelu(x, nn::GeluApproximation::tanh); }},
      {"nn.relu", [=] { nn::relu(x); }},
      {"nn.gelu_backward", [=] { nn::gelu_backward(x, x); }},
      {"nn.gelu_backward", [=] { nn::gelu_backward(x, x, nn::GeluApproximation::tanh); }},
      {"nn.relu_backward", [=] { nn::relu_backward(x, x); }},
      {"nn.add", [=] {
         Tensor a = x.clone();
         nn::add_(a, x);
       }},
      {"nn.scale", [=] {
         Tensor a = x.clone();
         nn::scale_(a, 2.0f);
       }},
      {"nn.dropout", [=] { nn::Dropout(0.5).forward(x, 1); }},
      {"nn.adamw", [=] {
         Tensor p = x.clone(), g = x.clone();
         train::AdamW opt({{"p", &p}}, {});
         opt.step({{"p", &g}}, 1e-3);
       }},
      {"nn.clip_grad_norm", [=] {
         Tensor g = x.clone();
         train::clip_grad_norm({{"g", &g}}, 1e-3);
       }},
      {"nn.to_bf16", [=] {
         nn::Linear layer(20000, 8, true, 1);
         layer.pack(DType::bf16);
         layer.forward(x);
       }, /*needs_cpu_support=*/true},  // oneDNN's bf16 products: x rounded to bf16 first
      {"nn.linear_bias_grad", [=] {
         nn::Linear layer(20000, 64, true, 1);
         Tensor dw = Tensor::zeros({64, 20000}), db = Tensor::zeros({64});
         nn::linear_backward(dy, x, layer.weight, dw, &db);
       }},
      {"nn.embedding", [=] {
         nn::Embedding table(10, 4096, 1);
         const std::vector<std::int64_t> ids(16, 3);
         table.forward(ids, {16});
       }},
      {"nn.embedding_backward", [=] {
         nn::Embedding table(10, 4096, 1), grads(10, 4096, 1);
         const std::vector<std::int64_t> ids(16, 3);
         nn::Embedding::Record record;
         const Tensor y = table.forward(ids, {16}, &record);
         table.backward(y, record, grads);
       }},
      {"nn.concat_heads", [=] {
         nn::MultiheadAttention mha({32, 2}, 1);
         nn::MultiheadAttention::Record record;
         const Tensor y = mha.forward(tokens, tokens, tokens, {}, {}, nullptr, nullptr, &record);
         nn::MultiheadAttention grads({32, 2}, 1);
         mha.backward(y, record, grads);
       }},
  };
  // Vector attention's regions, each on the way of a forward and backward over neighbours.
  const Tensor points = random_tensor({2, 40, 16}, rng), pos = random_tensor({2, 40, 3}, rng);
  for (const char* region : {"nn.nearest_neighbors", "nn.vector_attention.rel", "nn.vector_attention.pre",
                             "nn.vector_attention.softmax", "nn.vector_attention.dlogits",
                             "nn.vector_attention.dqkv"})
    s.push_back({region, [=] {
                   nn::VectorAttentionConfig config{16, 3, 8, 1, 6};
                   nn::VectorAttention va(config, 1), grads(config, 1);
                   nn::VectorAttention::Record record;
                   const Tensor y = va.forward(points, pos, &record);
                   va.backward(y, record, grads);
                 }});
  // Only where the variant multiplies bf16 pairs (AVX512-BF16, AMX).
  const std::string isa = fast_kernel_isa();
  if (isa == "avx512_bf16" || isa == "amx" || isa == "amx_emulated")
    s.push_back({"attention.value_pairs", [=] {
                   attention(q.to(DType::bf16), k.to(DType::bf16), v.to(DType::bf16), fast);
                 }});
  // Pinning runs when the thread count changes to the CPUs the process may use (and no
  // variable hands placement elsewhere: qkv/threads.h).
  cpu_set_t set;
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  bool placement_free = std::getenv("QKV_BIND_THREADS") == nullptr;
  for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"})
    placement_free = placement_free && std::getenv(name) == nullptr;
  if (cpus >= 2 && placement_free)
    s.push_back({"threads.pin", [cpus] {
                   set_num_threads(1);
                   num_threads();
                   set_num_threads(cpus);
                   num_threads();
                 }});
  return s;
}

TEST(ParallelRegions, EveryRegionCarriesItsErrorToTheCaller) {
  Restore restore;
  set_num_threads(2);
  for (const Site& site : sites()) {
    SCOPED_TRACE(site.region);
    detail::fail_region_for_test(nullptr);
    if (site.needs_cpu_support) {
      try {
        site.call();
      } catch (const Error& e) {
        std::printf("skipped %s: %s\n", site.region, e.what());
        continue;
      }
    }
    ASSERT_NO_THROW(site.call());  // the call itself is fine
    detail::fail_region_for_test(site.region);
    try {
      site.call();
      ADD_FAILURE() << "no error: the call did not go through region " << site.region;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(site.region) + ": fault injected"), std::string::npos)
          << e.what();
    }
    detail::fail_region_for_test(nullptr);
    set_num_threads(2);
  }
}

TEST(ParallelRegions, AttentionStopsWhenInterrupted) {
  Restore restore;
  set_num_threads(2);
  for (const Site& site : sites()) {
    if (std::strncmp(site.region, "attention.", 10) != 0) continue;
    SCOPED_TRACE(site.region);
    request_interrupt();
    try {
      site.call();
      ADD_FAILURE() << "not interrupted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::interrupted) << e.what();
      EXPECT_NE(std::string(e.what()).find("interrupted"), std::string::npos) << e.what();
    }
    clear_interrupt();
    EXPECT_NO_THROW(site.call());  // clearing the flag is all it takes to run again
  }
}

}  // namespace
}  // namespace qkv
