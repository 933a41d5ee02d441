// MultiheadAttention with torch.nn.MultiheadAttention's semantics and weight layout, and
// the KV cache for incremental decoding.

#include <cmath>
#include <limits>

#include "nn/common.h"
#include "qkv/attention.h"

namespace qkv::nn {

namespace {

bool is_float_mask(DType d) { return d != DType::boolean; }

// The masks of one call as qkv::AttentionOptions wants them (true = attend, or float
// added; broadcast to (B, H, L, S)), from torch's polarity (true = NOT allowed / IGNORE).
//   attn_mask (L, S) or (B·H, L, S); key_padding_mask (B, S).
// A bool key_padding_mask that only pads a suffix of every row, with no attn_mask,
// becomes key_lengths instead (the kernel then skips whole tiles of padding).
void resolve_masks(const AttentionMasks& masks, std::int64_t B, std::int64_t H, std::int64_t L,
                   std::int64_t S, AttentionOptions& options) {
  options.causal = masks.is_causal;
  options.alignment = Alignment::top_left;
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

  const bool any_float = (am.defined() && is_float_mask(am.dtype())) ||
                         (kpm.defined() && is_float_mask(kpm.dtype()));
  const std::vector<float> am_v = am.defined() ? am.to_vector() : std::vector<float>();
  const bool per_head = am.defined() && am.dim() == 3;
  const std::int64_t Bm = (per_head || kpm.defined()) ? B : 1;
  const std::int64_t Hm = per_head ? H : 1;
  Tensor mask = Tensor::empty({Bm, Hm, L, S}, any_float ? DType::f32 : DType::boolean);  // (B|1, H|1, L, S)
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const bool am_bool = am.defined() && am.dtype() == DType::boolean;
  const bool kpm_bool = kpm.defined() && kpm.dtype() == DType::boolean;
  for (std::int64_t b = 0; b < Bm; ++b)
    for (std::int64_t h = 0; h < Hm; ++h)
      for (std::int64_t i = 0; i < L; ++i)
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
          const std::int64_t at = ((b * Hm + h) * L + i) * S + j;
          if (any_float)
            mask.data_as<float>()[at] = blocked ? neg_inf : value;
          else
            mask.data_as<bool>()[at] = !blocked;  // qkv polarity: true = attend
        }
  options.mask = mask;
}

}  // namespace

namespace detail {
void resolve_attention_masks(const AttentionMasks& masks, std::int64_t B, std::int64_t H,
                             std::int64_t L, std::int64_t S, AttentionOptions& options) {
  resolve_masks(masks, B, H, L, S, options);
}
}  // namespace detail

KVCache::KVCache(std::int64_t batch, std::int64_t heads, std::int64_t capacity,
                 std::int64_t head_dim, DType dtype) {
  QKV_CHECK(batch >= 0 && heads >= 0 && capacity >= 0 && head_dim >= 0,
            "KVCache: sizes must be >= 0");
  QKV_CHECK_TYPE(is_floating(dtype), "KVCache: dtype must be f32, bf16 or f16, got "
                                         << dtype_name(dtype));
  k = Tensor::zeros({batch, heads, capacity, head_dim}, dtype);
  v = Tensor::zeros({batch, heads, capacity, head_dim}, dtype);
}

void KVCache::append(const Tensor& k_new, const Tensor& v_new) {
  QKV_CHECK(k.defined(), "KVCache::append: the cache is not allocated");
  QKV_CHECK(k_new.dim() == 4 && k_new.size(0) == k.size(0) && k_new.size(1) == k.size(1) &&
                k_new.size(3) == k.size(3),
            "KVCache::append: k_new must be (B, H, T, D) = (" << k.size(0) << ", " << k.size(1)
                << ", T, " << k.size(3) << "), got " << k_new.shape_string());
  QKV_CHECK(v_new.shape() == k_new.shape(), "KVCache::append: v_new must be "
                                                << k_new.shape_string() << ", got "
                                                << v_new.shape_string());
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
  QKV_CHECK(config.kdim >= 1 && config.vdim >= 1,
            "MultiheadAttention: kdim and vdim must be >= 1, got " << config.kdim << ", "
                                                                   << config.vdim);
  const std::int64_t E = config.embed_dim;
  // torch: xavier_uniform_ on the projections (bound √(6/(fan_in + fan_out))), zero biases.
  auto xavier = [](Tensor& w, std::uint64_t s) {
    const double bound = std::sqrt(6.0 / static_cast<double>(w.size(0) + w.size(1)));
    detail::fill_uniform(w, bound, s);
  };
  if (config.kdim == E && config.vdim == E) {
    in_proj_weight = Tensor::empty({3 * E, E});
    xavier(in_proj_weight, seed);
  } else {
    q_proj_weight = Tensor::empty({E, E});
    k_proj_weight = Tensor::empty({E, config.kdim});
    v_proj_weight = Tensor::empty({E, config.vdim});
    xavier(q_proj_weight, seed);
    xavier(k_proj_weight, seed + 1);
    xavier(v_proj_weight, seed + 2);
  }
  if (config.bias) in_proj_bias = Tensor::zeros({3 * E});
  out_proj = Linear(E, E, config.bias, seed + 3);
  if (config.bias) out_proj.bias = Tensor::zeros({E});
}

Tensor MultiheadAttention::project(const Tensor& x, std::int64_t which) const {
  const std::int64_t E = config.embed_dim, H = config.num_heads, D = head_dim();
  const Tensor w = packed() ? in_proj_weight.slice(0, which * E, (which + 1) * E)  // (E, in)
                            : (which == 0 ? q_proj_weight : which == 1 ? k_proj_weight
                                                                       : v_proj_weight);
  const Tensor b = in_proj_bias.defined() ? in_proj_bias.slice(0, which * E, (which + 1) * E)
                                          : Tensor();  // (E)
  Tensor y = linear(x, w, b);  // (B, L, E)
  return y.view({x.size(0), x.size(1), H, D}).permute({0, 2, 1, 3});  // (B, H, L, D) view
}

MultiheadAttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                     const Tensor& value,
                                                     const AttentionMasks& masks,
                                                     bool need_weights,
                                                     bool average_attn_weights) const {
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

  Tensor q, k, v;  // (B, H, L|S, D) views of the projections
  const bool self = packed() && query.data() == key.data() && key.data() == value.data() &&
                    query.shape() == key.shape() && key.shape() == value.shape() &&
                    query.strides() == key.strides() && key.strides() == value.strides() &&
                    query.dtype() == key.dtype() && key.dtype() == value.dtype();
  if (self) {
    // One product for all three: (B, L, 3E) -> three (B, H, L, D) views, no copy.
    Tensor qkv = linear(query, in_proj_weight, in_proj_bias);  // (B, L, 3E)
    Tensor split = qkv.view({B, L, 3, H, D});                    // (B, L, 3, H, D)
    q = split.select(2, 0).permute({0, 2, 1, 3});
    k = split.select(2, 1).permute({0, 2, 1, 3});
    v = split.select(2, 2).permute({0, 2, 1, 3});
  } else {
    q = project(query, 0);
    k = project(key, 1);
    v = project(value, 2);
  }

  AttentionOptions options;
  resolve_masks(masks, B, H, L, S, options);
  options.return_probs = need_weights;
  AttentionResult r = attention(q, k, v, options);  // out (B, H, L, D), probs (B, H, L, S)

  Tensor merged = r.out.permute({0, 2, 1, 3}).contiguous().view({B, L, E});  // (B, L, E)
  MultiheadAttentionOutput result;
  result.out = out_proj.forward(merged);  // (B, L, E)
  if (need_weights) {
    if (!average_attn_weights) {
      result.weights = r.probs;  // (B, H, L, S)
    } else {
      Tensor probs = r.probs.contiguous();  // (B, H, L, S)
      Tensor avg = Tensor::zeros({B, L, S});  // (B, L, S)
      const float* p = probs.data_as<float>();
      float* a = avg.data_as<float>();
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t i = 0; i < L * S; ++i) a[b * L * S + i] += p[(b * H + h) * L * S + i];
      for (std::int64_t i = 0; i < avg.numel(); ++i) a[i] /= static_cast<float>(H);
      result.weights = avg;
    }
  }
  return result;
}

KVCache MultiheadAttention::make_cache(std::int64_t batch, std::int64_t capacity,
                                       DType dtype) const {
  QKV_CHECK(config.kdim == config.embed_dim && config.vdim == config.embed_dim,
            "MultiheadAttention::make_cache: incremental decoding is self-attention; kdim and "
            "vdim must equal embed_dim");
  return KVCache(batch, config.num_heads, capacity, head_dim(), dtype);
}

Tensor MultiheadAttention::forward_incremental(const Tensor& x, KVCache& cache) const {
  const std::int64_t E = config.embed_dim;
  QKV_CHECK(x.defined() && x.dim() == 3 && x.size(2) == E,
            "MultiheadAttention::forward_incremental: x must be (B, T, embed_dim = " << E
                << "), got " << (x.defined() ? x.shape_string() : std::string("undefined")));
  QKV_CHECK(config.kdim == E && config.vdim == E,
            "MultiheadAttention::forward_incremental: kdim and vdim must equal embed_dim");
  const std::int64_t B = x.size(0), T = x.size(1);
  Tensor q = project(x, 0);  // (B, H, T, D)
  Tensor k = project(x, 1);  // (B, H, T, D)
  Tensor v = project(x, 2);  // (B, H, T, D)
  cache.append(k, v);
  // The kernel takes one dtype for q, k and v: q follows a bf16/f16 cache.
  if (cache.k.dtype() != q.dtype()) q = q.to(cache.k.dtype());
  AttentionOptions options;
  options.causal = true;
  options.alignment = Alignment::bottom_right;  // the T new queries are the last positions
  Tensor out = scaled_dot_product_attention(q, cache.keys(), cache.values(), options);  // (B, H, T, D)
  Tensor merged = out.permute({0, 2, 1, 3}).contiguous().view({B, T, E});  // (B, T, E)
  return out_proj.forward(merged);
}

ParameterList MultiheadAttention::parameters(const std::string& prefix) {
  ParameterList list;
  if (packed()) {
    list.emplace_back(prefix + "in_proj_weight", &in_proj_weight);
  } else {
    list.emplace_back(prefix + "q_proj_weight", &q_proj_weight);
    list.emplace_back(prefix + "k_proj_weight", &k_proj_weight);
    list.emplace_back(prefix + "v_proj_weight", &v_proj_weight);
  }
  if (in_proj_bias.defined()) list.emplace_back(prefix + "in_proj_bias", &in_proj_bias);
  for (auto& p : out_proj.parameters(prefix + "out_proj.")) list.push_back(p);
  return list;
}

}  // namespace qkv::nn
