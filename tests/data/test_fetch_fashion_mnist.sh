#!/usr/bin/env bash
# data.fashion_mnist: scripts/fetch_data.sh fashion-mnist DIR copies Debian's four gzipped
# IDX files of Fashion-MNIST exactly. The SHA-256 of each .gz pins the package version;
# that of what it inflates to pins the data themselves (Debian's .gz files are not
# upstream's: their MD5s differ from those in the package's README, so a repacked package
# may change the first pins and not the second). The checks after them say what a changed
# hash broke: the headers, the counts, the labels' range and balance, and the validation
# split (the last 5,000 training images) that models are chosen on.
#   test_fetch_fashion_mnist.sh FETCH_DATA_SH
set -euo pipefail
fetch=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out=$("$fetch" fashion-mnist "$tmp/data") || fail "fetch_data.sh fashion-mnist exited $?"
grep -q "60000 training and 10000 test images" <<<"$out" || fail "counts: $out"
check train-images-idx3-ubyte.gz b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7
check train-labels-idx1-ubyte.gz 0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056
check t10k-images-idx3-ubyte.gz cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa
check t10k-labels-idx1-ubyte.gz 8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05
/usr/bin/python3 - "$tmp/data" <<'PY' || fail "the IDX files are not Fashion-MNIST as pinned"
import collections, gzip, hashlib, os, struct, sys

data = sys.argv[1]
inflated = {  # SHA-256 of each file's IDX bytes
    "train-images-idx3-ubyte.gz": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte.gz": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte.gz": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte.gz": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
errors = []

def idx(name, dims):
    raw = gzip.open(os.path.join(data, name)).read()
    got = hashlib.sha256(raw).hexdigest()
    if got != inflated[name]:
        errors.append(f"{name} inflates to SHA-256 {got}, expected {inflated[name]}")
    magic = bytes([0, 0, 8, len(dims)])
    header = magic + struct.pack(f">{len(dims)}I", *dims)
    if raw[:len(header)] != header:
        errors.append(f"{name}: header {raw[:len(header)].hex(' ')}, expected {header.hex(' ')}")
    n = 1
    for d in dims:
        n *= d
    if len(raw) != len(header) + n:
        errors.append(f"{name}: {len(raw)} bytes, expected {len(header)} + {n}")
    return raw[len(header):]

idx("train-images-idx3-ubyte.gz", (60000, 28, 28))
idx("t10k-images-idx3-ubyte.gz", (10000, 28, 28))
train = idx("train-labels-idx1-ubyte.gz", (60000,))
test = idx("t10k-labels-idx1-ubyte.gz", (10000,))
for name, labels, per_class in (("train", train, 6000), ("test", test, 1000)):
    if max(labels) > 9:
        errors.append(f"{name}: a label {max(labels)}, outside 0..9")
    counts = collections.Counter(labels)
    if any(counts[c] != per_class for c in range(10)):
        errors.append(f"{name}: labels per class {sorted(counts.items())}, expected {per_class} each")
# The validation split, the last 5,000 training images: its class counts, so that a
# reordered training file cannot pass for the same data.
validation = collections.Counter(train[55000:])
want = {0: 521, 1: 497, 2: 490, 3: 508, 4: 527, 5: 503, 6: 467, 7: 450, 8: 515, 9: 522}
if dict(validation) != want:
    errors.append(f"validation (last 5,000): labels per class {sorted(validation.items())}, expected {sorted(want.items())}")
for e in errors:
    print(f"FAIL: {e}", file=sys.stderr)
sys.exit(1 if errors else 0)
PY
echo "data.fashion_mnist: the four IDX files as pinned"
