"""The Universal Sentence Encoder lite as an ONNX graph, built node by node with onnx.helper
(opset 17) from the converted weights — not exported from the torch module, so that ONNX
Runtime's figures come from a construction independent of use_lite_torch.py.

    build(config, weights, path)     # use_lite_model.load(directory, ...)

Inputs (float32, as the ONNX Runtime runners of scripts/bench feed them):
  ids   (B, L)  token ids, zero-padded (cast to int64 inside the graph)
  mask  (B, L)  1 for a token, 0 for padding
Output:
  embeddings (B, O)  unit rows

What the nodes compute (use_lite_model.py states the model):
  x = Gather(embedding, ids) · scale + timing[:L]
  per layer: LayerNormalization (ε from the config), one MatMul + Add for q, k and v
  (Split in three), heads by Reshape + Transpose, q·(1/√D) MatMul kᵀ, + (mask − 1)·1e9 on the
  keys (the TF.js graph's −1e9 bias), Softmax, MatMul v, out_proj, the residual (through
  residual_proj where the width changes), LayerNormalization, linear1, Relu, linear2, Add
  pooled = ReduceSum(x · mask) / ReduceSum(mask); y = Tanh(pooler); y / Sqrt(Max(Σy², 1e-12))
Linear weights are stored transposed, (in, out), as MatMul's right operand.
"""
import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.use_lite_model import timing_signal, widths

OPSET = 17  # LayerNormalization


class _Graph:
    def __init__(self):
        self.nodes, self.initializers, self.count = [], [], 0

    def const(self, name, array):
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type, inputs, outputs=1, **attributes):
        """One node; -> its output name (or names, for outputs > 1)."""
        self.count += 1
        names = [f"{op_type.lower()}_{self.count}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=f"{op_type}_{self.count}", **attributes))
        return names[0] if outputs == 1 else names

    def linear(self, x, weights, prefix):
        """x · Wᵀ + b for a torch-layout Linear (out, in)."""
        w = self.const(prefix + ".weight.T", weights[prefix + ".weight"].T.astype(np.float32))
        b = self.const(prefix + ".bias", weights[prefix + ".bias"].astype(np.float32))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x, weights, prefix, eps):
        return self.op("LayerNormalization", [x, self.const(prefix + ".weight", weights[prefix + ".weight"]),
                                              self.const(prefix + ".bias", weights[prefix + ".bias"])],
                       axis=-1, epsilon=float(eps))


def build(config, weights, path):
    """Writes the graph to path; -> path."""
    g = _Graph()
    heads, eps = config["num_attention_heads"], config["layer_norm_eps"]
    e0 = config["layer_widths"][0]
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    f32 = lambda v: np.array(v, dtype=np.float32)  # noqa: E731

    ids = g.op("Cast", ["ids"], to=TensorProto.INT64)  # (B, L)
    length = g.op("Slice", [g.op("Shape", ["ids"]), g.const("one", i64(1)), g.const("two", i64(2))])  # [L]
    timing = g.op("Slice", [g.const("timing", timing_signal(config["max_length"], e0)), g.const("zero", i64(0)),
                            length, g.const("axis0", i64(0))])  # (L, E0)
    x = g.op("Gather", [g.const("embedding.weight", weights["embedding.weight"]), ids], axis=0)  # (B, L, E0)
    x = g.op("Add", [g.op("Mul", [x, g.const("embedding_scale", f32(config.get("embedding_scale", 1.0)))]), timing])
    # (B, 1, 1, L): 0 on tokens, -1e9 on padded keys
    key_bias = g.op("Mul", [g.op("Sub", ["mask", g.const("f_one", f32(1.0))]), g.const("big", f32(1e9))])
    key_bias = g.op("Unsqueeze", [key_bias, g.const("axes12", i64(1, 2))])

    for i, (e_in, e_out) in enumerate(widths(config)):
        p = f"layers.{i}."
        d = e_in // heads
        h = g.layer_norm(x, weights, p + "norm1", eps)
        w_in = g.const(p + "in_proj.T", weights[p + "self_attn.in_proj_weight"].T.astype(np.float32))  # (E, 3E)
        b_in = g.const(p + "in_proj_bias", weights[p + "self_attn.in_proj_bias"])
        qkv = g.op("Add", [g.op("MatMul", [h, w_in]), b_in])  # (B, L, 3E)
        q, k, v = g.op("Split", [qkv], outputs=3, axis=-1)  # (B, L, E) each
        heads_shape = g.const(p + "heads_shape", i64(0, 0, heads, d))
        q = g.op("Transpose", [g.op("Reshape", [q, heads_shape])], perm=[0, 2, 1, 3])  # (B, H, L, D)
        k = g.op("Transpose", [g.op("Reshape", [k, heads_shape])], perm=[0, 2, 3, 1])  # (B, H, D, L)
        v = g.op("Transpose", [g.op("Reshape", [v, heads_shape])], perm=[0, 2, 1, 3])  # (B, H, L, D)
        q = g.op("Mul", [q, g.const(p + "q_scale", f32(1 / math.sqrt(d)))])
        scores = g.op("Add", [g.op("MatMul", [q, k]), key_bias])  # (B, H, L, L)
        o = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])  # (B, H, L, D)
        o = g.op("Reshape", [g.op("Transpose", [o], perm=[0, 2, 1, 3]), g.const(p + "merge_shape", i64(0, 0, e_in))])
        a = g.linear(o, weights, p + "self_attn.out_proj")  # (B, L, E_out)
        r = g.linear(x, weights, p + "residual_proj") if e_in != e_out else x
        x = g.op("Add", [r, a])
        f = g.op("Relu", [g.linear(g.layer_norm(x, weights, p + "norm2", eps), weights, p + "linear1")])
        x = g.op("Add", [x, g.linear(f, weights, p + "linear2")])  # (B, L, E_out)

    axis1 = g.const("axis1", i64(1))
    summed = g.op("ReduceSum", [g.op("Mul", [x, g.op("Unsqueeze", ["mask", g.const("axis_last", i64(-1))])]), axis1],
                  keepdims=0)  # (B, O)
    count = g.op("ReduceSum", ["mask", axis1], keepdims=1)  # (B, 1)
    y = g.op("Tanh", [g.linear(g.op("Div", [summed, count]), weights, "pooler")])
    norm2 = g.op("Max", [g.op("ReduceSum", [g.op("Mul", [y, y]), axis1], keepdims=1), g.const("tiny", f32(1e-12))])
    g.nodes.append(helper.make_node("Div", [y, g.op("Sqrt", [norm2])], ["embeddings"], name="l2_normalize"))

    graph = helper.make_graph(
        g.nodes, "use_lite",
        [helper.make_tensor_value_info("ids", TensorProto.FLOAT, ["B", "L"]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["B", "L"])],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["B", config["output_size"]])],
        g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="qkv scripts/bench/use_lite_onnx.py")
    model.ir_version = 8  # what ONNX Runtime reads for opset 17
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path
