// Ring attention (include/qkv/distributed.h) against single-process attention, run under
// mpirun with 2, 3 and 4 ranks (tests/distributed/tests.cmake). Every rank builds the same
// full inputs from one seed, computes the single-process reference itself, and compares
// its own shard of it with what the ring gives. The error cases check that every rank
// throws the same message before any K/V moves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attention/random_inputs.h"
#include "qkv/attention.h"
#include "qkv/distributed.h"
#include "qkv/error.h"

namespace qkv {
namespace {

using distributed::Communicator;
using distributed::shard_sequence;
using testing::random_tensor;

Communicator& world() {
  static Communicator comm = Communicator::world();
  return comm;
}

struct Case {
  std::int64_t B = 2, Hq = 4, Hkv = 4, C = 5, Dk = 16, Dv = 16;  // C tokens per chunk: L = 2·N·C
  DType dtype = DType::f32;
  AttentionOptions options;
};

// The largest |a − e| over the elements, with −∞ == −∞ counted as equal (a fully masked
// row's lse) and a NaN or a one-sided infinity as infinite.
double max_diff(const Tensor& got, const Tensor& want) {
  const std::vector<float> a = got.to_vector(), e = want.to_vector();
  EXPECT_EQ(a.size(), e.size());
  double worst = 0;
  for (std::size_t n = 0; n < a.size() && n < e.size(); ++n) {
    if (a[n] == e[n]) continue;  // equal infinities too
    const double d = std::abs(double(a[n]) - double(e[n]));
    worst = std::max(worst, std::isfinite(d) ? d : std::numeric_limits<double>::infinity());
  }
  return worst;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (float x : t.to_vector())
    if (std::isfinite(x)) m = std::max(m, double(std::abs(x)));
  return m;
}

// Tolerances, relative to the largest magnitude of what is compared (at least 1):
// f32: the ring merges 2N partial outputs by exp(l − m) weights in double and rounds to f32
// once per merge (<= 8 roundings of |out| at N = 4), and the kernel's f32 accumulation
// order differs between a C-key block and the whole row: measured up to 2.9e-6 (absolute,
// gradients included) at N = 4; 2e-5 leaves 7x room and still catches a dropped or doubled
// block (errors of order |out| ~ 0.1 - 1).
// bf16: every block's partial output is rounded to bf16 (2^-9 relative) before the merge,
// and the backward reads the ring's own bf16 out: measured up to 2^-8 (one bf16 ulp at
// magnitudes in [0.5, 1)); 3·2^-8 ≈ 0.012.
double tolerance(DType dtype) { return dtype == DType::f32 ? 2e-5 : 0.012; }

void run_case(const Case& c, const std::string& name) {
  const int N = world().size(), r = world().rank();
  const std::int64_t L = 2 * N * c.C;
  Rng rng(1234);
  const Tensor q = random_tensor({c.B, c.Hq, L, c.Dk}, rng, 1.0, c.dtype);
  const Tensor k = random_tensor({c.B, c.Hkv, L, c.Dk}, rng, 1.0, c.dtype);
  const Tensor v = random_tensor({c.B, c.Hkv, L, c.Dv}, rng, 1.0, c.dtype);
  const Tensor dout = random_tensor({c.B, c.Hq, L, c.Dv}, rng, 1.0, c.dtype);
  AttentionOptions whole = c.options;
  whole.return_lse = true;
  const AttentionResult want = attention(q, k, v, whole);
  const AttentionGradients want_g = attention_backward(dout, q, k, v, want.out, want.lse, whole);

  const Tensor qs = shard_sequence(q, r, N), ks = shard_sequence(k, r, N), vs = shard_sequence(v, r, N);
  const distributed::RingAttentionResult got = distributed::ring_attention(qs, ks, vs, c.options, world());
  const double tol = tolerance(c.dtype);
  const Tensor want_out = shard_sequence(want.out, r, N), want_lse = shard_sequence(want.lse, r, N);
  EXPECT_EQ(got.out.dtype(), c.dtype) << name;
  EXPECT_LE(max_diff(got.out, want_out), tol * std::max(1.0, max_abs(want_out))) << name << " out, rank " << r;
  EXPECT_LE(max_diff(got.lse, want_lse), tol * std::max(1.0, max_abs(want_lse))) << name << " lse, rank " << r;

  const distributed::RingAttentionGradients g = distributed::ring_attention_backward(
      shard_sequence(dout, r, N), qs, ks, vs, got.out, got.lse, c.options, world());
  const auto check = [&](const Tensor& got_t, const Tensor& full, const char* what) {
    const Tensor want_t = shard_sequence(full, r, N);
    EXPECT_LE(max_diff(got_t, want_t), tol * std::max(1.0, max_abs(want_t))) << name << " " << what << ", rank " << r;
  };
  check(g.dq, want_g.dq, "dq");
  check(g.dk, want_g.dk, "dk");
  check(g.dv, want_g.dv, "dv");

  // The same call again: bit for bit the same (the merge order is fixed).
  const distributed::RingAttentionResult again = distributed::ring_attention(qs, ks, vs, c.options, world());
  EXPECT_EQ(again.out.to_vector(), got.out.to_vector()) << name << " not deterministic";
  const distributed::RingAttentionGradients g2 = distributed::ring_attention_backward(
      shard_sequence(dout, r, N), qs, ks, vs, got.out, got.lse, c.options, world());
  EXPECT_EQ(g2.dk.to_vector(), g.dk.to_vector()) << name << " dk not deterministic";
  EXPECT_EQ(g2.dq.to_vector(), g.dq.to_vector()) << name << " dq not deterministic";
}

// Two chunk sizes: below the kernel's tiles (odd) and above one.
void run_sizes(Case c, const std::string& name) {
  for (std::int64_t C : {5, 40}) {
    c.C = C;
    run_case(c, name + " C=" + std::to_string(C));
  }
}

TEST(RingAttention, NonCausal) { run_sizes({}, "non-causal"); }

TEST(RingAttention, CausalTopLeft) {
  Case c;
  c.options.causal = true;
  run_sizes(c, "causal top_left");
}

TEST(RingAttention, CausalBottomRight) {
  Case c;
  c.options.causal = true;
  c.options.alignment = Alignment::bottom_right;
  run_sizes(c, "causal bottom_right");
}

TEST(RingAttention, KeyLengths) {
  const std::int64_t N = world().size();
  for (Alignment a : {Alignment::top_left, Alignment::bottom_right})
    for (bool causal : {false, true}) {
      Case c;
      c.C = 6;
      const std::int64_t L = 2 * N * c.C;
      c.options.causal = causal;
      c.options.alignment = a;
      c.options.key_lengths = {L - 7, 5};  // one cuts into the last chunk, one into the first
      run_case(c, std::string("key_lengths causal=") + (causal ? "1" : "0") +
                      (a == Alignment::top_left ? " top_left" : " bottom_right"));
    }
}

TEST(RingAttention, GroupedQueryHeads) {
  Case c;
  c.Hkv = 2;
  c.options.causal = true;
  run_sizes(c, "GQA 4/2 causal");
  c.Hkv = 1;
  c.options.causal = false;
  c.Dv = 8;
  run_case(c, "MQA 4/1 Dv=8");
}

TEST(RingAttention, Alibi) {
  Case c;
  c.options.alibi_slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  run_case(c, "alibi");
  c.options.causal = true;
  run_sizes(c, "alibi causal");
}

TEST(RingAttention, Window) {
  Case c;
  c.options.window = Window{7, 3};
  run_sizes(c, "window (7, 3)");
  c.options.causal = true;
  c.options.window = Window{11, -1};
  run_sizes(c, "causal window (11, -1)");
  // Wider than a block's two chunks (Lq + Lk = 80), narrower than the sequence.
  c.C = 40;
  c.options.window = Window{150, -1};
  run_case(c, "causal window (150, -1)");
  c.options.window = Window{11, -1};
  c.options.alignment = Alignment::bottom_right;
  c.options.key_lengths = {2 * world().size() * 40 - 3, 50};
  c.C = 40;
  run_case(c, "causal bottom_right window key_lengths");
}

TEST(RingAttention, Softcap) {
  Case c;
  c.options.softcap = 2.0;
  c.options.scale = 0.75;
  run_case(c, "softcap");
  c.options.causal = true;
  run_case(c, "softcap causal");
}

TEST(RingAttention, BFloat16) {
  Case c;
  c.dtype = DType::bf16;
  run_case(c, "bf16");
  c.options.causal = true;
  c.C = 40;
  run_case(c, "bf16 causal");
}

// ---- Refusals: the same qkv::Error on every rank ---------------------------------------

// Runs f, which must throw qkv::Error on every rank; returns the message (checked
// to contain `part`).
template <class F>
std::string expect_error(F f, const std::string& part) {
  std::string message;
  try {
    f();
    ADD_FAILURE() << "no qkv::Error (wanted one containing \"" << part << "\") on rank " << world().rank();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
  // Every rank's message is the same: compare lengths and a checksum across ranks.
  double sum = 0;
  for (std::size_t n = 0; n < message.size(); ++n) sum += double(static_cast<unsigned char>(message[n])) * double(n + 1);
  EXPECT_EQ(world().max(sum), world().min(sum)) << "ranks got different messages; this one: " << message;
  EXPECT_EQ(world().max(double(message.size())), world().min(double(message.size())));
  return message;
}

struct Shards {
  Tensor q, k, v;
};

Shards shards(std::int64_t Ls, std::int64_t B = 1) {
  Rng rng(3);
  return {random_tensor({B, 2, Ls, 8}, rng), random_tensor({B, 2, Ls, 8}, rng), random_tensor({B, 2, Ls, 8}, rng)};
}

TEST(RingAttentionErrors, MaskIsRefused) {
  const Shards s = shards(4);
  AttentionOptions o;
  o.mask = Tensor::full({4, 4}, 1.0f, DType::boolean);
  expect_error([&] { distributed::ring_attention(s.q, s.k, s.v, o, world()); }, "mask tensor is not supported");
}

TEST(RingAttentionErrors, DropoutIsRefused) {
  const Shards s = shards(4);
  AttentionOptions o;
  o.dropout_p = 0.1;
  expect_error([&] { distributed::ring_attention(s.q, s.k, s.v, o, world()); }, "dropout is not supported");
  const Tensor out = Tensor::zeros({1, 2, 4, 8}), lse = Tensor::zeros({1, 2, 4});
  expect_error([&] { distributed::ring_attention_backward(out, s.q, s.k, s.v, out, lse, o, world()); },
               "ring_attention_backward: rank 0: dropout is not supported");
}

TEST(RingAttentionErrors, DifferentQueryAndKeyLengthsAreRefused) {
  const Shards s = shards(4), t = shards(6);
  expect_error([&] { distributed::ring_attention(s.q, t.k, t.v, {}, world()); }, "Lq = Lk");
}

TEST(RingAttentionErrors, LengthNotDivisibleByTwoN) {
  const Shards s = shards(3);
  expect_error([&] { distributed::ring_attention(s.q, s.k, s.v, {}, world()); }, "must be divisible by 2N");
}

TEST(RingAttentionErrors, RanksDisagreeOnShapes) {
  // The last rank's shards are longer than the others'.
  const bool odd_one = world().rank() == world().size() - 1;
  const Shards s = shards(odd_one ? 6 : 4);
  const std::string m = expect_error([&] { distributed::ring_attention(s.q, s.k, s.v, {}, world()); },
                                     "the ranks disagree on q shape: rank 0 has (1, 2, 4, 8), rank " +
                                         std::to_string(world().size() - 1) + " has (1, 2, 6, 8)");
  (void)m;
}

TEST(RingAttentionErrors, RanksDisagreeOnOptions) {
  const Shards s = shards(4);
  AttentionOptions o;
  o.causal = world().rank() == 0;
  expect_error([&] { distributed::ring_attention(s.q, s.k, s.v, o, world()); },
               "the ranks disagree on options.causal: rank 0 has true, rank 1 has false");
}

TEST(RingAttentionErrors, RanksDisagreeOnDtype) {
  Shards s = shards(4);
  if (world().rank() == 1) s = {s.q.to(DType::bf16), s.k.to(DType::bf16), s.v.to(DType::bf16)};
  expect_error([&] { distributed::ring_attention(s.q, s.k, s.v, {}, world()); },
               "the ranks disagree on q dtype: rank 0 has f32, rank 1 has bf16");
}

TEST(RingAttentionErrors, InvalidOptionsOnTheWholeSequence) {
  const Shards s = shards(4);
  AttentionOptions o;
  o.key_lengths = {4 * world().size() + 1};  // more than L keys
  expect_error([&] { distributed::ring_attention(s.q, s.k, s.v, o, world()); }, "key_lengths[0] must be in [0, Lk = " +
                                                                                    std::to_string(4 * world().size()));
}

// After the refusals the ring still works (nothing was left in flight).
TEST(RingAttentionErrors, RingWorksAfterErrors) { run_case({}, "after errors"); }

TEST(Sharding, RoundTrip) {
  Rng rng(5);
  const Tensor full = random_tensor({2, 3, 24, 4}, rng);
  for (int n : {1, 2, 3, 4}) {
    std::vector<Tensor> parts;
    for (int r = 0; r < n; ++r) parts.push_back(shard_sequence(full, r, n));
    EXPECT_EQ(distributed::unshard_sequence(parts).to_vector(), full.to_vector());
  }
  // Rank 1 of 2: chunks 1 and 2 of 4 (6 tokens each).
  EXPECT_EQ(shard_sequence(full, 1, 2).slice(2, 0, 6).to_vector(), full.slice(2, 6, 12).to_vector());
  EXPECT_EQ(shard_sequence(full, 1, 2).slice(2, 6, 12).to_vector(), full.slice(2, 12, 18).to_vector());
  EXPECT_THROW(shard_sequence(full, 0, 5), Error);  // 24 is not divisible by 10
  const Tensor mine = shard_sequence(full, world().rank(), world().size());
  EXPECT_EQ(distributed::gather_sequence(mine, world()).to_vector(), full.to_vector());
}

}  // namespace
}  // namespace qkv

namespace {

// The other ranks print only their failures, each with its rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace

// One MPI session around every test; rank 0 prints GoogleTest's report, the others their
// failures (every rank's failures fail the run: mpirun returns non-zero when any rank does).
int main(int argc, char** argv) {
  qkv::distributed::Session session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (qkv::world().rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(qkv::world().rank()));
  }
  const int failed = RUN_ALL_TESTS();
  return failed;
}
