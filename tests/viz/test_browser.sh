#!/usr/bin/env bash
# The attention page in a real browser. `qkv run --html` on a synthetic BERT checkpoint
# (tests/python/test_bert.py), then Debian's Chromium, headless, takes a screenshot and dumps
# the DOM after the page's script ran. Checks, each asserting:
#   - the screenshot is not blank: many colours, enough non-background pixels, and the
#     darkest colour of the heatmap ramp and head 0's colour both present;
#   - the DOM after scripts: body data-rendered="1", and the views drawn (head toggles,
#     head-view lines, one detail cell per (query, key), one thumbnail per layer and head);
#   - the numbers embedded in the page equal the attentions.N tensors of --output to 1e-5,
#     and its tokens the encoding's.
# Chromium is installed by `scripts/setup.sh test` (make test); without it this test FAILS.
#   tests/viz/test_browser.sh PATH/TO/qkv
set -u

QKV=${1:?usage: test_browser.sh PATH/TO/qkv}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

source "$HERE/../cli/lib.sh"
source "$HERE/chrome.sh" browser  # CHROMIUM and chrome ARGS... URL

M="$TMP/bert"
if ! "$PYTHON" "$HERE/../python/test_bert.py" write "$M" 2>"$TMP/err"; then
  fail "writing the synthetic checkpoint: $(cat "$TMP/err")"
  finish browser
fi

run run --model "$M" --text "the cat sat on the mat" --pair "a dog plays" \
  --html "$TMP/page.html" --output "$TMP/out.safetensors"
expect_status 0 "qkv run --html --output"
expect_in out "^wrote .*/page\.html " "run --html reports the page"
[[ -s "$TMP/page.html" ]] || { fail "no page written"; finish browser; }

if chrome --screenshot="$TMP/shot.png" --window-size=1200,900 "file://$TMP/page.html" >/dev/null \
  && [[ -s "$TMP/shot.png" ]]; then pass; else
  fail "chromium --screenshot: $(tail -c 600 "$TMP/chrome.err")"
fi
if chrome --dump-dom "file://$TMP/page.html" >"$TMP/dom.html" && [[ -s "$TMP/dom.html" ]]; then
  pass
else
  fail "chromium --dump-dom: $(tail -c 600 "$TMP/chrome.err")"
fi

# Interaction: a copy of the page with a script that runs after the page's own, clicks a
# thumbnail, hovers a token and a cell, toggles heads, and records what went wrong in body
# data-interaction ("ok" when nothing did).
"$PYTHON" - "$TMP/page.html" "$TMP/interact.html" <<'EOF'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
script = r"""<script>
(function () {
  var bad = [];
  function check(ok, what) { if (!ok) bad.push(what); }
  function $(s) { return document.querySelector(s); }
  function $$(s) { return document.querySelectorAll(s); }
  try {
    var data = JSON.parse($("#qkv-attention-data").textContent);
    var H = $$("#qkv-heads button.head").length, thumbs = $$("#qkv-grid canvas");
    var Lk = data.groups[0].key_tokens.length;
    thumbs[1 * H + 2].dispatchEvent(new MouseEvent("click", { bubbles: true }));
    check($("#qkv-layer").value === "1", "layer select after a thumbnail click");
    check(/layer 1, head 2$/.test($("#qkv-detail-title").textContent),
          "detail title: " + $("#qkv-detail-title").textContent);
    check($$("#qkv-heads button.head.off").length === H - 1, "only head 2 on after the click");
    check($$("#qkv-grid canvas.sel").length === 1 && thumbs[1 * H + 2].classList.contains("sel"),
          "thumbnail outline");
    var all = $$("#qkv-lines line").length;
    var token = $('#qkv-lines .tok[data-side="q"][data-i="2"]');
    token.dispatchEvent(new MouseEvent("mouseenter"));
    var lines = $$("#qkv-lines line"), y1 = {};
    lines.forEach(function (l) { y1[l.getAttribute("y1")] = true; });
    check(lines.length >= 1 && lines.length <= Lk && Object.keys(y1).length === 1,
          "hovering query 2 keeps its lines only: " + lines.length);
    check(token.classList.contains("hl"), "hovered token highlighted");
    token.dispatchEvent(new MouseEvent("mouseleave"));
    check($$("#qkv-lines line").length === all, "all lines back after the hover");
    $("#qkv-heads button.all").click();
    check($$("#qkv-heads button.head.off").length === 0, "'all' turns every head on");
    check($$("#qkv-lines line").length > all, "more lines with every head on");
    $$("#qkv-heads button.head")[0].click();
    check($$("#qkv-heads button.head.off").length === 1, "a head toggles off");
    var cell = $('#qkv-heatmap td.c[data-i="1"][data-j="3"]');
    cell.dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
    var p = data.groups[0].attention[1][2][1][3];
    var shown = parseFloat(cell.title.split(": ").pop());
    check($("#qkv-readout").textContent === cell.title && / key 3 /.test(cell.title) &&
          Math.abs(shown - p) <= 5e-4 * p, "tooltip " + cell.title + " vs " + p);  // 4 digits
  } catch (e) { bad.push("exception: " + e); }
  document.body.dataset.interaction = bad.length ? bad.join("; ") : "ok";
})();
</script>
"""
at = page.rindex("</body>")
open(sys.argv[2], "w", encoding="utf-8").write(page[:at] + script + page[at:])
EOF
if chrome --dump-dom "file://$TMP/interact.html" >"$TMP/interact_dom.html" &&
  grep -q '<body [^>]*data-interaction="ok"' "$TMP/interact_dom.html"; then pass; else
  fail "interaction: $(grep -o 'data-interaction="[^"]*"' "$TMP/interact_dom.html")"
fi

# The screenshot is not blank (tests/viz/screenshot_check.py says how that is judged).
if "$PYTHON" "$HERE/screenshot_check.py" "$TMP/shot.png"; then pass; else fail "screenshot contents"; fi

# The DOM after the scripts ran, and the embedded numbers against --output.
if "$PYTHON" - "$TMP/dom.html" "$TMP/page.html" "$TMP/out.safetensors" <<'EOF'; then pass; else fail "DOM or embedded data"; fi
import json, re, struct, sys
import numpy as np

dom = open(sys.argv[1], encoding="utf-8").read()
page = open(sys.argv[2], encoding="utf-8").read()
body = re.search(r"<body[^>]*>", dom).group(0)
assert 'data-rendered="1"' in body, f"the page's script did not finish: {body}"
assert re.search(r'<div id="qkv-error" hidden="">', dom), "the error box is shown"

m = re.search(r'<script type="application/json" id="qkv-attention-data">(.*?)</script>', page, re.S)
data = json.loads(m.group(1))
assert [g["name"] for g in data["groups"]] == ["self-attention"], data["groups"]
g = data["groups"][0]
attention = np.array(g["attention"], dtype=np.float64)  # (layers, H, L, L)
layers, H, L, _ = attention.shape

# The views: H head toggles (+ "all"), lines in the head view, L·L detail cells,
# layers·H thumbnails in the model view.
buttons = re.findall(r'<button class="head[ "]', dom)
assert len(buttons) == H, f"{len(buttons)} head toggles, expected {H}"
svg = re.search(r'<svg id="qkv-lines".*?</svg>', dom, re.S).group(0)
assert svg.count("<line ") >= L, f"{svg.count('<line ')} lines in the head view"
assert svg.count('class="tok"') == 2 * L, "token labels in the head view"
cells = len(re.findall(r'<td class="c"', dom))
assert cells == L * L, f"{cells} detail cells, expected {L * L}"
grid = re.search(r'<div id="qkv-grid".*?</section>', dom, re.S).group(0)
assert grid.count("<canvas") == layers * H, f"{grid.count('<canvas')} thumbnails"
for url in re.findall(r'(?:src|href)="([^"]*)"', dom):
    assert not re.match(r"[a-z]+:", url), f"the DOM refers to {url}"

raw = open(sys.argv[3], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
buffer = raw[8 + n:]
def tensor(name):
    info = header[name]
    assert info["dtype"] == "F32", info
    b, e = info["data_offsets"]
    return np.frombuffer(buffer[b:e], dtype="<f4").reshape(info["shape"]).astype(np.float64)
names = sorted((k for k in header if k.startswith("attentions.")), key=lambda k: int(k.split(".")[1]))
assert len(names) == layers, (names, layers)
worst = 0.0
for n_, name in enumerate(names):
    want = tensor(name)[0]  # (H, L, L)
    assert want.shape == attention[n_].shape, (want.shape, attention[n_].shape)
    worst = max(worst, float(np.abs(want - attention[n_]).max()))
print(f"embedded attention vs {len(names)} attentions.N tensors: max |diff| {worst:.2e}")
# The page keeps 6 significant digits (relative 5e-6); the viewer reads them at 1e-5.
assert worst <= 1e-5, worst
tokens = header["__metadata__"]["tokens"].split(" ")
assert g["query_tokens"] == tokens and g["key_tokens"] == tokens, (g["query_tokens"], tokens)
assert "dog" in tokens and tokens[0] == "[CLS]"
EOF

# ---------------------------------------------------------------------------------------
# The page of `qkv translate --html` (the embedded date model, three groups of attention):
# drawn, not blank, and its numbers equal to the model's own probabilities, computed
# again through the Python module from the same weights (models/dates).
ROOT=$(cd "$HERE/../.." && pwd)
DATE="Saturday, 21 November 2026"
run translate --html "$TMP/dates.html" "$DATE"
expect_status 0 "qkv translate --html"
expect_equal out "$(printf '2026-11-21\nwrote %s (every layer and head of "%s")' "$TMP/dates.html" "$DATE")" \
  "translate --html output"
if chrome --screenshot="$TMP/dates.png" --window-size=1200,900 "file://$TMP/dates.html" >/dev/null &&
  "$PYTHON" "$HERE/screenshot_check.py" "$TMP/dates.png"; then pass; else
  fail "translate page screenshot: $(tail -c 600 "$TMP/chrome.err")"
fi
if chrome --dump-dom "file://$TMP/dates.html" >"$TMP/dates_dom.html" &&
  grep -q '<body [^>]*data-rendered="1"' "$TMP/dates_dom.html"; then pass; else
  fail "translate page: the script did not finish drawing"
fi
if QKV_BUILD_PYTHON="$(dirname "$QKV")/python" "$PYTHON" - "$TMP/dates.html" "$ROOT/models/dates" "$DATE" <<'EOF'; then pass; else fail "translate page numbers"; fi
import json, os, re, sys
import numpy as np
sys.path.insert(0, os.environ["QKV_BUILD_PYTHON"])
import qkv

page = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'<script type="application/json" id="qkv-attention-data">(.*?)</script>', page, re.S)
groups = {g["name"]: g for g in json.loads(m.group(1))["groups"]}
assert list(groups) == ["encoder self-attention", "decoder masked self-attention",
                        "cross-attention"], list(groups)
model = qkv._qkv._Seq2Seq.load(sys.argv[2])
text = sys.argv[3]
src = qkv._qkv._dates_encode(text)
out, problem = qkv._qkv._dates_translate(model, [text])[0]  # (answer, why it was refused)
assert out == "2026-11-21" and problem == "", (out, problem)
tgt_in = [1] + qkv._qkv._dates_encode(out)  # <s> + the output characters
want = model.attention(np.array([src]), [len(src)], np.array([tgt_in]))
assert groups["cross-attention"]["key_tokens"] == ["␣" if c == " " else c for c in text]
worst = 0.0
for name, key in (("encoder self-attention", "encoder_self"),
                  ("decoder masked self-attention", "decoder_self"), ("cross-attention", "cross")):
    got = np.array(groups[name]["attention"], dtype=np.float64)  # (layers, H, Lq, Lk)
    ref = np.stack([a[0] for a in want[key]])
    assert got.shape == ref.shape, (name, got.shape, ref.shape)
    worst = max(worst, float(np.abs(got - ref).max()))
print(f"translate page vs the model's probabilities: max |diff| {worst:.2e}")
assert worst <= 1e-5, worst  # 6 significant digits in the page
EOF

finish browser
