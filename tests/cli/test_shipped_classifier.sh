#!/usr/bin/env bash
# A shipped image classifier (models/fashion-vit, the Vision Transformer; models/fashion-point,
# the Point Transformer): qkv classify on the 10,000 Fashion-MNIST test images gives exactly
# the test accuracy its config.json records (the number its README and BENCHMARKS.md quote);
# on the first 1,000 (one pass of the full set is the slow part; the agreements need no more)
# its --json lines are the full run's, agree with the text output, the Python Classifier gives
# the same labels, and --tta's labels are the argmax of the mean of each image's and its
# mirror image's probabilities.
#   tests/cli/test_shipped_classifier.sh PATH/TO/qkv FETCH_DATA_SH MODEL_DIR [PYTHONPATH]
set -u
QKV=${1:?usage: test_shipped_classifier.sh PATH/TO/qkv FETCH_DATA_SH MODEL_DIR [PYTHONPATH]}
FETCH=${2:?}
MODEL=${3:?}
PYPATH=${4:-}
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"

"$FETCH" fashion-mnist "$TMP/data" >/dev/null || { echo "fetch_data.sh fashion-mnist failed"; exit 1; }
WANT=$("$PYTHON" -c "import json,sys; print('%.2f' % (100 * json.load(open(sys.argv[1]))['report']['test_accuracy']))" "$MODEL/config.json")
IMAGES=$TMP/data/t10k-images-idx3-ubyte.gz LABELS=$TMP/data/t10k-labels-idx1-ubyte.gz
# The recorded accuracy, on all 10,000 test images (one pass).
run classify --model "$MODEL" --images "$IMAGES" --labels "$LABELS" --json
expect_status 0 "classify --json the test set"
"$PYTHON" - "$TMP/out" "$WANT" <<'PY' && pass || fail "--json: 10,000 lines whose accuracy is the recorded one"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 10000
acc = sum(l["label"] == l["truth"] for l in lines) / 100
assert "%.2f" % acc == sys.argv[2], (acc, sys.argv[2])
PY
cp "$TMP/out" "$TMP/all.jsonl"
# The front ends agree, on the first 1,000 test images (a plain IDX pair written here): the
# text output's accuracy is the --json lines', the Python Classifier's labels theirs, --tta's.
SUBSET=1000
"$PYTHON" - "$IMAGES" "$LABELS" "$TMP/subset" $SUBSET <<'PY' || { echo "cannot write the subset"; exit 1; }
import gzip, struct, sys
images, labels, out, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
data = gzip.open(images).read()
rows, cols = struct.unpack(">II", data[8:16])
open(out + "-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, n, rows, cols) + data[16:16 + n * rows * cols])
data = gzip.open(labels).read()
open(out + "-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, n) + data[8:8 + n])
PY
SUB_IMAGES=$TMP/subset-images-idx3-ubyte SUB_LABELS=$TMP/subset-labels-idx1-ubyte
run classify --model "$MODEL" --images "$SUB_IMAGES" --labels "$SUB_LABELS" --json
expect_status 0 "classify --json the subset"
"$PYTHON" - "$TMP/out" "$TMP/all.jsonl" $SUBSET <<'PY' && pass || fail "the subset's --json lines are the first lines of the full set's"
import sys
sub, full, n = open(sys.argv[1]).read().splitlines(), open(sys.argv[2]).read().splitlines(), int(sys.argv[3])
assert len(sub) == n and sub == full[:n]
PY
SUB_WANT=$("$PYTHON" -c "import json,sys; l=[json.loads(x) for x in open(sys.argv[1])]; print('%.2f' % (100 * sum(x['label'] == x['truth'] for x in l) / len(l)))" "$TMP/out")
cp "$TMP/out" "$TMP/subset.jsonl"
run classify --model "$MODEL" --images "$SUB_IMAGES" --labels "$SUB_LABELS" --list 0
expect_status 0 "classify the subset"
expect_in out "^accuracy $SUB_WANT% " "the text output's accuracy is the --json lines' ($SUB_WANT%)"
if [[ -n $PYPATH ]]; then
  PYTHONPATH="$PYPATH" "$PYTHON" - "$MODEL" "$SUB_IMAGES" "$TMP/subset.jsonl" <<'PY' && pass || fail "qkv.vision.Classifier agrees with qkv classify"
import json, sys
import qkv.vision as v
c = v.Classifier(sys.argv[1])
images = v.read_images(sys.argv[2])
got = c.predict(images)
want = [json.loads(l)["label"] for l in open(sys.argv[3])]
assert list(got) == want
PY
  # --tta: the mean of each image's probabilities and its mirror image's, mirrored by NumPy here
  run classify --model "$MODEL" --images "$SUB_IMAGES" --labels "$SUB_LABELS" --json --tta
  expect_status 0 "classify --json --tta"
  PYTHONPATH="$PYPATH" "$PYTHON" - "$MODEL" "$SUB_IMAGES" "$TMP/out" <<'PY' && pass || fail "qkv classify --tta is the mean of an image's and its mirror's probabilities"
import json, sys
import numpy as np
import qkv.vision as v
c = v.Classifier(sys.argv[1])
images = v.read_images(sys.argv[2])
want = (c.predict_proba(images) + c.predict_proba(np.ascontiguousarray(images[:, :, ::-1]))) / 2
got = [json.loads(l)["label"] for l in open(sys.argv[3])]
assert got == list(want.argmax(axis=1)), "labels differ"
truth = [json.loads(l)["truth"] for l in open(sys.argv[3])]
print("with --tta, first %d images: accuracy %.2f%%" % (len(got), 100 * np.mean(np.array(got) == np.array(truth))))
PY
fi
echo "test_shipped_classifier $MODEL: $checks checks, $failures failures"
[[ $failures -eq 0 ]]
