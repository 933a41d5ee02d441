// MultiheadAttention with torch.nn.MultiheadAttention's semantics and weight layout: one
// forward (inference, KV-cache decoding, training with a record) and its backward.

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

#include "nn/common.h"
#include "qkv/attention.h"
#include "core/parallel.h"
#include "qkv/threads.h"

namespace qkv::nn {

namespace {

// The masks of one call as qkv::AttentionOptions wants them (true = attend, or float
// added; broadcast to (B, H, L, S)), from torch's polarity (true = NOT allowed / IGNORE).
//   attn_mask (L, S) or (B·H, L, S); key_padding_mask (B, S).
// A bool key_padding_mask that only pads a suffix of every row, with no attn_mask,
// becomes key_lengths instead (the kernel then skips whole tiles of padding); without an
// attn_mask any other padding mask is (B, 1, 1, S), broadcast over the queries.
void resolve_masks(const AttentionMasks& masks, std::int64_t B, std::int64_t H, std::int64_t L,
                   std::int64_t S, AttentionOptions& options) {
  options.causal = masks.is_causal;
  const Tensor& am = masks.attn_mask;
  const Tensor& kpm = masks.key_padding_mask;
  if (!masks.key_lengths.empty()) {
    QKV_CHECK(!kpm.defined(), "MultiheadAttention: give key_padding_mask or key_lengths, not both");
    QKV_CHECK(static_cast<std::int64_t>(masks.key_lengths.size()) == B,
              "MultiheadAttention: key_lengths must hold B = " << B << " entries, got "
                                                               << masks.key_lengths.size());
    options.key_lengths = masks.key_lengths;  // checked against [0, S] by attention()
    if (!am.defined()) return;
  }
  if (am.defined()) {
    QKV_CHECK((am.dim() == 2 && am.size(0) == L && am.size(1) == S) ||
                  (am.dim() == 3 && am.size(0) == B * H && am.size(1) == L && am.size(2) == S),
              "MultiheadAttention: attn_mask must be (L, S) = (" << L << ", " << S
                  << ") or (B*H, L, S) = (" << B * H << ", " << L << ", " << S << "), got "
                  << am.shape_string());
  }
  if (kpm.defined()) {
    QKV_CHECK(kpm.dim() == 2 && kpm.size(0) == B && kpm.size(1) == S,
              "MultiheadAttention: key_padding_mask must be (B, S) = (" << B << ", " << S
                                                                         << "), got "
                                                                         << kpm.shape_string());
  }
  if (!am.defined() && !kpm.defined()) return;

  const std::vector<float> kpm_v = kpm.defined() ? kpm.to_vector() : std::vector<float>();  // (B, S)
  if (!am.defined() && kpm.dtype() == DType::boolean) {
    // Suffix padding -> key_lengths.
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(B));
    bool suffix = true;
    for (std::int64_t b = 0; b < B && suffix; ++b) {
      std::int64_t n = 0;
      while (n < S && kpm_v[static_cast<std::size_t>(b * S + n)] == 0.f) ++n;
      for (std::int64_t j = n; j < S; ++j)
        if (kpm_v[static_cast<std::size_t>(b * S + j)] == 0.f) suffix = false;
      lengths[static_cast<std::size_t>(b)] = n;
    }
    if (suffix) {
      options.key_lengths = std::move(lengths);
      return;
    }
  }

  const bool any_float = (am.defined() && am.dtype() != DType::boolean) ||
                         (kpm.defined() && kpm.dtype() != DType::boolean);
  const std::vector<float> am_v = am.defined() ? am.to_vector() : std::vector<float>();
  const bool per_head = am.defined() && am.dim() == 3;
  const std::int64_t Bm = (per_head || kpm.defined()) ? B : 1;
  const std::int64_t Hm = per_head ? H : 1;
  const std::int64_t Lm = am.defined() ? L : 1;  // a padding mask alone is the same for every query
  Tensor mask = Tensor::empty({Bm, Hm, Lm, S}, any_float ? DType::f32 : DType::boolean);  // (B|1, H|1, L|1, S)
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const bool am_bool = am.defined() && am.dtype() == DType::boolean;
  const bool kpm_bool = kpm.defined() && kpm.dtype() == DType::boolean;
  for (std::int64_t b = 0; b < Bm; ++b)
    for (std::int64_t h = 0; h < Hm; ++h)
      for (std::int64_t i = 0; i < Lm; ++i)
        for (std::int64_t j = 0; j < S; ++j) {
          float value = 0.f;  // float: added; bool: 0 = attend
          bool blocked = false;
          if (am.defined()) {
            const float a = am_v[static_cast<std::size_t>(
                per_head ? ((b * H + h) * L + i) * S + j : i * S + j)];
            if (am_bool) blocked |= a != 0.f; else value += a;
          }
          if (kpm.defined()) {
            const float p = kpm_v[static_cast<std::size_t>(b * S + j)];
            if (kpm_bool) blocked |= p != 0.f; else value += p;
          }
          const std::int64_t at = ((b * Hm + h) * Lm + i) * S + j;
          if (any_float)
            mask.data_as<float>()[at] = blocked ? neg_inf : value;
          else
            mask.data_as<bool>()[at] = !blocked;  // qkv polarity: true = attend
        }
  options.mask = mask;
}

// Whether a and b are the same tensor (the same view of the same memory).
bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.data() == b.data() && a.shape() == b.shape() && a.strides() == b.strides() &&
         a.dtype() == b.dtype();
}

// The input projection of `count` of q, k, v starting at `first` (0 = q, 1 = k, 2 = v) as
// a Linear of views: rows [first·E, (first + count)·E) of the joint in_proj, or the
// separate weight. The views share storage, so on a gradient instance the backward's
// additions land in its parameters.
Linear in_projection(const MultiheadAttention& m, std::int64_t first, std::int64_t count) {
  const std::int64_t E = m.config.embed_dim;
  Linear p;
  if (m.in_proj.weight.defined()) {
    p.weight = m.in_proj.weight.slice(0, first * E, (first + count) * E);  // (count·E, in)
  } else {
    QKV_CHECK(!m.in_proj.packed.defined(),
              "MultiheadAttention: this module keeps only a packed copy of its joint input "
              "projection, which serves self-attention inference only");
    QKV_CHECK(count == 1, "MultiheadAttention: separate q/k/v weights are projected one at a time");
    p.weight = first == 0 ? m.q_proj_weight : first == 1 ? m.k_proj_weight : m.v_proj_weight;
  }
  if (m.in_proj.bias.defined()) p.bias = m.in_proj.bias.slice(0, first * E, (first + count) * E);
  return p;
}

// x (B, L, n·H·D) -> the (B, H, L, D) view of its `index`-th group of H heads, no copy.
Tensor heads(const Tensor& x, std::int64_t index, std::int64_t H, std::int64_t D) {
  const std::int64_t B = x.size(0), L = x.size(1), n = x.size(2) / (H * D);
  return x.view({B, L, n, H, D}).select(2, index).permute({0, 2, 1, 3});
}

// (B, H, L, D) any strides -> (B, L, H·D) contiguous, in f32.
Tensor merge_heads(const Tensor& o) {
  const std::int64_t B = o.size(0), H = o.size(1), L = o.size(2), D = o.size(3);
  Tensor merged = o.permute({0, 2, 1, 3}).contiguous().view({B, L, H * D});
  return merged.dtype() == DType::f32 ? merged : merged.to(DType::f32);
}

// Writes the (B, H, L, D) gradients `parts` side by side into one (B, L, n·H·D) tensor:
// the gradient of the product that made them together.
Tensor concat_heads(std::initializer_list<const Tensor*> parts) {
  const Tensor& first = **parts.begin();
  const std::int64_t B = first.size(0), H = first.size(1), L = first.size(2), D = first.size(3);
  const auto n = static_cast<std::int64_t>(parts.size());
  Tensor out = Tensor::empty({B, L, n * H * D});  // (B, L, n·H·D)
  float* po = out.data_as<float>();
  std::int64_t col = 0;
  for (const Tensor* part : parts) {
    const Tensor s = detail::contiguous_f32(*part, "MultiheadAttention", "gradient");  // (B, H, L, D)
    const float* ps = s.data_as<float>();
    qkv::detail::parallel_chunks("nn.concat_heads", B * H, true, num_threads(), [&](std::int64_t bh0, std::int64_t bh1) {
      for (std::int64_t bh = bh0; bh < bh1; ++bh) {
        const std::int64_t b = bh / H, h = bh % H;
        for (std::int64_t l = 0; l < L; ++l)
          std::copy_n(ps + ((b * H + h) * L + l) * D, D, po + (b * L + l) * n * H * D + col + h * D);
      }
    });
    col += H * D;
  }
  return out;
}

}  // namespace

MultiheadAttention::MultiheadAttention(const MultiheadAttentionConfig& cfg, std::uint64_t seed)
    : config(cfg) {
  QKV_CHECK(config.embed_dim >= 1, "MultiheadAttention: embed_dim must be >= 1, got "
                                       << config.embed_dim);
  QKV_CHECK(config.num_heads >= 1, "MultiheadAttention: num_heads must be >= 1, got "
                                       << config.num_heads);
  QKV_CHECK(config.embed_dim % config.num_heads == 0,
            "MultiheadAttention: embed_dim (" << config.embed_dim
                                              << ") must be divisible by num_heads ("
                                              << config.num_heads << ")");
  if (config.kdim == 0) config.kdim = config.embed_dim;
  if (config.vdim == 0) config.vdim = config.embed_dim;
  if (config.out_dim == 0) config.out_dim = config.embed_dim;
  QKV_CHECK(config.kdim >= 1 && config.vdim >= 1 && config.out_dim >= 1,
            "MultiheadAttention: kdim, vdim and out_dim must be >= 1, got "
                << config.kdim << ", " << config.vdim << ", " << config.out_dim);
  const std::int64_t E = config.embed_dim;
  // torch: xavier_uniform_ on the projections (bound √(6/(fan_in + fan_out))), zero biases.
  auto xavier = [](Tensor& w, std::uint64_t s) {
    const double bound = std::sqrt(6.0 / static_cast<double>(w.size(0) + w.size(1)));
    detail::fill_uniform(w, bound, s);
  };
  if (config.kdim == E && config.vdim == E) {
    in_proj.weight = Tensor::empty({3 * E, E});
    xavier(in_proj.weight, seed);
  } else {
    q_proj_weight = Tensor::empty({E, E});
    k_proj_weight = Tensor::empty({E, config.kdim});
    v_proj_weight = Tensor::empty({E, config.vdim});
    xavier(q_proj_weight, seed);
    xavier(k_proj_weight, seed + 1);
    xavier(v_proj_weight, seed + 2);
  }
  if (config.bias) in_proj.bias = Tensor::zeros({3 * E});
  out_proj = Linear(E, config.out_dim, config.bias, seed + 3);
  if (config.bias) out_proj.bias = Tensor::zeros({config.out_dim});
}

void MultiheadAttention::pack(DType dtype) {
  if (in_proj.weight.defined()) in_proj.pack(dtype);
  out_proj.pack(dtype);
}

// forward: q, k, v = split(x·W_inᵀ + b_in); o = attention(q, k, v); y = out_proj(merge(o)) [+ r]
Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionMasks& masks, const Tensor& residual,
                                   KVCache* cache, Tensor* probs, Record* record,
                                   const DropoutDraw& dropout) const {
  const std::int64_t E = config.embed_dim, H = config.num_heads, D = head_dim();
  QKV_CHECK(query.defined() && query.dim() == 3 && query.size(2) == E,
            "MultiheadAttention: query must be (B, L, embed_dim = " << E << "), got "
                << (query.defined() ? query.shape_string() : std::string("undefined")));
  const std::int64_t B = query.size(0), L = query.size(1);
  QKV_CHECK(key.defined() && key.dim() == 3 && key.size(0) == B && key.size(2) == config.kdim,
            "MultiheadAttention: key must be (B = " << B << ", S, kdim = " << config.kdim
                << "), got " << (key.defined() ? key.shape_string() : std::string("undefined")));
  const std::int64_t S = key.size(1);
  QKV_CHECK(value.defined() && value.dim() == 3 && value.size(0) == B && value.size(1) == S &&
                value.size(2) == config.vdim,
            "MultiheadAttention: value must be (B = " << B << ", S = " << S << ", vdim = "
                << config.vdim << "), got "
                << (value.defined() ? value.shape_string() : std::string("undefined")));
  QKV_CHECK(cache == nullptr || record == nullptr,
            "MultiheadAttention: a KV cache is for decoding; a forward that records for "
            "training takes none");
  const bool self = same_tensor(query, key) && same_tensor(key, value);
  const bool shared_kv = !self && same_tensor(key, value);
  const bool joint = in_proj.weight.defined() || (in_proj.packed.defined() && record == nullptr);
  Record scratch;  // where the projections' records go when nobody keeps them
  Record& rec = record ? *record : scratch;
  Linear::Record* keep_q = record ? &rec.in_q : nullptr;
  Linear::Record* keep_k = record ? &rec.in_k : nullptr;
  Linear::Record* keep_v = record ? &rec.in_v : nullptr;
  rec.inputs = self ? Record::Inputs::self : shared_kv ? Record::Inputs::shared_kv
                                                      : Record::Inputs::separate;

  // Under a bf16 ProductPrecision scope (qkv/nn/precision.h) the attention's products take
  // q, k and v in bf16, the kernel's bf16-pair path, forward and backward; the record keeps
  // them so. Decoding with a cache keeps its own dtypes.
  const bool bf16 = product_dtype() == DType::bf16 && cache == nullptr;
  const auto as_products = [&](const Tensor& t) { return bf16 ? t.to(DType::bf16) : t; };
  Tensor q, k, v;  // (B, H, L|S, D) views of the projections
  if (self && joint) {
    // One product for all three: (B, L, 3E) -> three (B, H, L, D) views, no copy.
    Tensor qkv = in_proj.forward(query, {}, keep_q);  // (B, L, 3E)
    if (bf16) qkv = detail::contiguous_bf16(qkv, "MultiheadAttention", "q, k, v");
    q = heads(qkv, 0, H, D);
    k = heads(qkv, 1, H, D);
    v = heads(qkv, 2, H, D);
    rec.kv_rows = 0;  // the projection of q made k and v too
  } else {
    q = heads(in_projection(*this, 0, 1).forward(query, {}, keep_q), 0, H, D);
    const bool cached = cache != nullptr && !self && cache->length > 0;
    if (cached) {
      QKV_CHECK(cache->length == S, "MultiheadAttention: the cross-attention cache holds "
                                        << cache->length << " keys, the memory " << S);
    } else if (shared_kv && joint) {
      const Tensor kv = in_projection(*this, 1, 2).forward(key, {}, keep_k);  // (B, S, 2E)
      k = heads(kv, 0, H, D);
      v = heads(kv, 1, H, D);
      rec.kv_rows = 2 * E;
    } else {
      k = heads(in_projection(*this, 1, 1).forward(key, {}, keep_k), 0, H, D);
      v = heads(in_projection(*this, 2, 1).forward(value, {}, keep_v), 0, H, D);
      rec.kv_rows = E;
    }
    q = as_products(q);
    if (k.defined()) {
      k = as_products(k);
      v = as_products(v);
    }
  }

  AttentionOptions options;
  std::int64_t keys = S;  // what the queries attend over
  if (cache != nullptr) {
    QKV_CHECK(cache->k.defined() && cache->k.size(0) == B && cache->k.size(1) == H &&
                  cache->k.size(3) == D,
              "MultiheadAttention: the KV cache must be (B, H, capacity, D) = (" << B << ", "
                  << H << ", ·, " << D << "), got "
                  << (cache->k.defined() ? cache->k.shape_string() : "none"));
    if (k.defined()) cache->append(k, v);
    k = cache->keys();
    v = cache->values();
    keys = cache->length;
    // The kernel takes one dtype for q, k and v: q follows a bf16/f16 cache.
    if (cache->k.dtype() != q.dtype()) q = q.to(cache->k.dtype());
    options.alignment = Alignment::bottom_right;  // the L new queries are the last positions
  }
  resolve_masks(masks, B, H, L, keys, options);
  if (dropout.active()) {
    options.dropout_p = dropout.p;
    options.seed = dropout.seed;
  }
  options.return_lse = record != nullptr;
  options.return_probs = probs != nullptr;
  AttentionResult r = attention(q, k, v, options);  // out (B, H, L, D)
  if (probs) *probs = r.probs;                      // (B, H, L, S)
  const Tensor merged = merge_heads(r.out);         // (B, L, E)
  const Tensor y = out_proj.forward(merged, {LinearActivation::none, residual},
                                    record ? &rec.out_proj : nullptr);  // (B, L, out_dim)
  if (record) {
    options.return_probs = false;
    rec.q = q;
    rec.k = k;
    rec.v = v;
    rec.out = r.out;
    rec.lse = r.lse;
    rec.options = std::move(options);
  }
  return y;
}

MultiheadAttention::Gradients MultiheadAttention::backward(const Tensor& dy, const Record& rec,
                                                           MultiheadAttention& grads) const {
  QKV_CHECK(rec.out.defined(), "MultiheadAttention::backward: the record is empty (run the "
                               "forward with it first)");
  const std::int64_t H = config.num_heads, D = head_dim();
  Gradients d;
  // y = out_proj(merged)
  const Tensor dmerged = out_proj.backward(dy, rec.out_proj, grads.out_proj);  // (B, L, E)
  // merged = merge(o): dO is the (B, H, L, D) view of dmerged
  // o = attention(q, k, v)
  const AttentionGradients g =
      attention_backward(heads(dmerged, 0, H, D), rec.q, rec.k, rec.v, rec.out, rec.lse, rec.options);
  if (rec.kv_rows == 0) {
    // q, k, v = split(x·W_inᵀ + b_in), one product
    d.query = in_proj.backward(concat_heads({&g.dq, &g.dk, &g.dv}), rec.in_q, grads.in_proj);
    return d;
  }
  // q = query·W_qᵀ + b_q
  Linear gq = in_projection(grads, 0, 1);
  d.query = in_projection(*this, 0, 1).backward(concat_heads({&g.dq}), rec.in_q, gq);
  if (rec.kv_rows == 2 * config.embed_dim) {
    // k, v = split(key·W_kvᵀ + b_kv), one product (key is value)
    Linear gkv = in_projection(grads, 1, 2);
    d.key = in_projection(*this, 1, 2).backward(concat_heads({&g.dk, &g.dv}), rec.in_k, gkv);
  } else {
    // k = key·W_kᵀ + b_k;  v = value·W_vᵀ + b_v
    Linear gk = in_projection(grads, 1, 1), gv = in_projection(grads, 2, 1);
    d.key = in_projection(*this, 1, 1).backward(concat_heads({&g.dk}), rec.in_k, gk);
    d.value = in_projection(*this, 2, 1).backward(concat_heads({&g.dv}), rec.in_v, gv);
    // One tensor passed twice or three times gets the sum of its uses.
    if (rec.inputs != Record::Inputs::separate) {
      add_(d.key, d.value);
      d.value = Tensor();
    }
  }
  if (rec.inputs == Record::Inputs::self) {
    add_(d.query, d.key);
    d.key = Tensor();
  }
  return d;
}

KVCache MultiheadAttention::make_cache(std::int64_t batch, std::int64_t capacity,
                                       DType dtype) const {
  return KVCache(batch, config.num_heads, capacity, head_dim(), dtype);
}

ParameterList MultiheadAttention::parameters(const std::string& prefix) {
  ParameterList list;
  if (in_proj.weight.defined()) {
    list.emplace_back(prefix + "in_proj_weight", &in_proj.weight);
  } else {
    list.emplace_back(prefix + "q_proj_weight", &q_proj_weight);
    list.emplace_back(prefix + "k_proj_weight", &k_proj_weight);
    list.emplace_back(prefix + "v_proj_weight", &v_proj_weight);
  }
  if (in_proj.bias.defined()) list.emplace_back(prefix + "in_proj_bias", &in_proj.bias);
  detail::append(list, out_proj.parameters(prefix + "out_proj."));
  return list;
}

Tensor average_heads(const Tensor& probs) {
  QKV_CHECK(probs.defined() && probs.dim() == 4,
            "average_heads: probs must be (B, H, L, S), got "
                << (probs.defined() ? probs.shape_string() : std::string("undefined")));
  const std::int64_t B = probs.size(0), H = probs.size(1), L = probs.size(2), S = probs.size(3);
  const Tensor p = detail::contiguous_f32(probs, "average_heads", "probs");  // (B, H, L, S)
  Tensor avg = Tensor::zeros({B, L, S});                                      // (B, L, S)
  const float* pp = p.data_as<float>();
  float* pa = avg.data_as<float>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < L * S; ++i) pa[b * L * S + i] += pp[(b * H + h) * L * S + i];
  for (std::int64_t i = 0; i < avg.numel(); ++i) pa[i] /= static_cast<float>(H);
  return avg;
}

}  // namespace qkv::nn
