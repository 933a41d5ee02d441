#!/usr/bin/env bash
# A shipped image classifier (models/fashion-vit, the Vision Transformer; models/fashion-point,
# the Point Transformer): qkv classify on the 10,000 Fashion-MNIST test images gives exactly
# the test accuracy its config.json records (the number its README and BENCHMARKS.md quote),
# its --json lines agree with the text output, the Python Classifier gives the same labels, and
# --tta's labels are the argmax of the mean of each image's and its mirror image's probabilities.
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
run classify --model "$MODEL" --images "$TMP/data/t10k-images-idx3-ubyte.gz" --labels "$TMP/data/t10k-labels-idx1-ubyte.gz" --list 0
expect_status 0 "classify the test set"
expect_in out "^accuracy $WANT% " "the accuracy config.json records ($WANT%)"
run classify --model "$MODEL" --images "$TMP/data/t10k-images-idx3-ubyte.gz" --labels "$TMP/data/t10k-labels-idx1-ubyte.gz" --json
expect_status 0 "classify --json"
"$PYTHON" - "$TMP/out" "$WANT" <<'PY' && pass || fail "--json: 10,000 lines whose accuracy is the recorded one"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 10000
acc = sum(l["label"] == l["truth"] for l in lines) / 100
assert "%.2f" % acc == sys.argv[2], (acc, sys.argv[2])
PY
if [[ -n $PYPATH ]]; then
  PYTHONPATH="$PYPATH" "$PYTHON" - "$MODEL" "$TMP/data" "$TMP/out" <<'PY' && pass || fail "qkv.vision.Classifier agrees with qkv classify"
import json, sys
import qkv.vision as v
c = v.Classifier(sys.argv[1])
images = v.read_images(sys.argv[2] + "/t10k-images-idx3-ubyte.gz")
got = c.predict(images)
want = [json.loads(l)["label"] for l in open(sys.argv[3])]
assert list(got) == want
PY
  # --tta: the mean of each image's probabilities and its mirror image's, mirrored by NumPy here
  run classify --model "$MODEL" --images "$TMP/data/t10k-images-idx3-ubyte.gz" --labels "$TMP/data/t10k-labels-idx1-ubyte.gz" --json --tta
  expect_status 0 "classify --json --tta"
  PYTHONPATH="$PYPATH" "$PYTHON" - "$MODEL" "$TMP/data" "$TMP/out" <<'PY' && pass || fail "qkv classify --tta is the mean of an image's and its mirror's probabilities"
import json, sys
import numpy as np
import qkv.vision as v
c = v.Classifier(sys.argv[1])
images = v.read_images(sys.argv[2] + "/t10k-images-idx3-ubyte.gz")
want = (c.predict_proba(images) + c.predict_proba(np.ascontiguousarray(images[:, :, ::-1]))) / 2
got = [json.loads(l)["label"] for l in open(sys.argv[3])]
assert got == list(want.argmax(axis=1)), "labels differ"
truth = [json.loads(l)["truth"] for l in open(sys.argv[3])]
print("with --tta: accuracy %.2f%%" % (100 * np.mean(np.array(got) == np.array(truth))))
PY
fi
echo "test_shipped_classifier $MODEL: $checks checks, $failures failures"
[[ $failures -eq 0 ]]
