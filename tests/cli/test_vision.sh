#!/usr/bin/env bash
# End-to-end tests of `qkv train vit`, `qkv train point` and `qkv classify`.
#   tests/cli/test_vision.sh PATH/TO/qkv
# On a synthetic data directory in fetch_data.sh fashion-mnist's layout, written here
# (gzipped IDX: 5,300 training images, the last 5,000 of them validation, and 60 test images of 28x28 whose class k is a bright row band
# at rows 2k..2k+1 — learnable in a few epochs), a tiny Vision Transformer trains, stops
# with --stop-at and resumes, and writes its directory; classify reads IDX (gzip and plain),
# PNG and PGM, with --labels, --json and --html; a tiny point model trains and classify
# shows its points; bad input of every kind fails with a
# message naming the problem, never a crash. Every check asserts; the script prints each
# failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_vision.sh PATH/TO/qkv}
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"

no_crash() {  # no_crash DESCRIPTION
  if [[ $status -lt 128 ]] && ! grep -Eq "terminate called|Segmentation|Aborted|core dumped" "$TMP/err"; then
    pass
  else
    fail "$1: crashed (status $status): $(head -c 400 "$TMP/err")"
  fi
}
fails() { expect_failure "$@"; no_crash "qkv ${*:2}"; }              # fails NEEDLE ARGS...
usage_fails() { expect_usage_error "$@"; no_crash "qkv ${*:2}"; }    # usage_fails NEEDLE ARGS...

DATA="$TMP/data"
mkdir -p "$DATA"
"$PYTHON" - "$DATA" "$TMP" <<'PY'
import gzip, random, struct, sys, zlib
data, tmp = sys.argv[1], sys.argv[2]
rng = random.Random(5)
def images(n, salt):
    px, labels = bytearray(), bytearray()
    for i in range(n):
        k = (i * 7 + salt) % 10
        for y in range(28):
            for x in range(28):
                px.append(230 if y // 2 == k + 2 else rng.randrange(40))
        labels.append(k)
    return px, labels
def idx(dims, payload, ndim_type=0x08):
    return struct.pack(">BBBB", 0, 0, ndim_type, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + bytes(payload)
for name, n, salt in (("train", 5300, 0), ("t10k", 60, 3)):  # the last 5,000 training images validate
    px, lab = images(n, salt)
    open(f"{data}/{name}-images-idx3-ubyte.gz", "wb").write(gzip.compress(idx((n, 28, 28), px)))
    open(f"{data}/{name}-labels-idx1-ubyte.gz", "wb").write(gzip.compress(idx((n,), lab)))
    if name == "t10k":
        open(f"{tmp}/test-plain.idx", "wb").write(idx((n, 28, 28), px))
        open(f"{tmp}/labels-plain.idx", "wb").write(idx((n,), lab))
        open(f"{tmp}/labels-short.idx", "wb").write(idx((n - 1,), lab[:-1]))
        bad = bytearray(lab); bad[4] = 12
        open(f"{tmp}/labels-range.idx", "wb").write(idx((n,), bad))
        one = px[:784]
        open(f"{tmp}/one.pgm", "wb").write(b"P5\n# a comment\n28 28\n255\n" + bytes(one))
        def chunk(t, b):
            return struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xffffffff)
        raw = b"".join(b"\0" + bytes(one[y * 28:(y + 1) * 28]) for y in range(28))
        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 0)) + \
              chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
        open(f"{tmp}/one.png", "wb").write(png)
        open(f"{tmp}/small.pgm", "wb").write(b"P5\n14 14\n255\n" + bytes(196))
        open(f"{tmp}/wrong-magic.idx", "wb").write(b"\x00\x00\x09\x03" + idx((n, 28, 28), px)[4:])
        open(f"{tmp}/truncated.gz", "wb").write(gzip.compress(idx((n, 28, 28), px))[:300])
        open(f"{tmp}/empty.idx", "wb").write(b"")
PY
TINY=(--dim 16 --layers 1 --heads 2 --mlp-dim 32 --patch-size 7 --batch 50 --lr 3e-3 --checkpoint-every 0 --quiet)

# --- train, interrupt, resume -----------------------------------------------------------
run train vit --data "$DATA" --out "$TMP/m" --epochs 3 --stop-at 8 "${TINY[@]}"
expect_status 130 "train vit --stop-at"
expect_in out "stopped at step 8" "stop message"
[[ -f $TMP/m/checkpoint.safetensors && ! -f $TMP/m/model.safetensors ]] && pass || fail "a stopped run leaves a checkpoint and no model"
run train vit --data "$DATA" --out "$TMP/m" --epochs 3 --resume "${TINY[@]}"
expect_status 0 "train vit --resume"
expect_in out "best validation accuracy" "the summary"
expect_in out "test accuracy" "the test accuracy"
[[ -f $TMP/m/model.safetensors && -f $TMP/m/config.json ]] && pass || fail "the model directory"
grep -q '"model_type": "qkv-vision"' "$TMP/m/config.json" && pass || fail "config.json model_type"
run train vit --data "$DATA" --out "$TMP/j" --epochs 1 --json --bf16 "${TINY[@]}"
expect_status 0 "train vit --json"
"$PYTHON" -c "import json,sys; j=json.loads(open(sys.argv[1]).read()); assert j['steps']==6 and 0<=j['test_accuracy']<=1 and len(j['validation_accuracy'])==1, j" "$TMP/out" && pass || fail "train --json: $(cat "$TMP/out")"
run train vit --data "$DATA" --out "$TMP/s" --epochs 1 --shifted-patches --patch-dropout 0.5 --patch-dropout-epochs 1 "${TINY[@]}"
expect_status 0 "train vit --shifted-patches --patch-dropout"
grep -q '"shifted_patches": true' "$TMP/s/config.json" && pass || fail "config.json records shifted patches"
grep -q '"patch_dropout": 0.5' "$TMP/s/config.json" && grep -q '"patch_dropout_epochs": 1' "$TMP/s/config.json" \
  && pass || fail "config.json's report records patch dropout"
run classify --model "$TMP/s" --images "$TMP/one.pgm" --json
expect_status 0 "classify with a shifted-patch model"

# --- classify ---------------------------------------------------------------------------
run classify --model "$TMP/m" --images "$DATA/t10k-images-idx3-ubyte.gz" --labels "$DATA/t10k-labels-idx1-ubyte.gz"
expect_status 0 "classify --labels"
expect_in out "^60 images of 28x28" "the header"
expect_in out "accuracy [0-9.]+% \([0-9]+ of 60\)" "the accuracy"
expect_in out "confusion matrix" "the confusion matrix"
expect_in out "\.\.\. 40 more" "the list is cut at 20"
ACC=$(grep -oE "accuracy [0-9.]+%" "$TMP/out")
run classify --model "$TMP/m" --images "$TMP/test-plain.idx" --labels "$TMP/labels-plain.idx" --list 0
expect_in out "$ACC" "plain IDX gives the accuracy of gzip"
run classify --model "$TMP/m" --images "$DATA/t10k-images-idx3-ubyte.gz" --labels "$DATA/t10k-labels-idx1-ubyte.gz" --json
expect_status 0 "classify --json"
"$PYTHON" - "$TMP/out" <<'PY' && pass || fail "classify --json lines"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 60, len(lines)
for i, l in enumerate(lines):
    j = json.loads(l)
    assert list(j) == ["index", "label", "class", "score", "truth"], j
    assert j["index"] == i and 0 <= j["label"] < 10 and 0 <= j["score"] <= 1 and isinstance(j["class"], str)
PY
expect_in err "accuracy" "--json: the summary on stderr"
run classify --model "$TMP/m" --images "$TMP/one.pgm" --json
PGM=$(cat "$TMP/out")
run classify --model "$TMP/m" --images "$TMP/one.png" --json
expect_status 0 "classify a PNG"
expect_equal out "$PGM" "the PNG and the PGM of one image classify alike"
run classify --model "$TMP/m" --images "$DATA/t10k-images-idx3-ubyte.gz" --html "$TMP/page.html" --html-images 5
expect_status 0 "classify --html"
grep -q 'id="qkv-image-data"' "$TMP/page.html" && pass || fail "the page holds its data"
"$PYTHON" - "$TMP/page.html" <<'PY' && pass || fail "the page's data: 5 images with 4x4 heat"
import json, re, sys
t = open(sys.argv[1]).read()
d = json.loads(re.search(r'id="qkv-image-data">(.*?)</script>', t, re.S).group(1))
assert len(d["images"]) == 5
for im in d["images"]:
    assert im["grid_h"] == im["grid_w"] == 4 and len(im["heat"]) == 16 and len(im["pixels"]) == 784
    assert 0 < sum(im["heat"]) < 1
PY

# --- the point model ----------------------------------------------------------------------
run train point --data "$DATA" --out "$TMP/p" --epochs 2 --points 48 --neighbors 6 --dim 16 --layers 1 \
    --batch 50 --lr 1e-2 --checkpoint-every 0 --quiet
expect_status 0 "train point"
expect_in out "training a Point Transformer on 300 Fashion-MNIST images" "the point model's header"
grep -q '"model": "point"' "$TMP/p/config.json" && pass || fail "config.json model point"
POINT_ACC=$(grep -oE "test accuracy [0-9.]+%" "$TMP/out" | grep -oE "[0-9.]+%")
run classify --model "$TMP/p" --images "$DATA/t10k-images-idx3-ubyte.gz" --labels "$DATA/t10k-labels-idx1-ubyte.gz" \
    --html "$TMP/points.html" --html-images 3
expect_status 0 "classify with a point model"
expect_in out "accuracy $POINT_ACC" "classify reproduces the point model's test accuracy"
"$PYTHON" - "$TMP/points.html" <<'PY' && pass || fail "the point page's data: 3 images, 48 points, 6 neighbours each"
import json, re, sys
t = open(sys.argv[1]).read()
d = json.loads(re.search(r'id="qkv-image-data">(.*?)</script>', t, re.S).group(1))
assert len(d["images"]) == 3
for im in d["images"]:
    assert "heat" not in im and len(im["points"]) == 96 and len(im["point_heat"]) == 48, im.keys()
    assert im["neighbors"] == 6 and len(im["neighbor"]) == 288 and all(0 <= j < 48 for j in im["neighbor"])
    rows = [sum(im["neighbor_weight"][6 * n:6 * n + 6]) for n in range(48)]
    assert all(abs(r - 1) < 1e-4 for r in rows), rows
    assert all(0 <= x <= 27 for x in im["points"])
PY
# The other model's options are unknown options of each subcommand.
usage_fails "unknown option --points; the options are --data" train vit --data "$DATA" --points 64
usage_fails "unknown option --neighbors; the options are --data" train vit --data "$DATA" --neighbors 4
usage_fails "--patch-size: must be odd (a window centred on each point), got 4" train point --data "$DATA" --patch-size 4
usage_fails "--patch-size: must be an integer in [1, 15], got '17'" train point --data "$DATA" --patch-size 17
usage_fails "unknown option --shifted-patches; the options are --data" train point --data "$DATA" --shifted-patches
usage_fails "unknown option --erase; the options are --data" train point --data "$DATA" --erase 0.25
usage_fails "unknown option --mlp-dim; the options are --data" train point --data "$DATA" --mlp-dim 32
usage_fails "unknown option --heads; the options are --data" train point --data "$DATA" --heads 2
usage_fails "unknown option --positions; the options are --data" train point --data "$DATA" --positions sincos
usage_fails "--erase: must be a finite number in [0, 1], got" train vit --data "$DATA" --erase 1.5
usage_fails "unknown option --patch-dropout; the options are --data" train point --data "$DATA" --patch-dropout 0.25
usage_fails "--patch-dropout: must be a finite number in [0, 1), got" train vit --data "$DATA" --patch-dropout 1
usage_fails "--patch-dropout" train vit --data "$DATA" --patch-dropout nan
usage_fails "--patch-dropout-epochs" train vit --data "$DATA" --epochs 3 --patch-dropout 0.5 --patch-dropout-epochs 4
usage_fails "unknown option --patch-dropout-epochs; the options are --data" \
  train point --data "$DATA" --patch-dropout-epochs 1
usage_fails "given without --patch-dropout" train vit --data "$DATA" --epochs 3 --patch-dropout-epochs 2
usage_fails "--shifted-patches" train vit --data "$DATA" --patch-size 1 --shifted-patches
usage_fails "--neighbors" train point --data "$DATA" --points 8 --neighbors 9

# --- bad input --------------------------------------------------------------------------
fails "images are 14x14, the model takes 28x28" classify --model "$TMP/m" --images "$TMP/small.pgm"
fails "wrong-magic.idx" classify --model "$TMP/m" --images "$TMP/wrong-magic.idx"
fails "truncated.gz" classify --model "$TMP/m" --images "$TMP/truncated.gz"
fails "empty.idx" classify --model "$TMP/m" --images "$TMP/empty.idx"
fails "59 labels for 60 images" classify --model "$TMP/m" --images "$TMP/test-plain.idx" --labels "$TMP/labels-short.idx"
fails "labels-range.idx" classify --model "$TMP/m" --images "$TMP/test-plain.idx" --labels "$TMP/labels-range.idx"
fails "no-such" classify --model "$TMP/m" --images "$TMP/no-such.idx"
mkdir -p "$TMP/other" && echo '{"model_type": "qkv-recommender"}' > "$TMP/other/config.json"
fails "not a qkv image classifier" classify --model "$TMP/other" --images "$TMP/one.pgm"
usage_fails "--images" classify --model "$TMP/m"
usage_fails "--images" classify --model "$TMP/m" --images ""
fails "not a directory" train vit --data "$TMP/nowhere" --out "$TMP/x" "${TINY[@]}"
usage_fails "--data" train vit --out "$TMP/x"
usage_fails "--patch-size" train vit --data "$DATA" --patch-size 5
usage_fails "--heads" train vit --data "$DATA" --dim 30 --heads 4
usage_fails "--batch: must be an integer in [1, 65536], got '0'" train vit --data "$DATA" --batch 0
usage_fails "--positions: must be one of learned, sincos, got 'foo'" train vit --data "$DATA" --positions foo
# One subcommand per model: --model is gone; another task's options are unknown.
usage_fails "unknown option --model; the options are --data" train vit --data "$DATA" --model point
usage_fails "unknown option --model; the options are --data" train point --data "$DATA" --model vit
usage_fails "unknown option --steps; the options are --data" train vit --data "$DATA" --steps 10
usage_fails "unknown option --patch-size; the options are --steps" train dates --patch-size 4
usage_fails "unknown option --model; the options are --data" train mf --data "$DATA" --model vit
usage_fails "unknown option --shifted-patches; the options are --data" train mf --data "$DATA" --shifted-patches
usage_fails "unknown option --patch-sise (did you mean --patch-size?)" train vit --data "$DATA" --patch-sise 7
# The old spelling names the new one.
usage_fails "'qkv train vision' is now 'qkv train vit'" train vision --data "$DATA" --out "$TMP/x"
usage_fails "'qkv train vision' is now 'qkv train vit'" train vision --data "$DATA" --model vit --out "$TMP/x"
usage_fails "'qkv train vision' is now 'qkv train point'" train vision --data "$DATA" --model point --out "$TMP/x"
[[ ! -e $TMP/x ]] && pass || fail "a refused training wrote $TMP/x"
fails "was written by a run with other options (batch" train vit --data "$DATA" --out "$TMP/m" --epochs 3 --resume --dim 32 --layers 1 --heads 2 --mlp-dim 32 --patch-size 7 --quiet
fails "was written by a run with other options (config" train vit --data "$DATA" --out "$TMP/m" --epochs 3 --resume --shifted-patches "${TINY[@]}"

echo "test_vision: $checks checks, $failures failures"
[[ $failures -eq 0 ]]
