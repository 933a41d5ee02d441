// Ring attention over MPI (include/qkv/distributed.h).
//
// Rank r holds the zigzag chunks r and 2N − 1 − r (C tokens each) of q, k and v. At step s
// of N it holds the K/V shard of rank src = r − s (mod N), receives the next one from rank
// r − 1 and sends the current one to rank r + 1 (MPI_Isend/MPI_Irecv, posted before the
// kernels run). Each of the four (query chunk, key chunk) pairs is one call of the fused
// kernel on C queries and C keys whose diagonal is moved by the chunks' distance
// (detail::attention_shifted), so causal masks in either alignment, windows, ALiBi and key
// lengths mean what they mean on the whole sequence. A pair with nothing visible is
// skipped. Partial (out, lse) merge by the log-sum-exp rule (Ring Attention, Liu et al.
// 2023; FlashAttention-2's rescaling), always in the order of the steps, so the result does
// not depend on when messages arrive.
//
// Backward: the same ring once more; every pair runs the fused backward with the merged
// forward's out and lse (it recomputes the probabilities from lse), dq accumulates in
// place, and each K/V shard's partial dk and dv travel one rank behind it (a second ring)
// until they are back at their owner. Each rank adds its own part to what arrives, in ring
// order: deterministic too.
//
// Progress: Open MPI's shared-memory transport moves a large message only inside MPI
// calls, so MPI_Testall runs between the pairs' kernel calls (its time is counted as
// communication).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attention/problem.h"
#include "distributed/communicator.h"
#include "qkv/attention.h"
#include "qkv/distributed.h"
#include "qkv/error.h"

namespace qkv::distributed {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ---- The collective argument check ------------------------------------------------------

// What every rank must agree on, as (name, value) text, and this rank's own complaint
// (empty when its arguments are valid).
struct Description {
  std::vector<std::pair<std::string, std::string>> fields;
  std::string error;
};

std::string describe_tensor_shape(const Tensor& t) { return t.defined() ? t.shape_string() : "undefined"; }
std::string describe_tensor_dtype(const Tensor& t) { return t.defined() ? dtype_name(t.dtype()) : "undefined"; }

template <class T>
std::string join(const std::vector<T>& values) {
  std::ostringstream s;
  s.precision(17);
  s << "[";
  for (std::size_t i = 0; i < values.size(); ++i) s << (i ? ", " : "") << values[i];
  s << "]";
  return s.str();
}

void describe_options(Description& d, const AttentionOptions& o) {
  std::ostringstream scale, softcap;
  scale.precision(17);
  softcap.precision(17);
  if (o.scale) scale << *o.scale; else scale << "default";
  if (o.softcap) softcap << *o.softcap; else softcap << "none";
  d.fields.emplace_back("options.scale", scale.str());
  d.fields.emplace_back("options.causal", o.causal ? "true" : "false");
  d.fields.emplace_back("options.alignment", o.alignment == Alignment::top_left ? "top_left" : "bottom_right");
  d.fields.emplace_back("options.mask", o.mask.defined() ? "a tensor " + o.mask.shape_string() : "none");
  d.fields.emplace_back("options.key_lengths", join(o.key_lengths));
  std::ostringstream window;
  if (o.window) window << "(" << o.window->left << ", " << o.window->right << ")"; else window << "none";
  d.fields.emplace_back("options.window", window.str());
  d.fields.emplace_back("options.alibi_slopes", join(o.alibi_slopes));
  d.fields.emplace_back("options.softcap", softcap.str());
  d.fields.emplace_back("options.dropout_p", std::to_string(o.dropout_p));
  d.fields.emplace_back("options.return_probs", o.return_probs ? "true" : "false");
  d.fields.emplace_back("options.impl", std::to_string(static_cast<int>(o.impl)));
}

// Serialized as name \x1f value \x1e ... and the error after a \x1d.
std::string serialize(const Description& d) {
  std::string s;
  for (const auto& [name, value] : d.fields) s += name + '\x1f' + value + '\x1e';
  return s + '\x1d' + d.error;
}

Description deserialize(const std::string& s) {
  Description d;
  const std::size_t end = s.find('\x1d');
  d.error = s.substr(end + 1);
  std::size_t at = 0;
  while (at < end) {
    const std::size_t sep = s.find('\x1f', at), stop = s.find('\x1e', at);
    d.fields.emplace_back(s.substr(at, sep - at), s.substr(sep + 1, stop - sep - 1));
    at = stop + 1;
  }
  return d;
}

// Every rank's description (MPI_Allgather of the lengths, then MPI_Allgatherv); throws the
// same qkv::Error on every rank when the ranks disagree or any rank's arguments are invalid,
// so no rank enters the ring alone (which would hang the others).
void check_collectively(const char* where, const Description& mine, const Communicator::Impl& c) {
  const std::string text = serialize(mine);
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(c.size)), offsets(static_cast<std::size_t>(c.size));
  check_mpi(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, c.comm), "MPI_Allgather");
  int total = 0;
  for (int r = 0; r < c.size; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  check_mpi(MPI_Allgatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                           MPI_CHAR, c.comm),
            "MPI_Allgatherv");
  std::vector<Description> ranks;
  for (int r = 0; r < c.size; ++r)
    ranks.push_back(deserialize(all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                                           static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]))));
  const Description& first = ranks[0];
  for (std::size_t f = 0; f < first.fields.size(); ++f)
    for (int r = 1; r < c.size; ++r) {
      const Description& other = ranks[static_cast<std::size_t>(r)];
      if (f < other.fields.size() && other.fields[f].second == first.fields[f].second) continue;
      std::ostringstream m;
      m << where << ": the ranks disagree on " << first.fields[f].first << ": rank 0 has "
        << first.fields[f].second << ", rank " << r << " has "
        << (f < other.fields.size() ? other.fields[f].second : "nothing");
      throw Error(m.str());
    }
  for (int r = 0; r < c.size; ++r)
    if (!ranks[static_cast<std::size_t>(r)].error.empty())
      throw Error(std::string(where) + ": rank " + std::to_string(r) + ": " + ranks[static_cast<std::size_t>(r)].error);
}

// ---- The shapes of one call -------------------------------------------------------------

struct Ring {
  int N = 1, r = 0;
  std::int64_t B = 0, Hq = 0, Hkv = 0, Ls = 0, C = 0, L = 0, Dk = 0, Dv = 0;
  std::vector<std::int64_t> key_lengths;  // B global key lengths (L when not given)
};

// The rank's own validity, as a message (empty when valid): what ring attention refuses,
// then every check single-process attention makes, on the whole sequence's shapes.
std::string local_error(const Tensor& q, const Tensor& k, const Tensor& v,
                        const AttentionOptions& o, int N) {
  std::ostringstream m;
  if (!q.defined() || !k.defined() || !v.defined()) return "q, k and v must be defined";
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    return "q, k and v must be 4-d (B, H, Ls, D) shards, got " + q.shape_string() + ", " + k.shape_string() +
           ", " + v.shape_string();
  if (o.mask.defined()) return "a mask tensor is not supported by ring attention yet (use causal, window or key_lengths)";
  if (o.dropout_p != 0.0) return "dropout is not supported by ring attention yet (dropout_p must be 0)";
  if (o.return_probs) return "return_probs is not supported by ring attention (it would materialize L x L)";
  if (q.dtype() == DType::f64) return "f64 is not supported by ring attention (f32, bf16 or f16)";
  if (q.size(2) != k.size(2))
    return "the query and key shard lengths must be equal (Lq = Lk; ring attention is self-attention over one "
           "sequence), got q.size(2) = " + std::to_string(q.size(2)) + " and k.size(2) = " + std::to_string(k.size(2));
  const std::int64_t Ls = q.size(2), L = Ls * N;
  if (Ls % 2 != 0) {
    m << "the sequence length L = " << N << " ranks x " << Ls << " = " << L << " must be divisible by 2N = "
      << 2 * N << " (the zigzag layout's chunks): each shard's length must be even, got " << Ls;
    return m.str();
  }
  try {
    // The whole sequence's shapes, as stride-0 views of one element: the same validation
    // (and messages) as single-process attention, with L for Lq and Lk.
    const auto whole = [L](const Tensor& t) {
      return Tensor::zeros({1, 1, 1, 1}, t.dtype()).expand({t.size(0), t.size(1), L, t.size(3)});
    };
    validate_attention(whole(q), whole(k), whole(v), o);
    if (Ls > 0) validate_attention(q, k, v, AttentionOptions{});  // strides, dtypes of the shards
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Ring make_ring(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
               const Communicator::Impl& c) {
  Ring g;
  g.N = c.size;
  g.r = c.rank;
  g.B = q.size(0);
  g.Hq = q.size(1);
  g.Hkv = k.size(1);
  g.Ls = q.size(2);
  g.C = g.Ls / 2;
  g.L = g.Ls * g.N;
  g.Dk = q.size(3);
  g.Dv = v.size(3);
  g.key_lengths = o.key_lengths.empty() ? std::vector<std::int64_t>(static_cast<std::size_t>(g.B), g.L)
                                        : o.key_lengths;
  return g;
}

// One (query chunk, key chunk) pair: the options of the C × C block and its diagonal shift,
// or visible = false when no query of the block may see any key of it.
struct Pair {
  bool visible = false;
  AttentionOptions options;
  std::vector<std::int64_t> shift;  // B entries
};

Pair make_pair_options(const Ring& g, const AttentionOptions& o, std::int64_t query_chunk, std::int64_t key_chunk) {
  Pair p;
  p.options = o;
  p.options.alignment = Alignment::top_left;  // bottom_right is folded into the shift
  p.options.return_lse = true;
  p.options.return_probs = false;
  p.options.key_lengths.assign(static_cast<std::size_t>(g.B), 0);
  p.shift.assign(static_cast<std::size_t>(g.B), 0);
  const std::int64_t ks = key_chunk * g.C, qs = query_chunk * g.C;
  const bool window = o.window && (o.window->left >= 0 || o.window->right >= 0);
  for (std::int64_t b = 0; b < g.B; ++b) {
    const std::size_t ub = static_cast<std::size_t>(b);
    const std::int64_t kl = std::clamp<std::int64_t>(g.key_lengths[ub] - ks, 0, g.C);
    // i' − j on the whole sequence = (qs + i + [Lk_b − L]) − (ks + j).
    const std::int64_t shift = qs - ks + (o.alignment == Alignment::bottom_right ? g.key_lengths[ub] - g.L : 0);
    p.options.key_lengths[ub] = kl;
    p.shift[ub] = shift;
    // Every row's allowed keys lie in [lo, hi] (attention.h: causal j <= i', a window
    // i' − left <= j <= i' + right, j < key length), with i' in [shift, shift + C − 1].
    std::int64_t lo = 0, hi = kl - 1;
    if (o.causal) hi = std::min(hi, shift + g.C - 1);
    if (window && o.window->right >= 0) hi = std::min(hi, shift + g.C - 1 + o.window->right);
    if (window && o.window->left >= 0) lo = std::max(lo, shift - o.window->left);
    if (lo <= hi && g.C > 0) p.visible = true;
  }
  return p;
}

// The zigzag chunk index of this rank's (or rank src's) chunk 0 or 1.
std::int64_t chunk_of(const Ring& g, int rank, int which) {
  return which == 0 ? rank : 2 * static_cast<std::int64_t>(g.N) - 1 - rank;
}

// ---- Messages ---------------------------------------------------------------------------

constexpr int kTagK = 11, kTagV = 12, kTagDk = 13, kTagDv = 14;

int message_bytes(const Tensor& t) {
  QKV_CHECK(t.nbytes() <= static_cast<std::size_t>(INT_MAX),
            "ring attention: a shard of " << t.nbytes() << " bytes is larger than one MPI message of "
                                          << INT_MAX << " bytes can carry (use more ranks)");
  return static_cast<int>(t.nbytes());
}

struct Requests {
  std::vector<MPI_Request> list;
  void send(const Tensor& t, int to, int tag, MPI_Comm comm) {
    list.emplace_back();
    check_mpi(MPI_Isend(t.data(), message_bytes(t), MPI_BYTE, to, tag, comm, &list.back()), "MPI_Isend");
  }
  void receive(Tensor& t, int from, int tag, MPI_Comm comm) {
    list.emplace_back();
    check_mpi(MPI_Irecv(t.data(), message_bytes(t), MPI_BYTE, from, tag, comm, &list.back()), "MPI_Irecv");
  }
  // Lets the transport move data while the kernels run between calls.
  void progress() {
    if (list.empty()) return;
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(list.size()), list.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  }
  // One step of the K/V ring: the previous rank's shard received into k_in and v_in, this
  // rank's (k_out, v_out) sent to the next rank.
  void pass_kv(const Tensor& k_out, const Tensor& v_out, Tensor& k_in, Tensor& v_in, int next, int prev,
               MPI_Comm comm) {
    receive(k_in, prev, kTagK, comm);
    receive(v_in, prev, kTagV, comm);
    send(k_out, next, kTagK, comm);
    send(v_out, next, kTagV, comm);
  }
  void wait() {
    if (list.empty()) return;
    check_mpi(MPI_Waitall(static_cast<int>(list.size()), list.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    list.clear();
  }
};

// ---- Arithmetic on (B, H, Ls, D) f32 accumulators ---------------------------------------

// Merges a block's (out, lse) for rows [row0, row0 + C) into the accumulators by the
// log-sum-exp rule, in double: with m = max(l_acc, l_blk),
//   out = (e^(l_acc − m)·out_acc + e^(l_blk − m)·out_blk) / (e^(l_acc − m) + e^(l_blk − m)),
//   lse = m + log(e^(l_acc − m) + e^(l_blk − m)).
// A block row with lse −∞ (nothing visible) leaves the row as it is.
void merge_block(Tensor& acc_out, Tensor& acc_lse, std::int64_t row0, const Tensor& out_blk, const Tensor& lse_blk) {
  const std::int64_t B = acc_out.size(0), H = acc_out.size(1), Ls = acc_out.size(2), D = acc_out.size(3);
  const std::int64_t C = out_blk.size(2);
  const Tensor ob = out_blk.dtype() == DType::f32 ? out_blk.contiguous() : out_blk.to(DType::f32);
  const Tensor lb = lse_blk.contiguous();
  float* ao = acc_out.data_as<float>();
  float* al = acc_lse.data_as<float>();
  const float* bo = ob.data_as<float>();
  const float* bl = lb.data_as<float>();
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    for (std::int64_t i = 0; i < C; ++i) {
      const double l2 = bl[bh * C + i];
      if (l2 == -std::numeric_limits<double>::infinity()) continue;
      float* o1 = ao + (bh * Ls + row0 + i) * D;
      const float* o2 = bo + (bh * C + i) * D;
      float& l1f = al[bh * Ls + row0 + i];
      const double l1 = l1f;
      if (l1 == -std::numeric_limits<double>::infinity()) {
        std::copy(o2, o2 + D, o1);
        l1f = static_cast<float>(l2);
        continue;
      }
      const double m = std::max(l1, l2);
      const double w1 = std::exp(l1 - m), w2 = std::exp(l2 - m), sum = w1 + w2;
      const double a = w1 / sum, c = w2 / sum;
      for (std::int64_t d = 0; d < D; ++d) o1[d] = static_cast<float>(a * o1[d] + c * o2[d]);
      l1f = static_cast<float>(m + std::log(sum));
    }
}

// acc[:, :, row0 : row0 + C, :] += part (f32; part contiguous (B, H, C, D)).
void add_block(Tensor& acc, std::int64_t row0, const Tensor& part) {
  const std::int64_t BH = acc.size(0) * acc.size(1), Ls = acc.size(2), D = acc.size(3), C = part.size(2);
  float* a = acc.data_as<float>();
  const float* p = part.data_as<float>();
  for (std::int64_t bh = 0; bh < BH; ++bh)
    for (std::int64_t x = 0; x < C * D; ++x) a[(bh * Ls + row0) * D + x] += p[bh * C * D + x];
}

void add_into(Tensor& acc, const Tensor& part) {
  float* a = acc.data_as<float>();
  const float* p = part.data_as<float>();
  for (std::int64_t x = 0, n = acc.numel(); x < n; ++x) a[x] += p[x];
}

Tensor chunk(const Tensor& t, const Ring& g, int which) { return t.slice(2, which * g.C, (which + 1) * g.C); }

}  // namespace

// ---- Forward ------------------------------------------------------------------------------

RingAttentionResult ring_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const AttentionOptions& options, const Communicator& comm) {
  constexpr const char* kWhere = "ring_attention";
  const Communicator::Impl& c = comm.impl();
  const auto t_start = Clock::now();
  RingTimings time;

  Description mine;
  mine.fields = {{"q shape", describe_tensor_shape(q)}, {"k shape", describe_tensor_shape(k)},
                 {"v shape", describe_tensor_shape(v)}, {"q dtype", describe_tensor_dtype(q)},
                 {"k dtype", describe_tensor_dtype(k)}, {"v dtype", describe_tensor_dtype(v)}};
  describe_options(mine, options);
  mine.error = local_error(q, k, v, options, c.size);
  check_collectively(kWhere, mine, c);
  time.comm_ms += ms_since(t_start);

  const Ring g = make_ring(q, k, v, options, c);
  RingAttentionResult result;
  Tensor acc_out = Tensor::zeros({g.B, g.Hq, g.Ls, g.Dv});                                       // (B, Hq, Ls, Dv) f32
  Tensor acc_lse = Tensor::full({g.B, g.Hq, g.Ls}, -std::numeric_limits<float>::infinity());  // (B, Hq, Ls) f32
  // The K/V shard in hand and the one arriving, contiguous in the inputs' dtype. Copies:
  // after the first swap the arriving shard is received into what was in hand, which must
  // not be the caller's k and v.
  Tensor k_cur = k.clone(), v_cur = v.clone();  // (B, Hkv, Ls, Dk), (B, Hkv, Ls, Dv)
  Tensor k_next = Tensor::empty(k.shape(), k.dtype()), v_next = Tensor::empty(v.shape(), v.dtype());
  const int next = (g.r + 1) % g.N, prev = (g.r - 1 + g.N) % g.N;

  for (int s = 0; s < g.N; ++s) {
    const int src = (g.r - s + g.N) % g.N;  // whose K/V shard is in hand
    Requests kv;
    if (s + 1 < g.N) {
      kv.pass_kv(k_cur, v_cur, k_next, v_next, next, prev, c.comm);
    }
    for (int qi = 0; qi < 2; ++qi)
      for (int ki = 0; ki < 2; ++ki) {
        const Pair pair = make_pair_options(g, options, chunk_of(g, g.r, qi), chunk_of(g, src, ki));
        if (!pair.visible) continue;
        const auto t0 = Clock::now();
        const AttentionResult part = detail::attention_shifted(chunk(q, g, qi), chunk(k_cur, g, ki),
                                                               chunk(v_cur, g, ki), pair.options, pair.shift);
        merge_block(acc_out, acc_lse, qi * g.C, part.out, part.lse);
        time.compute_ms += ms_since(t0);
        const auto t1 = Clock::now();
        kv.progress();
        time.comm_ms += ms_since(t1);
      }
    const auto t1 = Clock::now();
    kv.wait();
    time.comm_ms += ms_since(t1);
    time.wait_ms += ms_since(t1);
    if (s + 1 < g.N) {
      std::swap(k_cur, k_next);
      std::swap(v_cur, v_next);
    }
  }
  result.out = q.dtype() == DType::f32 ? acc_out : acc_out.to(q.dtype());
  result.lse = acc_lse;
  time.total_ms = ms_since(t_start);
  result.timings = time;
  return result;
}

double ring_exchange_ms(const Tensor& k, const Tensor& v, const Communicator& comm) {
  const Communicator::Impl& c = comm.impl();
  QKV_CHECK(k.defined() && v.defined(), "ring_exchange_ms: k and v must be defined tensors");
  const Tensor k_out = k.contiguous(), v_out = v.contiguous();
  Tensor k_in = Tensor::empty(k.shape(), k.dtype()), v_in = Tensor::empty(v.shape(), v.dtype());
  check_mpi(MPI_Barrier(c.comm), "MPI_Barrier");
  const auto t0 = Clock::now();
  if (c.size > 1) {
    Requests kv;
    kv.pass_kv(k_out, v_out, k_in, v_in, (c.rank + 1) % c.size, (c.rank - 1 + c.size) % c.size, c.comm);
    kv.wait();
  }
  return ms_since(t0);
}

// ---- Backward -----------------------------------------------------------------------------

RingAttentionGradients ring_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                               const Tensor& v, const Tensor& out, const Tensor& lse,
                                               const AttentionOptions& options, const Communicator& comm) {
  constexpr const char* kWhere = "ring_attention_backward";
  const Communicator::Impl& c = comm.impl();
  const auto t_start = Clock::now();
  RingTimings time;

  Description mine;
  mine.fields = {{"q shape", describe_tensor_shape(q)},       {"k shape", describe_tensor_shape(k)},
                 {"v shape", describe_tensor_shape(v)},       {"dout shape", describe_tensor_shape(dout)},
                 {"out shape", describe_tensor_shape(out)},   {"lse shape", describe_tensor_shape(lse)},
                 {"q dtype", describe_tensor_dtype(q)},       {"k dtype", describe_tensor_dtype(k)},
                 {"v dtype", describe_tensor_dtype(v)},       {"dout dtype", describe_tensor_dtype(dout)},
                 {"out dtype", describe_tensor_dtype(out)},   {"lse dtype", describe_tensor_dtype(lse)}};
  describe_options(mine, options);
  mine.error = local_error(q, k, v, options, c.size);
  if (mine.error.empty()) {
    const Shape want_out{q.size(0), q.size(1), q.size(2), v.size(3)}, want_lse{q.size(0), q.size(1), q.size(2)};
    if (!dout.defined() || dout.shape() != want_out)
      mine.error = "dout must have the output shard's shape " + shape_to_string(want_out) + ", got " + describe_tensor_shape(dout);
    else if (!out.defined() || out.shape() != want_out)
      mine.error = "out must have the output shard's shape " + shape_to_string(want_out) + ", got " + describe_tensor_shape(out);
    else if (!lse.defined() || lse.shape() != want_lse || lse.dtype() != DType::f32)
      mine.error = "lse must be ring_attention's f32 lse shard " + shape_to_string(want_lse) + ", got " +
                   describe_tensor_shape(lse) + " " + describe_tensor_dtype(lse);
  }
  check_collectively(kWhere, mine, c);
  time.comm_ms += ms_since(t_start);

  const Ring g = make_ring(q, k, v, options, c);
  RingAttentionGradients grads;
  Tensor dq = Tensor::zeros({g.B, g.Hq, g.Ls, g.Dk});  // (B, Hq, Ls, Dk) f32
  Tensor k_cur = k.clone(), v_cur = v.clone();  // (B, Hkv, Ls, Dk), (B, Hkv, Ls, Dv): copies, as in the forward
  Tensor k_next = Tensor::empty(k.shape(), k.dtype()), v_next = Tensor::empty(v.shape(), v.dtype());
  // The partial dk, dv of the shard in hand: this rank's part, what arrived from rank r − 1
  // (the sum over the ranks before), and their sum, sent on. Two outgoing buffers: one may
  // still be in flight while the other fills.
  const Shape dk_shape{g.B, g.Hkv, g.Ls, g.Dk}, dv_shape{g.B, g.Hkv, g.Ls, g.Dv};
  Tensor dk_in = Tensor::empty(dk_shape), dv_in = Tensor::empty(dv_shape);
  Tensor dk_out[2] = {Tensor::empty(dk_shape), Tensor::empty(dk_shape)};
  Tensor dv_out[2] = {Tensor::empty(dv_shape), Tensor::empty(dv_shape)};
  Requests sent[2];
  const int next = (g.r + 1) % g.N, prev = (g.r - 1 + g.N) % g.N;

  for (int s = 0; s < g.N; ++s) {
    const int src = (g.r - s + g.N) % g.N;
    const int slot = s % 2;
    Requests kv, dkv;
    if (s + 1 < g.N) {
      kv.pass_kv(k_cur, v_cur, k_next, v_next, next, prev, c.comm);
    }
    if (s > 0) {  // the partial gradients of shard src from the ranks before
      dkv.receive(dk_in, prev, kTagDk, c.comm);
      dkv.receive(dv_in, prev, kTagDv, c.comm);
    }
    {  // the buffer this step sends from must be free: its send two steps ago has finished
      const auto t1 = Clock::now();
      sent[slot].wait();
      time.comm_ms += ms_since(t1);
    }
    Tensor& dk_part = dk_out[slot];
    Tensor& dv_part = dv_out[slot];
    std::fill_n(dk_part.data_as<float>(), dk_part.numel(), 0.0f);
    std::fill_n(dv_part.data_as<float>(), dv_part.numel(), 0.0f);
    for (int qi = 0; qi < 2; ++qi)
      for (int ki = 0; ki < 2; ++ki) {
        const Pair pair = make_pair_options(g, options, chunk_of(g, g.r, qi), chunk_of(g, src, ki));
        if (!pair.visible) continue;
        const auto t0 = Clock::now();
        const AttentionGradients part = detail::attention_backward_shifted(
            chunk(dout, g, qi), chunk(q, g, qi), chunk(k_cur, g, ki), chunk(v_cur, g, ki), chunk(out, g, qi),
            chunk(lse, g, qi), pair.options, pair.shift);
        add_block(dq, qi * g.C, part.dq);
        add_block(dk_part, ki * g.C, part.dk);
        add_block(dv_part, ki * g.C, part.dv);
        time.compute_ms += ms_since(t0);
        const auto t1 = Clock::now();
        kv.progress();
        dkv.progress();
        time.comm_ms += ms_since(t1);
      }
    auto t1 = Clock::now();
    dkv.wait();
    time.comm_ms += ms_since(t1);
    time.wait_ms += ms_since(t1);
    if (s > 0) {  // in ring order: the ranks before, then this one
      const auto t0 = Clock::now();
      // dk_part = dk_in + dk_part: the same sum on every rank (float addition commutes).
      add_into(dk_part, dk_in);
      add_into(dv_part, dv_in);
      time.compute_ms += ms_since(t0);
    }
    // On to rank r + 1, which holds shard src next step; after the last step that is src
    // itself, the owner.
    sent[slot].send(dk_part, next, kTagDk, c.comm);
    sent[slot].send(dv_part, next, kTagDv, c.comm);
    t1 = Clock::now();
    kv.wait();
    time.comm_ms += ms_since(t1);
    time.wait_ms += ms_since(t1);
    if (s + 1 < g.N) {
      std::swap(k_cur, k_next);
      std::swap(v_cur, v_next);
    }
  }
  // This rank's own shard's gradients, summed over every rank, from rank r − 1.
  grads.dk = Tensor::empty(dk_shape);
  grads.dv = Tensor::empty(dv_shape);
  const auto t1 = Clock::now();
  Requests own;
  own.receive(grads.dk, prev, kTagDk, c.comm);
  own.receive(grads.dv, prev, kTagDv, c.comm);
  own.wait();
  sent[0].wait();
  sent[1].wait();
  time.comm_ms += ms_since(t1);
  time.wait_ms += ms_since(t1);
  grads.dq = dq;
  time.total_ms = ms_since(t_start);
  grads.timings = time;
  return grads;
}

// ---- Gathering ----------------------------------------------------------------------------

Tensor gather_sequence(const Tensor& shard, const Communicator& comm, std::int64_t dim) {
  QKV_CHECK(shard.defined(), "gather_sequence: shard is undefined");
  const Communicator::Impl& c = comm.impl();
  const Tensor mine = shard.contiguous();
  Tensor all = Tensor::empty([&] {
    Shape s{static_cast<std::int64_t>(c.size)};
    s.insert(s.end(), mine.shape().begin(), mine.shape().end());
    return s;
  }(), mine.dtype());
  const int bytes = message_bytes(mine);
  check_mpi(MPI_Allgather(mine.data(), bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, c.comm), "MPI_Allgather");
  std::vector<Tensor> shards;
  for (int r = 0; r < c.size; ++r) shards.push_back(all.select(0, r));
  return unshard_sequence(shards, dim);
}

}  // namespace qkv::distributed
