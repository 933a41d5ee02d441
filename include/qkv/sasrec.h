// SASRec (Kang & McAuley 2018, "Self-Attentive Sequential Recommendation"): a user's
// history of items as a sequence, causal self-attention over it, and the next item scored
// by the dot product of the last hidden state with the item's embedding (shared with the
// input embedding).
//
//   x = item_emb[ids]·√d + pos_emb[0, T)          ids (B, T): item index + 1, 0 = padding
//   x = drop(x)                                   the embedding dropout (training only)
//   x = block_n(x), n < layers                    pre-norm TransformerEncoderLayer, causal,
//                                                 ReLU feed-forward of width d
//   h = last_norm(x)                              (B, T, d)
//   score(b, t, item) = h[b, t] · item_emb[item + 1]
//
// Sequences are padded on the right: with a causal mask no real position ever sees a
// padding one, so padding changes no score of a real position and needs no key mask.
// Unlike the paper's code (its queries alone are layer-normalised before attention), the
// blocks are torch.nn.TransformerEncoderLayer(norm_first=True) exactly, under torch's
// parameter names, so a torch model of the same class loads these weights one to one.
//
// Dropout (the paper's, rate 0.2 in its MovieLens runs) applies in training only, when the
// forward or the loss is given an active nn::DropoutDraw: the same p after the embedding
// (the paper's emb_dropout) and at the four sites of each block that torch's
// TransformerEncoderLayer(dropout = p) has in train mode (the attention probabilities, the
// feed-forward's activation, each branch before its residual add). The sites' masks come
// from one seed per step: the embedding draws from draw.site(0), block n from
// draw.site(1 + n) (TransformerEncoderLayer::DropoutSite within it); sasrec_loss gives the
// length group g the draw dropout.site(g). Evaluation and recommendation never drop.
// `qkv train sasrec --dropout` defaults to 0: on MovieLens the paper's 0.2 lowered HR@10 in
// the mean of three seeds after 20 epochs, in qkv and in its torch twin (docs/recommender.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qkv/nn.h"
#include "qkv/train.h"

namespace qkv::models {

struct SasRecConfig {
  std::int64_t num_items = 0;   // catalogue size; the embedding has num_items + 1 rows
  std::int64_t dim = 50;        // d
  std::int64_t layers = 2;
  std::int64_t heads = 1;
  std::int64_t max_len = 200;   // positions; longer histories keep their last max_len items
  nn::TransformerLayerConfig block_config() const;
  std::int64_t num_parameters() const;
};

struct SasRecWeights {
  nn::Embedding item_emb;                       // (num_items + 1, d), row 0 = padding
  nn::Embedding pos_emb;                        // (max_len, d)
  std::vector<nn::TransformerEncoderLayer> blocks;  // blocks.N.*
  nn::LayerNorm last_norm;                      // (d)

  struct Record {
    nn::Embedding::Record item, pos;
    nn::Dropout::Record embedding_dropout;
    std::vector<nn::TransformerEncoderLayer::Record> blocks;
    nn::LayerNorm::Record last_norm;
  };

  // Item and position tables ~ N(0, 2 / (rows + d)) (Xavier normal, as the paper's PyTorch
  // port initialises them), row 0 of item_emb zero; the blocks as torch initialises them.
  static SasRecWeights initialized(const SasRecConfig& config, std::uint64_t seed);
  static SasRecWeights zeros_like(const SasRecConfig& config);

  // ids (B·T, row-major), each in [0, num_items] -> h (B, T, d). probs, when given,
  // receives each block's attention probabilities (B, heads, T, T). dropout: training's
  // (see above); the default is none.
  Tensor forward(std::span<const std::int64_t> ids, std::int64_t B, std::int64_t T,
                 std::vector<Tensor>* probs = nullptr, Record* record = nullptr,
                 const nn::DropoutDraw& dropout = {}) const;
  // dh (B, T, d) -> adds ∂/∂θ into `grads`.
  void backward(const Tensor& dh, const Record& record, SasRecWeights& grads) const;
  nn::ParameterList parameters();
};

// One training batch: B users' sequences, right-padded to T.
struct SasRecBatch {
  std::int64_t B = 0, T = 0;
  std::vector<std::int64_t> users;      // B user indices
  std::vector<std::int64_t> inputs;     // (B, T) item index + 1, 0 = padding
  std::vector<std::int64_t> positives;  // (B, T) the next item + 1, 0 = no target
  std::vector<std::int64_t> negatives;  // (B, T) an item the user never rated + 1, or 0
};

// Rows of a right-padded batch grouped by length, for running each group as a batch of
// its own padded only to its longest row (padding costs the layers as much as an item, and
// MovieLens histories run from 2 to 200 items). lengths: per row, 0 = skip the row. Rows
// are taken longest first; a group holds rows while rows · T <= token_budget (at least
// one). -> groups with the row indices and their T (the first row's length).
struct LengthGroup {
  std::vector<std::int64_t> rows;
  std::int64_t T = 0;
};
std::vector<LengthGroup> length_groups(std::span<const std::int64_t> lengths, std::int64_t token_budget);
// The budget sasrec_loss and evaluation use: products of 8192 rows keep oneDNN efficient,
// and a group of 200-item histories is 40 users.
inline constexpr std::int64_t kSasRecGroupTokens = 8192;

// The paper's loss: binary cross-entropy of the positive's and one sampled negative's
// scores at every position with a target,
//   loss = mean over (b, t) with a target of  softplus(−h·e_pos) + softplus(h·e_neg),
// and its gradient added into `grads` (zeroed by the caller). Returns the loss. Rows run in
// length groups (length_groups): without dropout, the same loss and gradients as one
// padded batch; with it, each group draws its own masks (dropout.site(group)), so the
// masks depend on the grouping, and the result is the padded batch's in distribution.
double sasrec_loss(const SasRecConfig& config, const SasRecWeights& weights,
                   const SasRecBatch& batch, SasRecWeights* grads,
                   const nn::DropoutDraw& dropout = {});

}  // namespace qkv::models
