#!/usr/bin/env python3
"""Tiny data sets in the formats the training tasks read, for the training-loop tests.

  tiny_data.py images DIR TRAIN TEST    Fashion-MNIST's four gzip IDX files in DIR: TRAIN
                                        training images (the last 5,000 validate) and TEST
                                        test images, each class a bright bar at its own row
  tiny_data.py ratings CSV USERS MOVIES a ratings CSV (userId,movieId,rating,timestamp,title,
                                        year,genres), each user rating a third of the movies
Deterministic: the same arguments write the same bytes.
"""
import gzip
import random
import struct
import sys


def idx(dims, payload):
    return (struct.pack(">BBBB", 0, 0, 0x08, len(dims)) + b"".join(struct.pack(">I", d) for d in dims)
            + bytes(payload))


def images(out, train, test):
    rng = random.Random(11)
    for name, n in (("train", train), ("t10k", test)):
        pixels, labels = bytearray(), bytearray()
        for i in range(n):
            label = (i * 3 + len(name)) % 10
            for y in range(28):
                pixels.extend(220 if y // 2 == label + 2 else rng.randrange(50) for _ in range(28))
            labels.append(label)
        with open(f"{out}/{name}-images-idx3-ubyte.gz", "wb") as f:
            f.write(gzip.compress(idx((n, 28, 28), pixels), mtime=0))
        with open(f"{out}/{name}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(gzip.compress(idx((n,), labels), mtime=0))


def ratings(path, users, movies):
    rng = random.Random(13)
    lines = ["userId,movieId,rating,timestamp,title,year,genres"]
    for u in range(1, users + 1):
        for m in sorted(rng.sample(range(1, movies + 1), movies // 3)):
            taste = 1 if (u + m) % 4 else -1
            rating = min(5.0, max(0.5, 3.0 + taste + rng.choice((-0.5, 0.0, 0.5))))
            lines.append(f"{u},{m},{rating},{1_000_000 + rng.randrange(100_000)},Film {m},{1970 + m % 40},Drama")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "images":
        images(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) == 5 and sys.argv[1] == "ratings":
        ratings(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)
