#!/usr/bin/env python3
"""Whether two safetensors files hold the same tensors (the metadata is not compared).

  same_weights.py A B               every tensor byte for byte
  same_weights.py A B --close       f32 tensors as data-parallel training leaves them (its
                                    sums are taken in another order): the whole within 1e-5
                                    relative (norm of the difference over the norm of A),
                                    each tensor within --tensor (1e-4) of its largest magnitude
  --key-bias E                      the key third of a width-E in_proj_bias (which no output
                                    depends on) left out
  --prefix P                        only the tensors whose names start with P
Exits 0 when they agree, else 1 naming the first tensor that does not.
"""
import argparse
import json
import struct
import sys


def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    return {name: (t["dtype"], data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]])
            for name, t in header.items() if name != "__metadata__"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--close", action="store_true")
    parser.add_argument("--tensor", type=float, default=1e-4)
    parser.add_argument("--key-bias", type=int, default=0, metavar="E")
    parser.add_argument("--prefix", default="")
    args = parser.parse_args()
    a, b = tensors(args.a), tensors(args.b)
    a = {k: v for k, v in a.items() if k.startswith(args.prefix)}
    b = {k: v for k, v in b.items() if k.startswith(args.prefix)}
    if a.keys() != b.keys() or not a:
        sys.exit(f"different tensors: {sorted(a.keys() ^ b.keys())[:5]} (of {len(a)} and {len(b)})")
    if not args.close:
        for name in sorted(a):
            if a[name] != b[name]:
                sys.exit(f"tensor {name} differs")
        return
    import numpy as np
    E = args.key_bias
    diff2 = norm2 = 0.0
    for name in sorted(a):
        x = np.frombuffer(a[name][1], dtype=np.float32).astype(np.float64)
        y = np.frombuffer(b[name][1], dtype=np.float32).astype(np.float64)
        if E and name.endswith("in_proj_bias") and x.size == 3 * E:
            x, y = np.concatenate([x[:E], x[2 * E:]]), np.concatenate([y[:E], y[2 * E:]])
        worst, scale = (np.abs(x - y).max(), np.abs(x).max()) if x.size else (0.0, 0.0)
        if worst > args.tensor * scale:
            sys.exit(f"tensor {name}: differs by {worst} (largest magnitude {scale})")
        diff2 += ((x - y) ** 2).sum()
        norm2 += (x ** 2).sum()
    if diff2 ** 0.5 > 1e-5 * norm2 ** 0.5:
        sys.exit(f"the weights differ by {diff2 ** 0.5} (norm {norm2 ** 0.5})")


if __name__ == "__main__":
    main()
