// The Vision Transformer: patches, the class token, positions, pre-norm encoder blocks and
// the head, with its backward, and attention rollout. See include/qkv/vit.h.

#include "qkv/vit.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "qkv/error.h"
#include "qkv/rng.h"

namespace qkv::models {

namespace {

void fill_normal(Tensor& t, double stddev, Rng& rng) {
  float* p = t.data_as<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(stddev * rng.normal());
}

// The row of pos_embed that token t of image b adds: the class token (t = 0) its own, patch
// token t = 1 + k its patch's, 1 + kept[b, k] under patch dropout (kept (B, K)), else 1 + k.
std::int64_t position_of(std::span<const std::int64_t> kept, std::int64_t b, std::int64_t K, std::int64_t t) {
  return t == 0 || kept.empty() ? t : 1 + kept[static_cast<std::size_t>(b * K + t - 1)];
}

}  // namespace

void VitConfig::check() const {
  QKV_CHECK(image_size >= 1 && channels >= 1 && patch_size >= 1 && dim >= 1 && layers >= 0 &&
                heads >= 1 && mlp_dim >= 1 && classes >= 1,
            "vit: image_size, channels, patch_size, dim, heads, mlp_dim and classes must be >= 1 "
            "and layers >= 0, got image_size = "
                << image_size << ", channels = " << channels << ", patch_size = " << patch_size
                << ", dim = " << dim << ", layers = " << layers << ", heads = " << heads
                << ", mlp_dim = " << mlp_dim << ", classes = " << classes);
  QKV_CHECK(image_size % patch_size == 0,
            "vit: patch_size (" << patch_size << ") must divide image_size (" << image_size << ")");
  QKV_CHECK(dim % heads == 0, "vit: dim (" << dim << ") must be a multiple of heads (" << heads << ")");
  QKV_CHECK(learned_positions || dim % 4 == 0,
            "vit: sine-cosine positions need dim a multiple of 4, got " << dim);
  QKV_CHECK(!shifted_patches || patch_size >= 2,
            "vit: shifted patches need patch_size >= 2 (the shift is patch_size / 2), got " << patch_size);
}

nn::TransformerLayerConfig VitConfig::block_config() const {
  nn::TransformerLayerConfig b;
  b.d_model = dim;
  b.nhead = heads;
  b.dim_feedforward = mlp_dim;
  b.activation = nn::Activation::gelu;
  b.layer_norm_eps = 1e-6;  // ViT's (torchvision, timm)
  b.norm_first = true;
  return b;
}

std::int64_t VitConfig::num_parameters() const {
  const std::int64_t d = dim, f = mlp_dim;
  const std::int64_t block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (f * d + f) + (d * f + d);
  const std::int64_t embedding = (shifted_patches ? 2 * patch_features() : 0) + (d * patch_features() + d);
  return embedding + d + (learned_positions ? tokens() * d : 0) + layers * block + 2 * d + (classes * d + classes);
}

Tensor patchify(const Tensor& images, std::int64_t P) {
  QKV_CHECK(images.dtype() == DType::f32 && images.dim() == 4,
            "patchify: images must be f32 (B, C, H, W), got " << dtype_name(images.dtype()) << " "
                                                              << shape_to_string(images.shape()));
  const std::int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  QKV_CHECK(P >= 1 && H % P == 0 && W % P == 0,
            "patchify: patch size " << P << " must divide H = " << H << " and W = " << W);
  const Tensor x = images.contiguous();
  const float* src = x.data_as<float>();
  const std::int64_t gh = H / P, gw = W / P, F = C * P * P;
  Tensor out = Tensor::empty({B, gh * gw, F});
  float* dst = out.data_as<float>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t gy = 0; gy < gh; ++gy)
      for (std::int64_t gx = 0; gx < gw; ++gx) {
        float* row = dst + ((b * gh + gy) * gw + gx) * F;
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t ky = 0; ky < P; ++ky) {
            const float* line = src + ((b * C + c) * H + gy * P + ky) * W + gx * P;
            std::copy(line, line + P, row + (c * P + ky) * P);
          }
      }
  return out;
}

Tensor shifted_stack(const Tensor& images, std::int64_t s) {
  QKV_CHECK(images.dtype() == DType::f32 && images.dim() == 4,
            "shifted_stack: images must be f32 (B, C, H, W), got " << dtype_name(images.dtype()) << " "
                                                                   << shape_to_string(images.shape()));
  QKV_CHECK(s >= 0, "shifted_stack: the shift must be >= 0, got " << s);
  const std::int64_t B = images.size(0), C = images.size(1), H = images.size(2), W = images.size(3);
  const Tensor x = images.contiguous();
  const float* src = x.data_as<float>();
  Tensor out = Tensor::zeros({B, 5 * C, H, W});
  float* dst = out.data_as<float>();
  const std::int64_t dys[5] = {0, -s, -s, s, s}, dxs[5] = {0, -s, s, -s, s};
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t k = 0; k < 5; ++k)
      for (std::int64_t c = 0; c < C; ++c) {
        const float* plane = src + (b * C + c) * H * W;
        float* to = dst + ((b * 5 + k) * C + c) * H * W;
        // rows y with 0 <= y + dy < H, columns x with 0 <= x + dx < W; the rest stay 0
        const std::int64_t x0 = std::max<std::int64_t>(0, -dxs[k]), x1 = std::min(W, W - dxs[k]);
        for (std::int64_t y = std::max<std::int64_t>(0, -dys[k]); y < std::min(H, H - dys[k]); ++y)
          if (x1 > x0) std::copy(plane + (y + dys[k]) * W + x0 + dxs[k], plane + (y + dys[k]) * W + x1 + dxs[k],
                                 to + y * W + x0);
      }
  return out;
}

Tensor sincos_positions_2d(std::int64_t grid, std::int64_t dim) {
  QKV_CHECK(grid >= 1 && dim >= 4 && dim % 4 == 0,
            "sincos_positions_2d: need grid >= 1 and dim a positive multiple of 4, got grid = "
                << grid << ", dim = " << dim);
  Tensor table = Tensor::zeros({1 + grid * grid, dim});
  float* t = table.data_as<float>();
  const std::int64_t quarter = dim / 4;
  for (std::int64_t gy = 0; gy < grid; ++gy)
    for (std::int64_t gx = 0; gx < grid; ++gx) {
      float* row = t + (1 + gy * grid + gx) * dim;
      for (std::int64_t k = 0; k < quarter; ++k) {
        const double omega = std::pow(10000.0, -static_cast<double>(k) / static_cast<double>(quarter));
        row[k] = static_cast<float>(std::sin(static_cast<double>(gx) * omega));
        row[quarter + k] = static_cast<float>(std::cos(static_cast<double>(gx) * omega));
        row[2 * quarter + k] = static_cast<float>(std::sin(static_cast<double>(gy) * omega));
        row[3 * quarter + k] = static_cast<float>(std::cos(static_cast<double>(gy) * omega));
      }
    }
  return table;
}

VitWeights VitWeights::zeros_like(const VitConfig& c) {
  c.check();
  VitWeights w;
  w.learned_positions = c.learned_positions;
  w.shifted_patches = c.shifted_patches;
  if (c.shifted_patches) {
    w.patch_norm = nn::LayerNorm({c.patch_features()}, 1e-6);
    for (auto& [name, t] : w.patch_norm.parameters()) *t = Tensor::zeros(t->shape());
  }
  w.patch_embed.weight = Tensor::zeros({c.dim, c.patch_features()});
  w.patch_embed.bias = Tensor::zeros({c.dim});
  w.cls_token = Tensor::zeros({c.dim});
  w.pos_embed = c.learned_positions ? Tensor::zeros({c.tokens(), c.dim}) : sincos_positions_2d(c.grid(), c.dim);
  for (std::int64_t i = 0; i < c.layers; ++i) {
    nn::TransformerEncoderLayer b(c.block_config());
    for (auto& [name, t] : b.parameters()) *t = Tensor::zeros(t->shape());
    w.blocks.push_back(std::move(b));
  }
  w.norm = nn::LayerNorm({c.dim}, 1e-6);
  for (auto& [name, t] : w.norm.parameters()) *t = Tensor::zeros(t->shape());
  w.head.weight = Tensor::zeros({c.classes, c.dim});
  w.head.bias = Tensor::zeros({c.classes});
  return w;
}

VitWeights VitWeights::initialized(const VitConfig& c, std::uint64_t seed) {
  c.check();
  VitWeights w;
  w.learned_positions = c.learned_positions;
  w.shifted_patches = c.shifted_patches;
  Rng rng(mix64(seed + 0x5669540000000000ull));  // "ViT": apart from other models' seeds
  if (c.shifted_patches) w.patch_norm = nn::LayerNorm({c.patch_features()}, 1e-6);  // γ = 1, β = 0
  w.patch_embed = nn::Linear(c.patch_features(), c.dim, true, mix64(seed * 131 + 1));
  w.cls_token = Tensor::zeros({c.dim});
  fill_normal(w.cls_token, 0.02, rng);
  if (c.learned_positions) {
    w.pos_embed = Tensor::zeros({c.tokens(), c.dim});
    fill_normal(w.pos_embed, 0.02, rng);
  } else {
    w.pos_embed = sincos_positions_2d(c.grid(), c.dim);
  }
  for (std::int64_t i = 0; i < c.layers; ++i)
    w.blocks.emplace_back(c.block_config(), mix64(seed * 131 + static_cast<std::uint64_t>(i) + 2));
  w.norm = nn::LayerNorm({c.dim}, 1e-6);
  w.head.weight = Tensor::zeros({c.classes, c.dim});
  w.head.bias = Tensor::zeros({c.classes});
  return w;
}

nn::ParameterList VitWeights::parameters() {
  nn::ParameterList p = shifted_patches ? patch_norm.parameters("patch_norm.") : nn::ParameterList{};
  for (auto& e : patch_embed.parameters("patch_embed.")) p.push_back(e);
  p.emplace_back("cls_token", &cls_token);
  if (learned_positions) p.emplace_back("pos_embed", &pos_embed);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    for (auto& e : blocks[i].parameters("blocks." + std::to_string(i) + ".")) p.push_back(e);
  for (auto& e : norm.parameters("norm.")) p.push_back(e);
  for (auto& e : head.parameters("head.")) p.push_back(e);
  return p;
}

Tensor VitWeights::forward(const Tensor& images, std::vector<Tensor>* probs, Record* record,
                           std::span<const std::int64_t> kept) const {
  const std::int64_t d = cls_token.size(0), T = pos_embed.size(0);
  const std::int64_t P2C = patch_embed.in_features();
  QKV_CHECK(images.dtype() == DType::f32 && images.dim() == 4 && images.size(0) >= 1,
            "vit: images must be f32 (B, C, H, W) with B >= 1, got "
                << dtype_name(images.dtype()) << " " << shape_to_string(images.shape()));
  const std::int64_t B = images.size(0), C = images.size(1), H = images.size(2);
  // P from the weights: C'·P² features per patch (C' = 5C with shifted patches) and (H/P)² + 1 tokens.
  const std::int64_t patch_channels = C * (shifted_patches ? 5 : 1);
  const auto P = static_cast<std::int64_t>(
      std::llround(std::sqrt(static_cast<double>(P2C / std::max<std::int64_t>(patch_channels, 1)))));
  QKV_CHECK(P >= 1 && patch_channels * P * P == P2C && H == images.size(3) && H % P == 0 &&
                (H / P) * (H / P) + 1 == T,
            "vit: the model takes " << P2C << " features per patch and " << T - 1
                                    << " patches; images " << shape_to_string(images.shape())
                                    << " do not fit it");
  const std::int64_t N = T - 1;
  Tensor patches = shifted_patches ? patchify(shifted_stack(images, P / 2), P) : patchify(images, P);  // (B, N, C'·P·P)
  // Patch dropout: only the kept patches are embedded; token 1 + k is patch kept[b, k].
  const std::int64_t K = kept.empty() ? N : static_cast<std::int64_t>(kept.size()) / B;
  if (!kept.empty()) {
    QKV_CHECK(static_cast<std::int64_t>(kept.size()) == B * K && K >= 1 && K <= N,
              "vit: kept patches must be (B, K) with B = " << B << " and 1 <= K <= " << N << ", got "
                                                           << kept.size() << " indices");
    const std::int64_t F = patches.size(2);
    Tensor gathered = Tensor::empty({B, K, F});  // (B, K, C'·P·P)
    std::vector<char> seen(static_cast<std::size_t>(N));
    for (std::int64_t b = 0; b < B; ++b) {
      std::fill(seen.begin(), seen.end(), 0);
      for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t n = kept[static_cast<std::size_t>(b * K + k)];
        QKV_CHECK(n >= 0 && n < N && !seen[static_cast<std::size_t>(n)],
                  "vit: kept patch " << n << " of image " << b << " is outside [0, " << N << ") or kept twice");
        seen[static_cast<std::size_t>(n)] = 1;
        std::copy_n(patches.data_as<float>() + (b * N + n) * F, F, gathered.data_as<float>() + (b * K + k) * F);
      }
    }
    patches = std::move(gathered);
  }
  if (shifted_patches) patches = patch_norm.forward(patches, record ? &record->patch_norm : nullptr);
  const Tensor embedded = patch_embed.forward(patches, {}, record ? &record->patch_embed : nullptr);  // (B, K, d)
  // x = [cls; embedded] + pos   (B, 1 + K, d); token 1 + k takes its patch's position
  const std::int64_t Tx = 1 + K;
  Tensor x = Tensor::empty({B, Tx, d});
  {
    float* xp = x.data_as<float>();
    const float* e = embedded.data_as<float>();
    const float* cls = cls_token.data_as<float>();
    const float* pos = pos_embed.data_as<float>();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < Tx; ++t) {
        const float* from = t == 0 ? cls : e + (b * K + t - 1) * d;
        const std::int64_t at = position_of(kept, b, K, t);
        float* to = xp + (b * Tx + t) * d;
        for (std::int64_t j = 0; j < d; ++j) to[j] = from[j] + pos[at * d + j];
      }
  }
  if (probs) probs->assign(blocks.size(), Tensor());
  if (record) {
    record->blocks.assign(blocks.size(), {});
    record->B = B;
    record->kept.assign(kept.begin(), kept.end());
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    nn::TransformerEncoderLayer::Record* r = record ? &record->blocks[i] : nullptr;
    // The head reads the class token alone, so the last block need compute only its row;
    // the rollout (probs) takes every block's whole map.
    if (i + 1 == blocks.size() && probs == nullptr)
      x = blocks[i].forward_first(x, 1, {}, nullptr, r);  // (B, 1, d)
    else
      x = blocks[i].forward(x, {}, nullptr, probs ? &(*probs)[i] : nullptr, r);  // (B, T, d)
  }
  const Tensor h = norm.forward(x, record ? &record->norm : nullptr);  // (B, rows, d): rows = T or 1
  const std::int64_t rows = h.size(1);
  Tensor cls_state = Tensor::empty({B, d});  // h[:, 0]
  for (std::int64_t b = 0; b < B; ++b)
    std::copy_n(h.data_as<float>() + b * rows * d, d, cls_state.data_as<float>() + b * d);
  return head.forward(cls_state, {}, record ? &record->head : nullptr);  // (B, classes)
}

void VitWeights::backward(const Tensor& dlogits, const Record& record, VitWeights& grads) const {
  QKV_CHECK(record.blocks.size() == blocks.size() && grads.blocks.size() == blocks.size() &&
                grads.learned_positions == learned_positions && grads.shifted_patches == shifted_patches,
            "VitWeights::backward: the record and grads must come from a model with "
                << blocks.size() << " blocks and the same kind of positions and patches");
  const std::int64_t B = record.B, d = cls_token.size(0);
  const Tensor dcls = head.backward(dlogits, record.head, grads.head);  // (B, d)
  const std::int64_t rows = record.norm.x.size(1);  // T, or 1 after the last block's forward_first
  Tensor dh = Tensor::zeros({B, rows, d});            // only h[:, 0] was used
  for (std::int64_t b = 0; b < B; ++b)
    std::copy_n(dcls.data_as<float>() + b * d, d, dh.data_as<float>() + b * rows * d);
  Tensor dx = norm.backward(dh, record.norm, grads.norm);
  for (std::size_t i = blocks.size(); i-- > 0;) dx = blocks[i].backward(dx, record.blocks[i], grads.blocks[i]);
  // x = [cls; embedded] + pos, token 1 + k at position 1 + kept[b, k] (or 1 + k)
  const std::int64_t Tx = dx.size(1), K = Tx - 1;
  QKV_CHECK(record.kept.empty() || static_cast<std::int64_t>(record.kept.size()) == B * K,
            "VitWeights::backward: the record's kept patches do not match its tokens");
  const float* g = dx.data_as<float>();
  float* dpos = learned_positions ? grads.pos_embed.data_as<float>() : nullptr;
  float* dcls_token = grads.cls_token.data_as<float>();
  Tensor dembedded = Tensor::empty({B, K, d});
  float* de = dembedded.data_as<float>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < Tx; ++t) {
      const float* row = g + (b * Tx + t) * d;
      const std::int64_t at = position_of(record.kept, b, K, t);
      if (dpos)
        for (std::int64_t j = 0; j < d; ++j) dpos[at * d + j] += row[j];
      if (t == 0)
        for (std::int64_t j = 0; j < d; ++j) dcls_token[j] += row[j];
      else
        std::copy_n(row, d, de + (b * K + t - 1) * d);
    }
  const Tensor dpatches = patch_embed.backward(dembedded, record.patch_embed, grads.patch_embed);
  if (shifted_patches) patch_norm.backward(dpatches, record.patch_norm, grads.patch_norm);
  // the images get no gradient
}

std::vector<std::int64_t> random_patches(std::int64_t B, std::int64_t N, std::int64_t keep, std::uint64_t seed) {
  QKV_CHECK(B >= 0 && N >= 1 && keep >= 1 && keep <= N,
            "random_patches: need B >= 0 and 1 <= keep <= N, got B = " << B << ", N = " << N << ", keep = " << keep);
  const std::uint64_t stream = mix64(seed ^ 0x5061746368ull);  // "Patch": apart from the batch's other draws
  std::vector<std::int64_t> out(static_cast<std::size_t>(B * keep)), order(static_cast<std::size_t>(N));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t n = 0; n < N; ++n) order[static_cast<std::size_t>(n)] = n;
    // the first `keep` steps of a Fisher–Yates shuffle: order[0, keep) is a uniform subset
    for (std::int64_t i = 0; i < keep; ++i) {
      const double u = counter_uniform(stream, static_cast<std::uint64_t>(b * N + i));
      const std::int64_t j = i + std::min<std::int64_t>(static_cast<std::int64_t>(u * static_cast<double>(N - i)), N - i - 1);
      std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
    }
    std::sort(order.begin(), order.begin() + keep);
    std::copy_n(order.begin(), keep, out.begin() + b * keep);
  }
  return out;
}

std::int64_t patches_kept(std::int64_t N, double patch_dropout) {
  QKV_CHECK(N >= 1 && patch_dropout >= 0.0 && patch_dropout < 1.0,
            "patches_kept: need N >= 1 and patch dropout in [0, 1), got N = " << N << ", " << patch_dropout);
  return std::max<std::int64_t>(1, N - std::llround(patch_dropout * static_cast<double>(N)));
}

std::vector<float> attention_rollout(const std::vector<Tensor>& probs, std::int64_t b) {
  QKV_CHECK(!probs.empty(), "attention_rollout: no attention probabilities (a model without blocks)");
  const Tensor& first = probs.front();
  QKV_CHECK(first.dim() == 4 && b >= 0 && b < first.size(0) && first.size(2) == first.size(3),
            "attention_rollout: probabilities must be (B, heads, T, T) and b in [0, B), got "
                << shape_to_string(first.shape()) << " and b = " << b);
  const std::int64_t H = first.size(1), T = first.size(2);
  // rollout (T, T), starting from the identity; each layer: A = 0.5·mean_h P_h + 0.5·I, each
  // row divided by its sum (1 up to the probabilities' rounding: the division makes every A
  // exactly row-stochastic, as the definition has it), rollout = A · rollout.
  std::vector<double> rollout(static_cast<std::size_t>(T * T), 0.0), a(rollout.size()), next(rollout.size());
  for (std::int64_t i = 0; i < T; ++i) rollout[static_cast<std::size_t>(i * T + i)] = 1.0;
  for (const Tensor& layer : probs) {
    QKV_CHECK(layer.shape() == first.shape(), "attention_rollout: layers disagree on shape: "
                                                  << shape_to_string(layer.shape()) << " and "
                                                  << shape_to_string(first.shape()));
    const Tensor p = layer.contiguous();
    const float* pp = p.data_as<float>() + b * H * T * T;
    for (std::int64_t i = 0; i < T; ++i) {
      double row = 0.0;
      for (std::int64_t j = 0; j < T; ++j) {
        double mean = 0.0;
        for (std::int64_t h = 0; h < H; ++h) mean += pp[(h * T + i) * T + j];
        row += a[static_cast<std::size_t>(i * T + j)] = 0.5 * mean / static_cast<double>(H) + (i == j ? 0.5 : 0.0);
      }
      for (std::int64_t j = 0; j < T; ++j) a[static_cast<std::size_t>(i * T + j)] /= row;
    }
    for (std::int64_t i = 0; i < T; ++i)
      for (std::int64_t j = 0; j < T; ++j) {
        double s = 0.0;
        for (std::int64_t k = 0; k < T; ++k)
          s += a[static_cast<std::size_t>(i * T + k)] * rollout[static_cast<std::size_t>(k * T + j)];
        next[static_cast<std::size_t>(i * T + j)] = s;
      }
    rollout.swap(next);
  }
  std::vector<float> out(static_cast<std::size_t>(T - 1));
  for (std::int64_t j = 1; j < T; ++j) out[static_cast<std::size_t>(j - 1)] = static_cast<float>(rollout[static_cast<std::size_t>(j)]);
  return out;
}

}  // namespace qkv::models
