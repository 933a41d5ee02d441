// qkv_bench_products — attention's two matrix products alone, in oneDNN, for
// scripts/bench_attention.py: a reference for how fast a tuned general matrix library
// does the same multiply-adds as qkv's fused kernel, with nothing else to do.
//
// Per (batch·head): S = Q·Kᵀ (Lq×Lk, written to memory), then O = S·V. No scale, no
// softmax, no mask: an unfused attention (PyTorch 1.13's, ONNX Runtime's unfused path)
// does at least this and more, so the time is a lower bound for it, and qkv's whole
// attention against it says how close to pure matrix-product speed the kernel runs.
// FLOPs 4·BH·Lq·Lk·D, the same count the attention benchmark uses.
//
// Usage: qkv_bench_products --heads BH --seq-q Lq --seq-k Lk --dim D [--threads N]
//
// Fills Q, K, V with fixed pseudo-random values, runs the products once and checks 64
// entries of S and of O against double-precision sums over the same inputs (a wrong
// layout fails here, not silently), then prints one JSON line
//   {"ready": true, "impl": [the two primitives' oneDNN implementations], "threads": N,
//    "max_rel_err": x}
// and serves commands read on stdin, one per line, answering each with one JSON line:
//   run [N]   N (default 1) runs back to back -> {"ms": [their times]}
//   quit      exits (as does the end of input).
//
// A benchmark, not a test: nothing here asserts a time.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "qkv/rng.h"
#include "qkv/threads.h"

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using Tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;

struct Shape {
  std::int64_t heads = 0, seq_q = 0, seq_k = 0, dim = 0;  // heads: batch × heads
};

class Products {
 public:
  explicit Products(const Shape& shape)
      : shape_(shape),
        engine_(dnnl::engine::kind::cpu, 0),
        stream_(engine_),
        // Kᵀ (BH, D, Lk) is K (BH, Lk, D) as stored, read with its last two axes swapped.
        q_(dnnl::memory::desc({shape.heads, shape.seq_q, shape.dim}, kF32, Tag::abc), engine_),
        kt_(dnnl::memory::desc({shape.heads, shape.dim, shape.seq_k}, kF32, Tag::acb), engine_),
        s_(dnnl::memory::desc({shape.heads, shape.seq_q, shape.seq_k}, kF32, Tag::abc), engine_),
        v_(dnnl::memory::desc({shape.heads, shape.seq_k, shape.dim}, kF32, Tag::abc), engine_),
        o_(dnnl::memory::desc({shape.heads, shape.seq_q, shape.dim}, kF32, Tag::abc), engine_),
        scores_pd_(dnnl::matmul::desc(q_.get_desc(), kt_.get_desc(), s_.get_desc()), engine_),
        output_pd_(dnnl::matmul::desc(s_.get_desc(), v_.get_desc(), o_.get_desc()), engine_),
        scores_(scores_pd_),
        output_(output_pd_) {
    fill(q_, 1);
    fill(kt_, 2);
    fill(v_, 3);
  }

  void run() {
    scores_.execute(stream_, {{DNNL_ARG_SRC, q_}, {DNNL_ARG_WEIGHTS, kt_}, {DNNL_ARG_DST, s_}});
    output_.execute(stream_, {{DNNL_ARG_SRC, s_}, {DNNL_ARG_WEIGHTS, v_}, {DNNL_ARG_DST, o_}});
    stream_.wait();
  }

  // Largest relative error of 64 entries of S and 64 of O (each from the S computed) against
  // double sums, after run().
  double check() const {
    const Shape& sh = shape_;
    const float* q = data(q_);
    const float* k = data(kt_);  // (BH, Lk, D) in memory
    const float* s = data(s_);
    const float* v = data(v_);
    const float* o = data(o_);
    double worst = 0.0;
    for (std::uint64_t i = 0; i < 64; ++i) {
      const auto pick = [i](std::int64_t n, std::uint64_t salt) {
        return static_cast<std::int64_t>(qkv::counter_uniform(salt, i) * static_cast<double>(n));
      };
      const std::int64_t h = pick(sh.heads, 10), r = pick(sh.seq_q, 11), c = pick(sh.seq_k, 12), d = pick(sh.dim, 13);
      const float* s_row = s + (h * sh.seq_q + r) * sh.seq_k;
      worst = std::max(worst, dot_error(q + (h * sh.seq_q + r) * sh.dim, k + (h * sh.seq_k + c) * sh.dim, 1, sh.dim,
                                        s_row[c]));
      worst = std::max(worst, dot_error(s_row, v + h * sh.seq_k * sh.dim + d, sh.dim, sh.seq_k,
                                        o[(h * sh.seq_q + r) * sh.dim + d]));
    }
    return worst;
  }

  Json impl() const { return Json::array({scores_pd_.impl_info_str(), output_pd_.impl_info_str()}); }

 private:
  static float* data(const dnnl::memory& m) { return static_cast<float*>(m.get_data_handle()); }

  // |Σ_e a[e]·b[e·ldb] − got| over n terms, in double, relative to Σ |terms| (so that
  // cancellation cannot inflate it).
  static double dot_error(const float* a, const float* b, std::int64_t ldb, std::int64_t n, float got) {
    double sum = 0.0, magnitude = 0.0;
    for (std::int64_t e = 0; e < n; ++e) {
      const double term = double{a[e]} * b[e * ldb];
      sum += term;
      magnitude += std::abs(term);
    }
    return std::abs(sum - got) / std::max(magnitude, 1e-30);
  }

  static void fill(dnnl::memory& m, std::uint64_t seed) {
    float* p = data(m);
    const std::size_t n = m.get_desc().get_size() / sizeof(float);
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>(qkv::counter_uniform(seed, i) * 2.0 - 1.0);
  }

  Shape shape_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::memory q_, kt_, s_, v_, o_;
  dnnl::matmul::primitive_desc scores_pd_, output_pd_;
  dnnl::matmul scores_, output_;
};

std::int64_t positive(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value < 1) {
    throw std::runtime_error(flag + " takes a positive integer, got '" + text + "'");
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Shape shape;
    std::int64_t threads = 0;
    for (int i = 1; i < argc; i += 2) {
      const std::string flag = argv[i];
      if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value");
      const std::int64_t value = positive(flag, argv[i + 1]);
      if (flag == "--heads") shape.heads = value;
      else if (flag == "--seq-q") shape.seq_q = value;
      else if (flag == "--seq-k") shape.seq_k = value;
      else if (flag == "--dim") shape.dim = value;
      else if (flag == "--threads") threads = value;
      else throw std::runtime_error("unknown option " + flag);
    }
    if (std::min({shape.heads, shape.seq_q, shape.seq_k, shape.dim}) < 1) {
      throw std::runtime_error("usage: qkv_bench_products --heads BH --seq-q Lq --seq-k Lk --dim D [--threads N]");
    }
    if (threads > 0) qkv::set_num_threads(static_cast<int>(threads));
    Products products(shape);
    products.run();
    const double error = products.check();
    // f32 sums of up to max(D, Lk) terms: far below this unless the layout is wrong.
    if (!(error < 1e-4)) throw std::runtime_error("the products disagree with double sums: " + std::to_string(error));
    std::cout << Json{{"ready", true}, {"impl", products.impl()}, {"threads", qkv::num_threads()},
                      {"max_rel_err", error}}.dump()
              << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
      std::istringstream words(line);
      std::string command;
      words >> command;
      if (command.empty()) continue;
      if (command == "quit") break;
      Json reply;
      std::string count_text = "1", rest;
      words >> count_text >> rest;
      std::int64_t count = 0;
      try {
        count = positive("run", count_text);
      } catch (const std::exception& e) {
        reply = Json{{"error", e.what()}};
      }
      if (command != "run" || !rest.empty()) {
        reply = Json{{"error", "expected 'run [N]' or 'quit', got '" + line + "'"}};
      } else if (count > 0) {
        std::vector<double> ms;
        for (std::int64_t i = 0; i < count; ++i) {
          const auto start = Clock::now();
          products.run();
          ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
        }
        reply = Json{{"ms", ms}};
      }
      std::cout << reply.dump() << std::endl;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qkv_bench_products: %s\n", e.what());
    return 1;
  }
  return 0;
}
