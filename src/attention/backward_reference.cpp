// The naive twin of the attention backward: one query row at a time, in double.
//
// The forward (reference.cpp), for query i of head h, keys j not masked:
//   s_ij = scale·(q_i·k_j)              the raw score
//   t_ij = tanh(s_ij / c)               softcap c: s_ij ← c·t_ij
//   s_ij ← s_ij − slope_h·|i' − j| + mask_ij
//   P_ij = exp(s_ij) / Σ_j exp(s_ij)    (masked: 0)
//   Z_ij = keep(b, h, i, j) / (1 − p)   dropout, regenerated from (seed, b, h, i, j)
//   out_i = Σ_j P_ij·Z_ij·v_j
// differentiated with dO = ∂loss/∂out (Dao 2023, FlashAttention-2, Algorithm 2):
//   dv_j  += P_ij·Z_ij·dO_i                     (ALiBi and the float mask are constants)
//   dP_ij  = Z_ij·(dO_i·v_j)
//   D_i    = Σ_j P_ij·dP_ij                     (= dO_i·out_i; computed here from P)
//   dS_ij  = P_ij·(dP_ij − D_i)                 softmax's Jacobian
//   dS_ij ← dS_ij·(1 − t_ij²)                   softcap: d(c·tanh(s/c))/ds
//   dq_i   = scale·Σ_j dS_ij·k_j,   dk_j += scale·dS_ij·q_i
// GQA: every query head of a group adds into its key/value head's dk and dv.
// f64 inputs are read and computed in double and give f64 gradients; the rest is read as
// f32 (exact) and gives f32 gradients (reference.h: the compute element type E).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "attention/backward.h"
#include "attention/reference.h"
#include "core/parallel.h"
#include "qkv/error.h"
#include "qkv/threads.h"

namespace qkv::detail {
namespace {

template <class E>
AttentionGradients reference_backward_planned(const AttentionProblem& p, const Tensor& dout_in,
                                              const Tensor& q_in, const Tensor& k_in, const Tensor& v_in);

}  // namespace

AttentionGradients reference_attention_backward(const AttentionProblem& p, const Tensor& dout_in,
                                                const Tensor& q_in, const Tensor& k_in,
                                                const Tensor& v_in) {
  // attention_backward has checked that dout is f64 exactly when q, k and v are.
  const DType compute = reference_compute_dtype(q_in.dtype());
  const bool f64 = compute == DType::f64;
  const auto size = static_cast<std::int64_t>(dtype_size(compute));
  MemoryPlan plan("attention_backward (reference)");
  plan_compute_contiguous(plan, f64 ? "q as contiguous f64" : "q as contiguous f32", q_in, compute);
  plan_compute_contiguous(plan, f64 ? "k as contiguous f64" : "k as contiguous f32", k_in, compute);
  plan_compute_contiguous(plan, f64 ? "v as contiguous f64" : "v as contiguous f32", v_in, compute);
  plan_compute_contiguous(plan, f64 ? "dout as contiguous f64" : "dout as contiguous f32", dout_in, compute);
  plan.add(f64 ? "dq (B, Hq, Lq, Dk) f64" : "dq (B, Hq, Lq, Dk) f32", {p.B, p.Hq, p.Lq, p.Dk, size});
  plan.add(f64 ? "dk (B, Hkv, Lk, Dk) f64" : "dk (B, Hkv, Lk, Dk) f32", {p.B, p.Hkv, p.Lk, p.Dk, size});
  plan.add(f64 ? "dv (B, Hkv, Lk, Dv) f64" : "dv (B, Hkv, Lk, Dv) f32", {p.B, p.Hkv, p.Lk, p.Dv, size});
  // Per thread, in double: a head's dk and dv (Lk, Dk + Dv), five rows of Lk and one of Dk.
  const auto per_thread = checked_product({p.Lk, p.Dk + p.Dv});
  plan.add_per_thread("a head's dk and dv and rows of scores in double", num_threads(),
                      per_thread && *per_thread < (std::size_t{1} << 59) ? static_cast<std::int64_t>(*per_thread + 5 * p.Lk + p.Dk) * 8 : -1);
  return plan.run([&] {
    return f64 ? reference_backward_planned<double>(p, dout_in, q_in, k_in, v_in)
               : reference_backward_planned<float>(p, dout_in, q_in, k_in, v_in);
  });
}

namespace {

// E: the compute element type (float, or double for f64 inputs), also the gradients'.
template <class E>
AttentionGradients reference_backward_planned(const AttentionProblem& p, const Tensor& dout_in,
                                              const Tensor& q_in, const Tensor& k_in, const Tensor& v_in) {
  constexpr DType kCompute = kComputeDType<E>;
  const Tensor q = as_compute_contiguous(q_in, kCompute);        // (B, Hq, Lq, Dk)
  const Tensor k = as_compute_contiguous(k_in, kCompute);        // (B, Hkv, Lk, Dk)
  const Tensor v = as_compute_contiguous(v_in, kCompute);        // (B, Hkv, Lk, Dv)
  const Tensor dout = as_compute_contiguous(dout_in, kCompute);  // (B, Hq, Lq, Dv)
  const E* qd = q.data_as<E>();
  const E* kd = k.data_as<E>();
  const E* vd = v.data_as<E>();
  const E* dod = dout.data_as<E>();

  AttentionGradients g;
  g.dq = Tensor::zeros({p.B, p.Hq, p.Lq, p.Dk}, kCompute);   // (B, Hq, Lq, Dk)
  g.dk = Tensor::zeros({p.B, p.Hkv, p.Lk, p.Dk}, kCompute);  // (B, Hkv, Lk, Dk)
  g.dv = Tensor::zeros({p.B, p.Hkv, p.Lk, p.Dv}, kCompute);  // (B, Hkv, Lk, Dv)
  E* dq = g.dq.data_as<E>();
  E* dk = g.dk.data_as<E>();
  E* dv = g.dv.data_as<E>();

  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  const double keep_scale = p.dropout_p < 1.0 ? 1.0 / (1.0 - p.dropout_p) : 0.0;
  const std::int64_t tasks = p.B * p.Hkv;  // one (b, key/value head): owns its dk, dv rows

  RegionErrors errors("attention.backward_reference");
#pragma omp parallel num_threads(num_threads())
  {
    const auto Lk = static_cast<std::size_t>(p.Lk);
    std::vector<double> s, t, P, Z, dP, dq_row, dk_acc, dv_acc;
    errors.run([&] {
      for (std::vector<double>* row : {&s, &t, &P, &Z, &dP}) row->resize(Lk);  // (Lk) one row each
      dq_row.resize(static_cast<std::size_t>(p.Dk));                           // (Dk)
      dk_acc.resize(Lk * p.Dk);                                                // (Lk, Dk)
      dv_acc.resize(Lk * p.Dv);                                                // (Lk, Dv)
    });
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t task = 0; task < tasks; ++task) errors.run([&] {  // not where the buffers failed
      const std::int64_t b = task / p.Hkv, hk = task % p.Hkv;
      const E* kb = kd + task * p.Lk * p.Dk;  // (Lk, Dk) of (b, hk)
      const E* vb = vd + task * p.Lk * p.Dv;  // (Lk, Dv) of (b, hk)
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0);
      for (std::int64_t h = hk * p.group; h < (hk + 1) * p.group; ++h) {
        for (std::int64_t i = 0; i < p.Lq; ++i) {
          const std::int64_t row = (b * p.Hq + h) * p.Lq + i;
          const E* qi = qd + row * p.Dk;
          const E* doi = dod + row * p.Dv;
          // The forward's scores, from the forward's own function.
          bool saw_nan = false;
          const double m = reference_score_row(p, b, h, i, qi, kb, s.data(), t.data(), &saw_nan);
          // A fully masked row has out = 0 whatever q, k, v are. (A NaN score makes the
          // whole row NaN below, as it made the forward's row NaN.)
          if (m == kMinusInf && !saw_nan) continue;

          double sum = 0.0;
          for (std::int64_t j = 0; j < p.Lk; ++j) {
            P[j] = std::exp(s[j] - m);  // masked: exp(−inf) = 0 exactly; NaN stays NaN
            sum += P[j];
          }
          double D = 0.0;
          for (std::int64_t j = 0; j < p.Lk; ++j) {
            P[j] /= sum;
            // A key of probability exactly 0 (masked, underflowed) is never read, as in the
            // forward: its dS and dv terms are P·(…) = 0.
            if (P[j] == 0.0) continue;
            Z[j] = (p.dropout_p > 0.0 && !p.dropout_keeps(b, h, i, j)) ? 0.0 : keep_scale;
            double dot = 0.0;
            if (Z[j] != 0.0)
              for (std::int64_t d = 0; d < p.Dv; ++d) dot += double{doi[d]} * double{vb[j * p.Dv + d]};
            dP[j] = Z[j] * dot;
            D += P[j] * dP[j];
          }
          std::fill(dq_row.begin(), dq_row.end(), 0.0);
          for (std::int64_t j = 0; j < p.Lk; ++j) {
            if (P[j] == 0.0) continue;
            const double w = P[j] * Z[j];  // the weight out_i gave v_j
            if (w != 0.0)
              for (std::int64_t d = 0; d < p.Dv; ++d) dv_acc[j * p.Dv + d] += w * double{doi[d]};
            double ds = P[j] * (dP[j] - D);
            if (p.has_softcap) ds *= 1.0 - t[j] * t[j];
            ds *= p.scale;
            for (std::int64_t d = 0; d < p.Dk; ++d) {
              dq_row[d] += ds * double{kb[j * p.Dk + d]};
              dk_acc[j * p.Dk + d] += ds * double{qi[d]};
            }
          }
          for (std::int64_t d = 0; d < p.Dk; ++d) dq[row * p.Dk + d] = static_cast<E>(dq_row[d]);
        }
      }
      for (std::int64_t n = 0; n < p.Lk * p.Dk; ++n) dk[task * p.Lk * p.Dk + n] = static_cast<E>(dk_acc[n]);
      for (std::int64_t n = 0; n < p.Lk * p.Dv; ++n) dv[task * p.Lk * p.Dv + n] = static_cast<E>(dv_acc[n]);
    });
  }
  errors.rethrow();
  return g;
}

}  // namespace

}  // namespace qkv::detail
