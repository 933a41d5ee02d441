// SASRec: the wiring of embeddings and pre-norm encoder blocks, its backward and the
// paper's sampled binary cross-entropy. See include/qkv/sasrec.h.

#include "qkv/sasrec.h"

#include <algorithm>
#include <cmath>

#include "qkv/error.h"
#include "qkv/rng.h"

namespace qkv::models {

namespace {

// log(1 + e^x) without overflow.
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

void xavier_normal(Tensor& t, Rng& rng) {
  const double stddev = std::sqrt(2.0 / static_cast<double>(t.size(0) + t.size(1)));
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(stddev * rng.normal());
}

void check_config(const SasRecConfig& c) {
  QKV_CHECK(c.num_items >= 1 && c.dim >= 1 && c.layers >= 0 && c.heads >= 1 && c.max_len >= 1,
            "sasrec: num_items, dim, heads and max_len must be >= 1 and layers >= 0, got num_items = "
                << c.num_items << ", dim = " << c.dim << ", layers = " << c.layers
                << ", heads = " << c.heads << ", max_len = " << c.max_len);
  QKV_CHECK(c.dim % c.heads == 0,
            "sasrec: dim (" << c.dim << ") must be a multiple of heads (" << c.heads << ")");
}

}  // namespace

std::vector<LengthGroup> length_groups(std::span<const std::int64_t> lengths, std::int64_t token_budget) {
  std::vector<std::int64_t> order;
  for (std::size_t b = 0; b < lengths.size(); ++b)
    if (lengths[b] > 0) order.push_back(static_cast<std::int64_t>(b));
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) {
    return lengths[static_cast<std::size_t>(x)] > lengths[static_cast<std::size_t>(y)];
  });
  std::vector<LengthGroup> groups;
  for (const std::int64_t b : order) {
    if (groups.empty() ||
        static_cast<std::int64_t>(groups.back().rows.size() + 1) * groups.back().T > token_budget)
      groups.push_back({{}, lengths[static_cast<std::size_t>(b)]});
    groups.back().rows.push_back(b);
  }
  return groups;
}

nn::TransformerLayerConfig SasRecConfig::block_config() const {
  nn::TransformerLayerConfig b;
  b.d_model = dim;
  b.nhead = heads;
  b.dim_feedforward = dim;  // the paper's point-wise feed-forward keeps width d
  b.activation = nn::Activation::relu;
  b.norm_first = true;
  return b;
}

std::int64_t SasRecConfig::num_parameters() const {
  const std::int64_t d = dim;
  const std::int64_t block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * (d * d + d);
  return (num_items + 1) * d + max_len * d + layers * block + 2 * d;
}

SasRecWeights SasRecWeights::zeros_like(const SasRecConfig& c) {
  check_config(c);
  SasRecWeights w;
  w.item_emb.weight = Tensor::zeros({c.num_items + 1, c.dim});
  w.pos_emb.weight = Tensor::zeros({c.max_len, c.dim});
  for (std::int64_t i = 0; i < c.layers; ++i) {
    nn::TransformerEncoderLayer b(c.block_config());
    for (auto& [name, t] : b.parameters()) *t = Tensor::zeros(t->shape());
    w.blocks.push_back(std::move(b));
  }
  w.last_norm = nn::LayerNorm({c.dim});
  for (auto& [name, t] : w.last_norm.parameters()) *t = Tensor::zeros(t->shape());
  return w;
}

SasRecWeights SasRecWeights::initialized(const SasRecConfig& c, std::uint64_t seed) {
  check_config(c);
  SasRecWeights w;
  Rng rng(mix64(seed + 0x5a5265630000ull));  // "SRec": apart from other models' seeds
  w.item_emb.weight = Tensor::zeros({c.num_items + 1, c.dim});
  xavier_normal(w.item_emb.weight, rng);
  float* pad = w.item_emb.weight.data_as<float>();
  for (std::int64_t j = 0; j < c.dim; ++j) pad[j] = 0.0f;  // row 0: padding
  w.pos_emb.weight = Tensor::zeros({c.max_len, c.dim});
  xavier_normal(w.pos_emb.weight, rng);
  for (std::int64_t i = 0; i < c.layers; ++i)
    w.blocks.emplace_back(c.block_config(), mix64(seed * 131 + static_cast<std::uint64_t>(i) + 1));
  w.last_norm = nn::LayerNorm({c.dim});
  return w;
}

nn::ParameterList SasRecWeights::parameters() {
  nn::ParameterList p = item_emb.parameters("item_emb.");
  for (auto& e : pos_emb.parameters("pos_emb.")) p.push_back(e);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    for (auto& e : blocks[i].parameters("blocks." + std::to_string(i) + ".")) p.push_back(e);
  for (auto& e : last_norm.parameters("last_norm.")) p.push_back(e);
  return p;
}

Tensor SasRecWeights::forward(std::span<const std::int64_t> ids, std::int64_t B, std::int64_t T,
                              std::vector<Tensor>* probs, Record* record,
                              const nn::DropoutDraw& dropout) const {
  const std::int64_t d = item_emb.weight.size(1);
  QKV_CHECK(B >= 1 && T >= 1 && T <= pos_emb.weight.size(0),
            "sasrec: need B >= 1 sequences of T in [1, max_len = " << pos_emb.weight.size(0)
                                                                  << "], got B = " << B << ", T = " << T);
  QKV_CHECK(static_cast<std::int64_t>(ids.size()) == B * T,
            "sasrec: ids holds " << ids.size() << " entries, B·T = " << B * T);
  std::vector<std::int64_t> positions(static_cast<std::size_t>(B * T));
  for (std::int64_t i = 0; i < B * T; ++i) positions[static_cast<std::size_t>(i)] = i % T;
  // x = item_emb[ids]·√d + pos_emb[positions]   (B, T, d); the embedding checks the ids.
  Tensor x = item_emb.forward(ids, {B, T}, record ? &record->item : nullptr);
  nn::scale_(x, static_cast<float>(std::sqrt(static_cast<double>(d))));
  nn::add_(x, pos_emb.forward(positions, {B, T}, record ? &record->pos : nullptr));
  if (record) record->embedding_dropout = {};
  if (dropout.active())  // x = drop(x), the paper's emb_dropout
    x = nn::Dropout(dropout.p).forward(x, dropout.site(0).seed, 0, record ? &record->embedding_dropout : nullptr);
  nn::AttentionMasks causal;
  causal.is_causal = true;
  if (probs) probs->assign(blocks.size(), Tensor());
  if (record) record->blocks.assign(blocks.size(), {});
  for (std::size_t i = 0; i < blocks.size(); ++i)
    x = blocks[i].forward(x, causal, nullptr, probs ? &(*probs)[i] : nullptr,
                          record ? &record->blocks[i] : nullptr, dropout.site(1 + i));
  return last_norm.forward(x, record ? &record->last_norm : nullptr);  // (B, T, d)
}

void SasRecWeights::backward(const Tensor& dh, const Record& record, SasRecWeights& grads) const {
  QKV_CHECK(record.blocks.size() == blocks.size() && grads.blocks.size() == blocks.size(),
            "SasRecWeights::backward: the record and grads must come from a model with "
                << blocks.size() << " blocks");
  const std::int64_t d = item_emb.weight.size(1);
  Tensor dx = last_norm.backward(dh, record.last_norm, grads.last_norm);  // h = last_norm(x)
  for (std::size_t i = blocks.size(); i-- > 0;) dx = blocks[i].backward(dx, record.blocks[i], grads.blocks[i]);
  // x = drop(x): the same mask
  if (record.embedding_dropout.dropped) dx = nn::Dropout().backward(dx, record.embedding_dropout);
  // x = item_emb[ids]·√d + pos_emb[positions]
  pos_emb.backward(dx, record.pos, grads.pos_emb);
  nn::scale_(dx, static_cast<float>(std::sqrt(static_cast<double>(d))));
  item_emb.backward(dx, record.item, grads.item_emb);
}

double sasrec_loss(const SasRecConfig& c, const SasRecWeights& w, const SasRecBatch& batch,
                   SasRecWeights* grads, const nn::DropoutDraw& dropout) {
  const std::int64_t B = batch.B, T = batch.T, d = c.dim, N = B * T;
  QKV_CHECK(static_cast<std::int64_t>(batch.inputs.size()) == N &&
                static_cast<std::int64_t>(batch.positives.size()) == N &&
                static_cast<std::int64_t>(batch.negatives.size()) == N,
            "sasrec_loss: inputs, positives and negatives must hold B·T = " << N << " ids each");
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(B), 0);  // through the last id or target
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    const std::int64_t p = batch.positives[static_cast<std::size_t>(i)],
                       n = batch.negatives[static_cast<std::size_t>(i)];
    QKV_CHECK(p >= 0 && p <= c.num_items && n >= 0 && n <= c.num_items && (p == 0 || n != 0),
              "sasrec_loss: position " << i << ": positive " << p << " and negative " << n
                                       << " must be in [0, " << c.num_items
                                       << "], with a negative wherever there is a positive");
    counted += p != 0;
    if (p != 0 || batch.inputs[static_cast<std::size_t>(i)] != 0)
      lengths[static_cast<std::size_t>(i / T)] = i % T + 1;
  }
  QKV_CHECK(counted > 0, "sasrec_loss: the batch has no position with a target");
  const float* emb = w.item_emb.weight.data_as<float>();  // (I + 1, d)
  float* demb = grads ? grads->item_emb.weight.data_as<float>() : nullptr;
  const double inv = 1.0 / static_cast<double>(counted);
  double loss = 0.0;
  // Each group of rows of similar length is a batch of its own, padded to its longest row:
  // with right padding and a causal mask, positions past a row's length change nothing
  // before it, so the result is the whole batch's, without the layers' work on padding.
  const std::vector<LengthGroup> groups = length_groups(lengths, kSasRecGroupTokens);
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    const LengthGroup& g = groups[gi];
    const auto Bg = static_cast<std::int64_t>(g.rows.size()), Tg = g.T;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(Bg * Tg), 0), at(static_cast<std::size_t>(Bg * Tg), -1);
    for (std::int64_t r = 0; r < Bg; ++r)
      for (std::int64_t t = 0; t < Tg; ++t) {
        const std::int64_t i = g.rows[static_cast<std::size_t>(r)] * T + t;  // in the whole batch
        ids[static_cast<std::size_t>(r * Tg + t)] = batch.inputs[static_cast<std::size_t>(i)];
        at[static_cast<std::size_t>(r * Tg + t)] = i;
      }
    SasRecWeights::Record record;
    const Tensor h = w.forward(ids, Bg, Tg, nullptr, grads ? &record : nullptr, dropout.site(gi));  // (Bg, Tg, d)
    const float* hp = h.data_as<float>();
    Tensor dh = grads ? Tensor::zeros({Bg, Tg, d}) : Tensor();
    float* dhp = grads ? dh.data_as<float>() : nullptr;
    // Σ over positions with a target: softplus(−s_pos) + softplus(s_neg), s = h·e.
    // ∂/∂s_pos = σ(s_pos) − 1, ∂/∂s_neg = σ(s_neg); each / counted (the mean).
    for (std::int64_t k = 0; k < Bg * Tg; ++k) {
      const std::int64_t i = at[static_cast<std::size_t>(k)];
      const std::int64_t p = batch.positives[static_cast<std::size_t>(i)];
      if (p == 0) continue;
      const std::int64_t n = batch.negatives[static_cast<std::size_t>(i)];
      const float* hi = hp + k * d;
      const float* ep = emb + p * d;
      const float* en = emb + n * d;
      double sp = 0, sn = 0;
      for (std::int64_t j = 0; j < d; ++j) {
        sp += static_cast<double>(hi[j]) * ep[j];
        sn += static_cast<double>(hi[j]) * en[j];
      }
      loss += softplus(-sp) + softplus(sn);
      if (!grads) continue;
      const auto gp = static_cast<float>((sigmoid(sp) - 1.0) * inv);
      const auto gn = static_cast<float>(sigmoid(sn) * inv);
      float* dhi = dhp + k * d;
      float* dep = demb + p * d;
      float* den = demb + n * d;
      for (std::int64_t j = 0; j < d; ++j) {
        dhi[j] += gp * ep[j] + gn * en[j];
        dep[j] += gp * hi[j];
        den[j] += gn * hi[j];
      }
    }
    if (grads) w.backward(dh, record, *grads);
  }
  return loss * inv;
}

}  // namespace qkv::models
