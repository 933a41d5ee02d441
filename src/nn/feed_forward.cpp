// FeedForward: linear2(dropout(activation(linear1(x)))) [+ residual], torch's _ff_block
// without its dropout2 (the layer's), and its backward.

#include "nn/common.h"

namespace qkv::nn {

namespace {

LinearActivation fused(Activation a) {
  switch (a) {
    case Activation::relu: return LinearActivation::relu;
    case Activation::gelu: return LinearActivation::gelu_erf;
    case Activation::gelu_tanh: return LinearActivation::gelu_tanh;
  }
  throw Error("FeedForward: unknown activation");
}

Tensor activate(const Tensor& x, Activation a) {
  if (a == Activation::relu) return relu(x);
  return gelu(x, a == Activation::gelu ? GeluApproximation::none : GeluApproximation::tanh);
}

}  // namespace

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::relu: return "relu";
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
  }
  return "unknown";
}

Activation parse_activation(const std::string& name, const std::string& what) {
  for (Activation a : {Activation::relu, Activation::gelu, Activation::gelu_tanh})
    if (name == activation_name(a)) return a;
  throw Error(what + " must be \"relu\", \"gelu\" or \"gelu_tanh\", got \"" + name + "\"");
}

FeedForward::FeedForward(std::int64_t d_model, std::int64_t dim_feedforward, Activation act,
                         bool bias, std::uint64_t seed)
    : linear1(d_model, dim_feedforward, bias, seed),
      linear2(dim_feedforward, d_model, bias, seed + 1),
      activation(act) {}

void FeedForward::pack(DType dtype) {
  linear1.pack(dtype);
  linear2.pack(dtype);
}

// forward: y = linear2(drop(act(linear1(x)))) + residual
Tensor FeedForward::forward(const Tensor& x, const Tensor& residual, Record* record,
                            const DropoutDraw& dropout) const {
  if (record == nullptr && !dropout.active()) {
    // The activation and the residual run inside the products (oneDNN post-ops).
    const Tensor h = linear1.forward(x, {fused(activation), Tensor()});          // (..., F)
    return linear2.forward(h, {LinearActivation::none, residual});               // (..., E)
  }
  Record scratch;  // the pre-activation must live somewhere when nobody keeps a record
  Record& r = record ? *record : scratch;
  r.hidden_pre = linear1.forward(x, {}, record ? &r.linear1 : nullptr);         // (..., F)
  Tensor h = activate(r.hidden_pre, activation);                               // (..., F)
  r.dropout = {};
  if (dropout.active()) h = Dropout(dropout.p).forward(h, dropout.seed, 0, &r.dropout);
  return linear2.forward(h, {LinearActivation::none, residual}, record ? &r.linear2 : nullptr);  // (..., E)
}

Tensor FeedForward::backward(const Tensor& dy, const Record& record, FeedForward& grads) const {
  Tensor dh = linear2.backward(dy, record.linear2, grads.linear2);  // (..., F)
  // h = drop(act(pre)): the same mask, regenerated from the record
  if (record.dropout.dropped) dh = Dropout().backward(dh, record.dropout);
  // relu' in place: dh is ours, and the pass is bound by memory traffic.
  if (activation == Activation::relu) {
    relu_backward_(dh, record.hidden_pre);
  } else {
    dh = gelu_backward(dh, record.hidden_pre, activation == Activation::gelu
                                                  ? GeluApproximation::none
                                                  : GeluApproximation::tanh);
  }
  return linear1.backward(dh, record.linear1, grads.linear1);  // (..., E)
}

ParameterList FeedForward::parameters(const std::string& prefix) {
  ParameterList list = linear1.parameters(prefix + "linear1.");
  detail::append(list, linear2.parameters(prefix + "linear2."));
  return list;
}

}  // namespace qkv::nn
