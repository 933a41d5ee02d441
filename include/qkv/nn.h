// qkv::nn — Transformer layers with torch.nn's semantics and parameter names, one forward
// per module for inference and training, its backward beside it:
//
//   qkv::nn::TransformerEncoderLayer layer(config);
//   qkv::nn::load_state_dict(layer, state_dict);   // names as torch: "self_attn.in_proj_weight", ...
//   Tensor y = layer.forward(x);                   // inference: nothing kept
//
//   qkv::nn::TransformerEncoderLayer::Record record;
//   Tensor y = layer.forward(x, masks, nullptr, nullptr, &record);   // training
//   Tensor dx = layer.backward(dy, record, grads);  // grads: a second layer, + ∂loss/∂θ
//
// Activations are batch-first: (B, L, E). Matrix products go through oneDNN (kept out of
// these headers).
//   qkv/nn/functional.h        elementwise helpers, linear, layer_norm, activations, positions
//   qkv/nn/dropout.h           Dropout (residual and embedding dropout), DropoutDraw (what a
//                              training forward through a layer drops)
//   qkv/nn/precision.h         ProductPrecision: bf16 products with f32 accumulation (autocast)
//   qkv/nn/layers.h            Linear, Embedding, LearnedPositionalEmbedding, LayerNorm, state dicts
//   qkv/nn/multihead_attention.h  AttentionMasks, KVCache, MultiheadAttention
//   qkv/nn/transformer.h       FeedForward, encoder and decoder layers, Transformer
//   qkv/nn/vector_attention.h  VectorAttention (Point Transformer)
#pragma once

#include "qkv/nn/dropout.h"
#include "qkv/nn/functional.h"
#include "qkv/nn/layers.h"
#include "qkv/nn/multihead_attention.h"
#include "qkv/nn/precision.h"
#include "qkv/nn/transformer.h"
#include "qkv/nn/vector_attention.h"
