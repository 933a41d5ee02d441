// The Point Transformer classifier: images to point sets, the embedding, the blocks of
// vector attention over nearest neighbours, the pooling and the head, with its backward.
// See include/qkv/point_transformer.h.

#include "qkv/point_transformer.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "qkv/error.h"
#include "qkv/rng.h"

namespace qkv::models {

// ---------------------------------------------------------------------------------------
// Images -> points.

namespace {

// One image's points into out (N, 2 + S²); see the header for the sampling.
void sample_points(const std::uint8_t* pixels, std::int64_t H, std::int64_t W, std::int64_t N,
                   std::uint64_t seed, std::uint64_t counter, std::int64_t S, float* out) {
  const std::int64_t F = point_floats(S), r = S / 2;  // floats per point; the window's radius
  std::vector<std::int64_t> inked;  // (M) raster indices row·W + column, ascending
  for (std::int64_t i = 0; i < H * W; ++i)
    if (pixels[i] > kInkThreshold) inked.push_back(i);
  const auto M = static_cast<std::int64_t>(inked.size());
  if (M == 0) {  // black: the centre, dark
    std::fill(out, out + N * F, 0.0f);
    return;
  }
  // Every inked pixel ⌊N/M⌋ times, and N mod M distinct ones once more, chosen by a partial
  // Fisher–Yates shuffle of [0, M) driven by counter_uniform.
  std::vector<std::int64_t> copies(static_cast<std::size_t>(M), N / M);  // (M)
  const std::int64_t extra = N % M;
  if (extra > 0) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(M));  // (M) positions in inked
    std::iota(order.begin(), order.end(), std::int64_t{0});
    const std::uint64_t stream = mix64(mix64(seed) + counter);
    for (std::int64_t t = 0; t < extra; ++t) {
      const std::int64_t span = M - t;
      const auto offset = std::min(static_cast<std::int64_t>(counter_uniform(stream, static_cast<std::uint64_t>(t)) *
                                                             static_cast<double>(span)),
                                   span - 1);  // floor(u·span), clamped against rounding up
      std::swap(order[static_cast<std::size_t>(t)], order[static_cast<std::size_t>(t + offset)]);
      ++copies[static_cast<std::size_t>(order[static_cast<std::size_t>(t)])];
    }
  }
  // Raster order; x from the column, y from the row, both onto [−1, 1]; then the window.
  const double sx = W > 1 ? 2.0 / static_cast<double>(W - 1) : 0.0;
  const double sy = H > 1 ? 2.0 / static_cast<double>(H - 1) : 0.0;
  std::int64_t n = 0;
  for (std::int64_t m = 0; m < M; ++m) {
    const std::int64_t i = inked[static_cast<std::size_t>(m)], row = i / W, column = i % W;
    const auto x = static_cast<float>(W > 1 ? static_cast<double>(column) * sx - 1.0 : 0.0);
    const auto y = static_cast<float>(H > 1 ? static_cast<double>(row) * sy - 1.0 : 0.0);
    for (std::int64_t c = 0; c < copies[static_cast<std::size_t>(m)]; ++c, ++n) {
      float* point = out + n * F;
      point[0] = x;
      point[1] = y;
      float* window = point + 2;  // (S, S)
      for (std::int64_t dr = -r; dr <= r; ++dr)
        for (std::int64_t dc = -r; dc <= r; ++dc) {
          const std::int64_t pr = row + dr, pc = column + dc;
          const bool inside = pr >= 0 && pr < H && pc >= 0 && pc < W;
          *window++ = inside ? static_cast<float>(pixels[pr * W + pc] / 255.0) : 0.0f;
        }
    }
  }
}

void check_sampling(std::int64_t height, std::int64_t width, std::int64_t points, std::int64_t patch_size,
                    const char* fn) {
  QKV_CHECK(height >= 1 && width >= 1,
            fn << ": height and width must be >= 1, got " << height << " x " << width);
  QKV_CHECK(points >= 1, fn << ": points (N) must be >= 1, got " << points);
  QKV_CHECK(valid_point_patch(patch_size),
            fn << ": patch_size must be odd and in [1, " << kMaxPointPatch << "], got " << patch_size);
}

}  // namespace

Tensor image_to_points(std::span<const std::uint8_t> pixels, std::int64_t height, std::int64_t width,
                       std::int64_t points, std::uint64_t seed, std::uint64_t counter, std::int64_t patch_size) {
  check_sampling(height, width, points, patch_size, "image_to_points");
  QKV_CHECK(static_cast<std::int64_t>(pixels.size()) == height * width,
            "image_to_points: pixels must hold height x width = " << height * width << " values, got "
                                                                  << pixels.size());
  Tensor out = Tensor::empty({points, point_floats(patch_size)});
  sample_points(pixels.data(), height, width, points, seed, counter, patch_size, out.data_as<float>());
  return out;
}

Tensor images_to_points(std::span<const std::uint8_t> pixels, std::int64_t count, std::int64_t height,
                        std::int64_t width, std::int64_t points, std::uint64_t seed,
                        std::uint64_t first_counter, std::int64_t patch_size) {
  check_sampling(height, width, points, patch_size, "images_to_points");
  QKV_CHECK(count >= 0 && static_cast<std::int64_t>(pixels.size()) == count * height * width,
            "images_to_points: pixels must hold count x height x width = "
                << count << " x " << height << " x " << width << " values, got " << pixels.size());
  const std::int64_t F = point_floats(patch_size);
  Tensor out = Tensor::empty({count, points, F});
  for (std::int64_t b = 0; b < count; ++b)
    sample_points(pixels.data() + b * height * width, height, width, points, seed,
                  first_counter + static_cast<std::uint64_t>(b), patch_size, out.data_as<float>() + b * points * F);
  return out;
}

// ---------------------------------------------------------------------------------------
// The configuration.

nn::VectorAttentionConfig PointTransformerConfig::attention_config() const {
  nn::VectorAttentionConfig a;
  a.dim = dim;
  a.pos_dim = 2;  // (x, y)
  a.pos_mlp_hidden_dim = pos_mlp_hidden;
  a.attn_mlp_hidden_mult = attn_mlp_hidden_mult;
  a.num_neighbors = neighbors;
  return a;
}

void PointTransformerConfig::check() const {
  QKV_CHECK(points >= 1 && neighbors >= 1 && dim >= 1 && blocks >= 0 && pos_mlp_hidden >= 1 &&
                attn_mlp_hidden_mult >= 1 && head_hidden >= 1 && classes >= 1,
            "point_transformer: points, neighbors, dim, pos_mlp_hidden, attn_mlp_hidden_mult, "
            "head_hidden and classes must be >= 1 and blocks >= 0, got points = "
                << points << ", neighbors = " << neighbors << ", dim = " << dim << ", blocks = " << blocks
                << ", pos_mlp_hidden = " << pos_mlp_hidden << ", attn_mlp_hidden_mult = "
                << attn_mlp_hidden_mult << ", head_hidden = " << head_hidden << ", classes = " << classes);
  QKV_CHECK(neighbors <= points, "point_transformer: neighbors (K = " << neighbors
                                     << ") must not exceed points (N = " << points << ")");
  QKV_CHECK(valid_point_patch(patch_size),
            "point_transformer: patch_size (S) must be odd and in [1, " << kMaxPointPatch << "], got "
                                                                       << patch_size);
}

std::int64_t PointTransformerConfig::num_parameters() const {
  const std::int64_t C = dim, Hp = pos_mlp_hidden, Cm = dim * attn_mlp_hidden_mult, Hh = head_hidden;
  const std::int64_t attn = 3 * C * C + (2 * Hp + Hp) + (Hp * C + C) + (C * Cm + Cm) + (Cm * C + C);
  const std::int64_t block = 2 * C + (C * C + C) + attn + (C * C + C);
  return (point_features() * C + C) + (C * C + C) + blocks * block + 2 * C + (2 * C * Hh + Hh) + (Hh * classes + classes);
}

double PointTransformerConfig::flops() const {
  const double N = static_cast<double>(points), K = static_cast<double>(std::min(neighbors, points));
  const double C = static_cast<double>(dim), Hp = static_cast<double>(pos_mlp_hidden);
  const double Cm = C * static_cast<double>(attn_mlp_hidden_mult), Hh = static_cast<double>(head_hidden);
  const double embed = N * (static_cast<double>(point_features()) * C + C * C) * 2;
  const double block = N * (5 * C * C) * 2 + N * K * (2 * Hp + Hp * C + 2 * C * Cm) * 2;
  const double head = (2 * C * Hh + Hh * static_cast<double>(classes)) * 2;
  return embed + static_cast<double>(blocks) * block + head;
}

// ---------------------------------------------------------------------------------------
// The weights.

nn::ParameterList PointTransformerBlock::parameters(const std::string& prefix) {
  nn::ParameterList p = norm.parameters(prefix + "norm.");
  for (auto& e : linear1.parameters(prefix + "linear1.")) p.push_back(e);
  for (auto& e : attn.parameters(prefix + "attn.")) p.push_back(e);
  for (auto& e : linear2.parameters(prefix + "linear2.")) p.push_back(e);
  return p;
}

nn::ParameterList PointTransformerWeights::parameters() {
  nn::ParameterList p = embed0.parameters("embed.0.");
  for (auto& e : embed2.parameters("embed.2.")) p.push_back(e);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    for (auto& e : blocks[i].parameters("blocks." + std::to_string(i) + ".")) p.push_back(e);
  for (auto& e : norm.parameters("norm.")) p.push_back(e);
  for (auto& e : head0.parameters("head.0.")) p.push_back(e);
  for (auto& e : head2.parameters("head.2.")) p.push_back(e);
  return p;
}

PointTransformerWeights PointTransformerWeights::initialized(const PointTransformerConfig& c,
                                                             std::uint64_t seed) {
  c.check();
  // One seed per module, apart from other models' ("PT"); VectorAttention takes 5 in a row.
  const std::uint64_t base = mix64(seed + 0x5054000000000000ull);
  auto module_seed = [&](std::uint64_t k) { return mix64(base + 8 * k); };
  const std::int64_t C = c.dim;
  PointTransformerWeights w;
  w.embed0 = nn::Linear(c.point_features(), C, true, module_seed(0));
  w.embed2 = nn::Linear(C, C, true, module_seed(1));
  for (std::int64_t i = 0; i < c.blocks; ++i) {
    const auto k = 2 + 3 * static_cast<std::uint64_t>(i);
    PointTransformerBlock b;
    b.norm = nn::LayerNorm({C});
    b.linear1 = nn::Linear(C, C, true, module_seed(k));
    b.attn = nn::VectorAttention(c.attention_config(), module_seed(k + 1));
    b.linear2 = nn::Linear(C, C, true, module_seed(k + 2));
    w.blocks.push_back(std::move(b));
  }
  w.norm = nn::LayerNorm({C});
  const auto k = 2 + 3 * static_cast<std::uint64_t>(c.blocks);
  w.head0 = nn::Linear(2 * C, c.head_hidden, true, module_seed(k));
  w.head2 = nn::Linear(c.head_hidden, c.classes, true, module_seed(k + 1));
  return w;
}

PointTransformerWeights PointTransformerWeights::zeros_like(const PointTransformerConfig& c) {
  PointTransformerWeights w = initialized(c, 0);
  for (auto& [name, t] : w.parameters()) *t = Tensor::zeros(t->shape());
  return w;
}

Tensor PointTransformerWeights::forward(const Tensor& points, Record* record) const {
  const std::int64_t C = embed2.out_features(), F = embed0.in_features();  // F = 2 + S²
  QKV_CHECK(points.defined() && points.dtype() == DType::f32 && points.dim() == 3 &&
                points.size(0) >= 1 && points.size(1) >= 1 && points.size(2) == F,
            "point_transformer: points must be f32 (B, N, " << F << ") with B, N >= 1 (x, y and the "
                << F - 2 << " intensities of the patch; embed.0 reads " << F << "), got "
                << (points.defined() ? std::string(dtype_name(points.dtype())) + " " + points.shape_string()
                                     : std::string("undefined")));
  const std::int64_t B = points.size(0), N = points.size(1);
  const Tensor p = points.contiguous();  // (B, N, F)
  Tensor xy = Tensor::empty({B, N, 2});   // (B, N, 2) the positions attention sees
  for (std::int64_t i = 0; i < B * N; ++i) {
    xy.data_as<float>()[i * 2] = p.data_as<float>()[i * F];
    xy.data_as<float>()[i * 2 + 1] = p.data_as<float>()[i * F + 1];
  }
  if (record) {
    *record = Record();
    record->B = B;
    record->N = N;
    record->blocks.resize(blocks.size());
  }
  // x = embed2(relu(embed0(points)))   (B, N, C)
  const Tensor e0 = embed0.forward(p, {}, record ? &record->embed0 : nullptr);
  Tensor x = embed2.forward(nn::relu(e0), {}, record ? &record->embed2 : nullptr);
  if (record) record->e0 = e0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const PointTransformerBlock& blk = blocks[i];
    BlockRecord* r = record ? &record->blocks[i] : nullptr;
    // x = x + linear2(relu(attn(linear1(norm(x)), xy)))
    const Tensor h = blk.norm.forward(x, r ? &r->norm : nullptr);
    const Tensor u = blk.linear1.forward(h, {}, r ? &r->linear1 : nullptr);
    const Tensor a = blk.attn.forward(u, xy, r ? &r->attn : nullptr);
    nn::LinearEpilogue residual;
    residual.residual = x;
    x = blk.linear2.forward(nn::relu(a), residual, r ? &r->linear2 : nullptr);
    if (r) r->a = a;
  }
  const Tensor z = norm.forward(x, record ? &record->norm : nullptr);  // (B, N, C)
  // pooled = [mean_n z ; max_n z]   (B, 2C); the max's first point on ties
  Tensor pooled = Tensor::empty({B, 2 * C});
  if (record) record->argmax.assign(static_cast<std::size_t>(B * C), 0);
  {
    const float* pz = z.data_as<float>();
    float* out = pooled.data_as<float>();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t c = 0; c < C; ++c) {
        double sum = 0;
        std::int64_t best = 0;
        for (std::int64_t n = 0; n < N; ++n) {
          const float v = pz[(b * N + n) * C + c];
          sum += v;
          if (v > pz[(b * N + best) * C + c]) best = n;
        }
        out[b * 2 * C + c] = static_cast<float>(sum / static_cast<double>(N));
        out[b * 2 * C + C + c] = pz[(b * N + best) * C + c];
        if (record) record->argmax[static_cast<std::size_t>(b * C + c)] = best;
      }
  }
  // logits = head2(relu(head0(pooled)))
  const Tensor h0 = head0.forward(pooled, {}, record ? &record->head0 : nullptr);
  if (record) record->h0 = h0;
  return head2.forward(nn::relu(h0), {}, record ? &record->head2 : nullptr);
}

void PointTransformerWeights::backward(const Tensor& dlogits, const Record& record,
                                       PointTransformerWeights& grads) const {
  const std::int64_t B = record.B, N = record.N, C = embed2.out_features();
  QKV_CHECK(record.blocks.size() == blocks.size() && grads.blocks.size() == blocks.size() &&
                record.argmax.size() == static_cast<std::size_t>(B * C),
            "PointTransformerWeights::backward: the record and grads must come from a model with "
                << blocks.size() << " blocks (a record of its forward)");
  QKV_CHECK(dlogits.defined() && dlogits.dim() == 2 && dlogits.size(0) == B &&
                dlogits.size(1) == head2.out_features(),
            "PointTransformerWeights::backward: dlogits must be (B = " << B << ", classes = "
                << head2.out_features() << "), got "
                << (dlogits.defined() ? dlogits.shape_string() : std::string("undefined")));
  // logits = head2(relu(h0)), h0 = head0(pooled)
  Tensor dh0 = head2.backward(dlogits, record.head2, grads.head2);  // (B, Hh)
  nn::relu_backward_(dh0, record.h0);
  const Tensor dpooled = head0.backward(dh0, record.head0, grads.head0);  // (B, 2C)
  // pooled = [mean_n z ; max_n z]: dz = dmean / N everywhere, + dmax at each channel's argmax
  Tensor dz = Tensor::empty({B, N, C});
  {
    const float* g = dpooled.data_as<float>();
    float* d = dz.data_as<float>();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t c = 0; c < C; ++c) d[(b * N + n) * C + c] = g[b * 2 * C + c] / static_cast<float>(N);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t c = 0; c < C; ++c)
        d[(b * N + record.argmax[static_cast<std::size_t>(b * C + c)]) * C + c] += g[b * 2 * C + C + c];
  }
  // z = norm(x)
  Tensor dx = norm.backward(dz, record.norm, grads.norm);  // (B, N, C)
  for (std::size_t i = blocks.size(); i-- > 0;) {
    const PointTransformerBlock& blk = blocks[i];
    const BlockRecord& r = record.blocks[i];
    PointTransformerBlock& g = grads.blocks[i];
    // x = x + linear2(relu(a)), a = attn(linear1(norm(x)), xy): the residual passes dx on
    Tensor da = blk.linear2.backward(dx, r.linear2, g.linear2);
    nn::relu_backward_(da, r.a);
    const Tensor du = blk.attn.backward(da, r.attn, g.attn);
    const Tensor dh = blk.linear1.backward(du, r.linear1, g.linear1);
    nn::add_(dx, blk.norm.backward(dh, r.norm, g.norm));
  }
  // x = embed2(relu(e0)), e0 = embed0(points); the points get no gradient
  Tensor de0 = embed2.backward(dx, record.embed2, grads.embed2);
  nn::relu_backward_(de0, record.e0);
  embed0.backward(de0, record.embed0, grads.embed0);
}

}  // namespace qkv::models
