// The nn layers for Python (_qkv._nn_*): thin wrappers over qkv::nn.
//
// Tensors cross as the _Tensor views bindings.cpp registers (pybind11 shares registered
// types across the module's translation units); results go back as _Tensor and the
// Python side (python/qkv/nn.py) turns them into NumPy arrays or torch tensors. Every check
// lives in the C++ library. The GIL is released around each forward pass.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/error.h"
#include "qkv/nn.h"

namespace py = pybind11;
namespace nn = qkv::nn;

namespace {

qkv::Tensor or_undefined(const std::optional<qkv::Tensor>& t) { return t ? *t : qkv::Tensor(); }

nn::AttentionMasks masks(const std::optional<qkv::Tensor>& attn_mask,
                         const std::optional<qkv::Tensor>& key_padding_mask, bool is_causal) {
  nn::AttentionMasks m;
  m.attn_mask = or_undefined(attn_mask);
  m.key_padding_mask = or_undefined(key_padding_mask);
  m.is_causal = is_causal;
  return m;
}

nn::TransformerLayerConfig layer_config(std::int64_t d_model, std::int64_t nhead,
                                        std::int64_t dim_feedforward,
                                        const std::string& activation, double layer_norm_eps,
                                        bool norm_first, bool bias) {
  nn::TransformerLayerConfig c;
  c.d_model = d_model;
  c.nhead = nhead;
  c.dim_feedforward = dim_feedforward;
  c.activation = nn::parse_activation(activation);
  c.layer_norm_eps = layer_norm_eps;
  c.norm_first = norm_first;
  c.bias = bias;
  return c;
}

// Methods every module class shares: load_state_dict(dict name -> _Tensor, strict),
// state_dict() -> dict name -> _Tensor (views), parameter_shapes() -> dict name -> tuple.
template <class Module, class Class>
void add_state_methods(Class& cls) {
  cls.def("load_state_dict",
          [](Module& m, const std::map<std::string, qkv::Tensor>& state, bool strict) {
            nn::load_state_dict(m, state, strict);
          },
          py::arg("state"), py::arg("strict") = true);
  cls.def("state_dict", [](Module& m) { return nn::state_dict(m); });
  cls.def("parameter_shapes", [](Module& m) {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
    for (auto& [name, t] : m.parameters()) out.emplace_back(name, t->shape());
    return out;
  });
}

}  // namespace

void register_nn(py::module_& m) {
  m.def("_nn_linear",
        [](const qkv::Tensor& x, const qkv::Tensor& w, std::optional<qkv::Tensor> b) {
          py::gil_scoped_release release;
          return nn::linear(x, w, or_undefined(b));
        },
        py::arg("x"), py::arg("weight"), py::arg("bias"));
  m.def("_nn_layer_norm",
        [](const qkv::Tensor& x, std::vector<std::int64_t> shape, std::optional<qkv::Tensor> w,
           std::optional<qkv::Tensor> b, double eps) {
          py::gil_scoped_release release;
          return nn::layer_norm(x, shape, or_undefined(w), or_undefined(b), eps);
        },
        py::arg("x"), py::arg("normalized_shape"), py::arg("weight"), py::arg("bias"),
        py::arg("eps"));
  m.def("_nn_gelu",
        [](const qkv::Tensor& x, bool tanh) {
          py::gil_scoped_release release;
          return nn::gelu(x, tanh ? nn::GeluApproximation::tanh : nn::GeluApproximation::none);
        },
        py::arg("x"), py::arg("tanh"));
  m.def("_nn_relu", [](const qkv::Tensor& x) { return nn::relu(x); }, py::arg("x"));
  m.def("_nn_sinusoidal", &nn::sinusoidal_positional_encoding, py::arg("length"),
        py::arg("dim"), py::arg("base"));
  m.def("_nn_rope", &nn::apply_rope, py::arg("x"), py::arg("offset"), py::arg("base"));
  m.def("_nn_alibi_slopes", &nn::alibi_slopes, py::arg("num_heads"));

  py::class_<nn::MultiheadAttention> mha(m, "_nn_MultiheadAttention");
  mha.def(py::init([](std::int64_t embed_dim, std::int64_t num_heads, bool bias,
                      std::int64_t kdim, std::int64_t vdim) {
            nn::MultiheadAttentionConfig c;
            c.embed_dim = embed_dim;
            c.num_heads = num_heads;
            c.bias = bias;
            c.kdim = kdim;
            c.vdim = vdim;
            return nn::MultiheadAttention(c);
          }),
          py::arg("embed_dim"), py::arg("num_heads"), py::arg("bias"), py::arg("kdim"),
          py::arg("vdim"))
      .def("forward",
           [](const nn::MultiheadAttention& self, const qkv::Tensor& q, const qkv::Tensor& k,
              const qkv::Tensor& v, std::optional<qkv::Tensor> key_padding_mask,
              bool need_weights, std::optional<qkv::Tensor> attn_mask,
              bool average_attn_weights, bool is_causal) {
             qkv::Tensor out, probs;  // (B, L, E), (B, H, L, S)
             {
               py::gil_scoped_release release;
               out = self.forward(q, k, v, masks(attn_mask, key_padding_mask, is_causal), {},
                                  nullptr, need_weights ? &probs : nullptr);
               if (need_weights && average_attn_weights) probs = nn::average_heads(probs);
             }
             return std::make_pair(out, need_weights ? std::optional<qkv::Tensor>(probs)
                                                     : std::nullopt);
           },
           py::arg("query"), py::arg("key"), py::arg("value"), py::arg("key_padding_mask"),
           py::arg("need_weights"), py::arg("attn_mask"), py::arg("average_attn_weights"),
           py::arg("is_causal"))
      .def_property_readonly("packed", &nn::MultiheadAttention::joint_in_proj);
  add_state_methods<nn::MultiheadAttention>(mha);

  py::class_<nn::TransformerEncoderLayer> enc(m, "_nn_TransformerEncoderLayer");
  enc.def(py::init([](std::int64_t d, std::int64_t h, std::int64_t f, const std::string& act,
                      double eps, bool norm_first, bool bias) {
            return nn::TransformerEncoderLayer(layer_config(d, h, f, act, eps, norm_first, bias));
          }),
          py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward"), py::arg("activation"),
          py::arg("layer_norm_eps"), py::arg("norm_first"), py::arg("bias"))
      .def("forward",
           [](const nn::TransformerEncoderLayer& self, const qkv::Tensor& src,
              std::optional<qkv::Tensor> mask, std::optional<qkv::Tensor> kpm, bool is_causal) {
             py::gil_scoped_release release;
             return self.forward(src, masks(mask, kpm, is_causal));
           },
           py::arg("src"), py::arg("src_mask"), py::arg("src_key_padding_mask"),
           py::arg("is_causal"));
  add_state_methods<nn::TransformerEncoderLayer>(enc);

  py::class_<nn::TransformerDecoderLayer> dec(m, "_nn_TransformerDecoderLayer");
  dec.def(py::init([](std::int64_t d, std::int64_t h, std::int64_t f, const std::string& act,
                      double eps, bool norm_first, bool bias) {
            return nn::TransformerDecoderLayer(layer_config(d, h, f, act, eps, norm_first, bias));
          }),
          py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward"), py::arg("activation"),
          py::arg("layer_norm_eps"), py::arg("norm_first"), py::arg("bias"))
      .def("forward",
           [](const nn::TransformerDecoderLayer& self, const qkv::Tensor& tgt,
              const qkv::Tensor& memory, std::optional<qkv::Tensor> tgt_mask,
              std::optional<qkv::Tensor> memory_mask, std::optional<qkv::Tensor> tgt_kpm,
              std::optional<qkv::Tensor> memory_kpm, bool tgt_is_causal) {
             py::gil_scoped_release release;
             return self.forward(tgt, memory, masks(tgt_mask, tgt_kpm, tgt_is_causal),
                                 masks(memory_mask, memory_kpm, false));
           },
           py::arg("tgt"), py::arg("memory"), py::arg("tgt_mask"), py::arg("memory_mask"),
           py::arg("tgt_key_padding_mask"), py::arg("memory_key_padding_mask"),
           py::arg("tgt_is_causal"));
  add_state_methods<nn::TransformerDecoderLayer>(dec);

  py::class_<nn::Transformer> tr(m, "_nn_Transformer");
  tr.def(py::init([](std::int64_t d, std::int64_t h, std::int64_t ne, std::int64_t nd,
                     std::int64_t f, const std::string& act, double eps, bool norm_first,
                     bool bias) {
           nn::TransformerConfig c;
           c.layer = layer_config(d, h, f, act, eps, norm_first, bias);
           c.num_encoder_layers = ne;
           c.num_decoder_layers = nd;
           return nn::Transformer(c);
         }),
         py::arg("d_model"), py::arg("nhead"), py::arg("num_encoder_layers"),
         py::arg("num_decoder_layers"), py::arg("dim_feedforward"), py::arg("activation"),
         py::arg("layer_norm_eps"), py::arg("norm_first"), py::arg("bias"))
      .def("forward",
           [](const nn::Transformer& self, const qkv::Tensor& src, const qkv::Tensor& tgt,
              std::optional<qkv::Tensor> src_mask, std::optional<qkv::Tensor> tgt_mask,
              std::optional<qkv::Tensor> memory_mask, std::optional<qkv::Tensor> src_kpm,
              std::optional<qkv::Tensor> tgt_kpm, std::optional<qkv::Tensor> memory_kpm,
              bool src_is_causal, bool tgt_is_causal) {
             py::gil_scoped_release release;
             return self.forward(src, tgt, masks(src_mask, src_kpm, src_is_causal),
                                 masks(tgt_mask, tgt_kpm, tgt_is_causal),
                                 masks(memory_mask, memory_kpm, false));
           },
           py::arg("src"), py::arg("tgt"), py::arg("src_mask"), py::arg("tgt_mask"),
           py::arg("memory_mask"), py::arg("src_key_padding_mask"),
           py::arg("tgt_key_padding_mask"), py::arg("memory_key_padding_mask"),
           py::arg("src_is_causal"), py::arg("tgt_is_causal"));
  add_state_methods<nn::Transformer>(tr);

  py::class_<nn::VectorAttention> va(m, "_nn_VectorAttention");
  va.def(py::init([](std::int64_t dim, std::int64_t pos_dim, std::int64_t hidden,
                     std::int64_t mult, std::int64_t num_neighbors) {
           nn::VectorAttentionConfig c;
           c.dim = dim;
           c.pos_dim = pos_dim;
           c.pos_mlp_hidden_dim = hidden;
           c.attn_mlp_hidden_mult = mult;
           c.num_neighbors = num_neighbors;
           return nn::VectorAttention(c);
         }),
         py::arg("dim"), py::arg("pos_dim"), py::arg("pos_mlp_hidden_dim"),
         py::arg("attn_mlp_hidden_mult"), py::arg("num_neighbors"))
      .def("forward",
           [](const nn::VectorAttention& self, const qkv::Tensor& x, const qkv::Tensor& pos) {
             py::gil_scoped_release release;
             return self.forward(x, pos);
           },
           py::arg("x"), py::arg("pos"));
  add_state_methods<nn::VectorAttention>(va);
}
