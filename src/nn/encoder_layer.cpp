// TransformerEncoderLayer (torch.nn's, batch-first; its dropouts in training when given a
// DropoutDraw): one forward for inference, KV-cache decoding and training, and its backward.

#include "nn/common.h"

namespace qkv::nn {

namespace detail {

MultiheadAttentionConfig attention_config(const TransformerLayerConfig& c) {
  MultiheadAttentionConfig m;
  m.embed_dim = c.d_model;
  m.num_heads = c.nhead;
  m.bias = c.bias;
  m.out_dim = c.d_out;
  return m;
}

}  // namespace detail

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerConfig& c,
                                                 std::uint64_t seed)
    : config(c),
      self_attn(detail::attention_config(c), seed),
      ff(out_features(), c.dim_feedforward, c.activation, c.bias, seed + 10),
      norm1({c.norm_first ? c.d_model : out_features()}, c.layer_norm_eps),
      norm2({out_features()}, c.layer_norm_eps) {
  QKV_CHECK(c.dim_feedforward >= 1, "TransformerEncoderLayer: dim_feedforward must be >= 1, got "
                                        << c.dim_feedforward);
  QKV_CHECK(c.d_out >= 0, "TransformerEncoderLayer: d_out must be >= 0 (0 = d_model), got "
                              << c.d_out);
  if (out_features() != c.d_model) residual_proj = Linear(c.d_model, out_features(), c.bias, seed + 20);
}

void TransformerEncoderLayer::pack(DType dtype) {
  self_attn.pack(dtype);
  ff.pack(dtype);
  if (residual_proj.weight.defined()) residual_proj.pack(dtype);
}

namespace {

// x[:, :rows] as a contiguous (B, rows, E) tensor
Tensor first_rows(const Tensor& x, std::int64_t rows) { return x.slice(1, 0, rows).contiguous(); }

// whole[:, :rows] += part: whole (B, L, E) contiguous f32, part (B, rows, E)
void add_first_rows(Tensor& whole, const Tensor& part) {
  const std::int64_t B = whole.size(0), L = whole.size(1), E = whole.size(2), rows = part.size(1);
  const Tensor p = part.contiguous();
  float* w = whole.data_as<float>();
  const float* q = p.data_as<float>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < rows * E; ++i) w[b * L * E + i] += q[b * rows * E + i];
}

}  // namespace

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttentionMasks& masks,
                                        KVCache* cache, Tensor* probs, Record* record,
                                        const DropoutDraw& dropout) const {
  detail::check_batch_first(src, config.d_model, "TransformerEncoderLayer", "src");
  return forward_rows(src, src.size(1), masks, cache, probs, record, dropout);
}

Tensor TransformerEncoderLayer::forward_first(const Tensor& src, std::int64_t rows,
                                              const AttentionMasks& masks, Tensor* probs,
                                              Record* record) const {
  detail::check_batch_first(src, config.d_model, "TransformerEncoderLayer::forward_first", "src");
  const std::int64_t L = src.size(1);
  QKV_CHECK(rows >= 1 && rows <= L, "TransformerEncoderLayer::forward_first: rows must be in [1, L = "
                                        << L << "], got " << rows);
  return forward_rows(src, rows, masks, nullptr, probs, record, {});
}

// The one forward: the first `rows` positions are the queries (rows = L: all of them, and
// the attention is self-attention on one tensor, projected in one product); every position
// is a key and value.
Tensor TransformerEncoderLayer::forward_rows(const Tensor& src, std::int64_t rows,
                                             const AttentionMasks& masks, KVCache* cache,
                                             Tensor* probs, Record* record,
                                             const DropoutDraw& dropout) const {
  const bool all = rows == src.size(1);
  Record* r = record;
  if (r) {
    r->rows = all ? 0 : rows;
    r->dropout1 = r->dropout2 = {};
  }
  const Tensor head = all ? src : first_rows(src, rows);  // the queries' rows (B, rows, d_model)
  // The residual adds run inside the output products (out_proj, linear2), except under
  // dropout: a branch is dropped before its residual is added. A width change projects the
  // residual first: r(x) (B, rows, d_out).
  const bool project = residual_proj.weight.defined() || residual_proj.packed.defined();
  const Tensor res = project ? residual_proj.forward(head, {}, r ? &r->residual_proj : nullptr)
                             : head;
  const bool drop = dropout.active();
  // With dropout: base + drop_site(branch), a fresh (B, rows, d_out) tensor; without: the
  // branch, whose product already added base.
  const auto join = [&](const Tensor& branch, const Tensor& base, DropoutSite site,
                        Dropout::Record* kept) {
    if (!drop) return branch;
    Tensor y = Dropout(dropout.p).forward(branch, dropout.site(site).seed, 0, kept);
    add_(y, base);
    return y;
  };
  const DropoutDraw attention_dropout = dropout.site(kAttentionDropout);  // p = 0 without
  const DropoutDraw activation_dropout = dropout.site(kActivationDropout);
  if (config.norm_first) {
    // x1 = r(x) + drop1(sa(norm1(x)[:rows], norm1(x))); y = x1 + drop2(ff(norm2(x1)))
    const Tensor n1 = norm1.forward(src, r ? &r->norm1 : nullptr);  // (B, L, d_model)
    const Tensor a = self_attn.forward(all ? n1 : first_rows(n1, rows), n1, n1, masks,
                                       drop ? Tensor() : res, cache, probs,
                                       r ? &r->self_attn : nullptr, attention_dropout);  // (B, rows, d_out)
    const Tensor x1 = join(a, res, kAttentionBranchDropout, r ? &r->dropout1 : nullptr);
    const Tensor n2 = norm2.forward(x1, r ? &r->norm2 : nullptr);
    const Tensor f = ff.forward(n2, drop ? Tensor() : x1, r ? &r->ff : nullptr, activation_dropout);
    return join(f, x1, kFeedForwardBranchDropout, r ? &r->dropout2 : nullptr);
  }
  // x1 = norm1(r(x) + drop1(sa(x[:rows], x))); y = norm2(x1 + drop2(ff(x1)))
  const Tensor a = self_attn.forward(head, src, src, masks, drop ? Tensor() : res, cache, probs,
                                     r ? &r->self_attn : nullptr, attention_dropout);
  const Tensor x1 = norm1.forward(join(a, res, kAttentionBranchDropout, r ? &r->dropout1 : nullptr),
                                  r ? &r->norm1 : nullptr);
  const Tensor f = ff.forward(x1, drop ? Tensor() : x1, r ? &r->ff : nullptr, activation_dropout);
  return norm2.forward(join(f, x1, kFeedForwardBranchDropout, r ? &r->dropout2 : nullptr),
                       r ? &r->norm2 : nullptr);
}

Tensor TransformerEncoderLayer::backward(const Tensor& dy, const Record& r,
                                         TransformerEncoderLayer& g) const {
  // The attention's input gradient as one (B, L, ·) tensor: self-attention returns it whole
  // in .query; after forward_first the queries' (the first rows) join the keys' and values'.
  const auto attention_backward = [&](const Tensor& d) {
    MultiheadAttention::Gradients a = self_attn.backward(d, r.self_attn, g.self_attn);
    if (r.rows == 0) return a.query;
    add_first_rows(a.key, a.query);
    return a.key;
  };
  // dx += the residual's share (d: the gradient of r(x), of every row or the first ones)
  const auto add_residual = [&](Tensor& dx, const Tensor& d) {
    const Tensor dr = residual_backward(d, r, g);
    if (r.rows == 0)
      add_(dx, dr);
    else
      add_first_rows(dx, dr);
  };
  // d through a branch's dropout: the forward's mask, regenerated (d itself without one)
  const auto undrop = [](const Tensor& d, const Dropout::Record& kept) {
    return kept.dropped ? Dropout().backward(d, kept) : d;
  };
  if (config.norm_first) {
    // y = x1 + drop2(ff(norm2(x1)))
    Tensor dx1 = norm2.backward(ff.backward(undrop(dy, r.dropout2), r.ff, g.ff), r.norm2, g.norm2);
    add_(dx1, dy);
    // x1 = r(x) + drop1(sa(norm1(x)[:rows], norm1(x)))
    Tensor dx = norm1.backward(attention_backward(undrop(dx1, r.dropout1)), r.norm1, g.norm1);
    add_residual(dx, dx1);
    return dx;
  }
  // y = norm2(x1 + drop2(ff(x1)))
  const Tensor ds2 = norm2.backward(dy, r.norm2, g.norm2);
  Tensor dx1 = ff.backward(undrop(ds2, r.dropout2), r.ff, g.ff);
  add_(dx1, ds2);
  // x1 = norm1(r(x) + drop1(sa(x[:rows], x)))
  const Tensor ds1 = norm1.backward(dx1, r.norm1, g.norm1);
  Tensor dx = attention_backward(undrop(ds1, r.dropout1));
  add_residual(dx, ds1);
  return dx;
}

Tensor TransformerEncoderLayer::residual_backward(const Tensor& d, const Record& r,
                                                  TransformerEncoderLayer& g) const {
  if (!residual_proj.weight.defined()) return d;  // the identity
  return residual_proj.backward(d, r.residual_proj, g.residual_proj);
}

ParameterList TransformerEncoderLayer::parameters(const std::string& prefix) {
  ParameterList list = self_attn.parameters(prefix + "self_attn.");
  detail::append(list, ff.parameters(prefix));
  detail::append(list, norm1.parameters(prefix + "norm1."));
  detail::append(list, norm2.parameters(prefix + "norm2."));
  if (residual_proj.weight.defined())
    detail::append(list, residual_proj.parameters(prefix + "residual_proj."));
  return list;
}

}  // namespace qkv::nn
