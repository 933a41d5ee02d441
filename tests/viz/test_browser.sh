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

CHROMIUM=$(command -v chromium || true)
if [[ -z $CHROMIUM ]]; then
  fail "chromium is not installed; 'scripts/setup.sh test' (make test) installs it"
  finish browser
fi

# chrome ARGS... URL: one headless run with a fresh profile, nothing fetched in the background.
chrome() {
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$(mktemp -d -p "$TMP")" "$@" 2>>"$TMP/chrome.err"
}

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

# The screenshot, decoded here (zlib + the PNG row filters; no imaging library).
if "$PYTHON" - "$TMP/shot.png" <<'EOF'; then pass; else fail "screenshot contents"; fi
import struct, sys, zlib
from collections import Counter

data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, header = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        header = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
width, height, depth, colour_type, _, _, interlace = header
assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
bpp = 4 if colour_type == 6 else 3
raw = zlib.decompress(idat)
stride = width * bpp
assert len(raw) == height * (stride + 1), (len(raw), width, height)
prev = bytearray(stride)
pixels = Counter()
for y in range(height):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    if f == 1:
        for i in range(bpp, stride):
            line[i] = (line[i] + line[i - bpp]) & 255
    elif f == 2:
        for i in range(stride):
            line[i] = (line[i] + prev[i]) & 255
    elif f == 3:
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
    elif f == 4:
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    else:
        assert f == 0, f"filter {f}"
    pixels.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp))
    prev = line
total = width * height
background, most = pixels.most_common(1)[0]
others = 1 - most / total
print(f"screenshot {width}x{height}: {len(pixels)} colours, background #{background.hex()}, "
      f"{others:.1%} other pixels")
assert (width, height) == (1200, 900), (width, height)
assert len(pixels) > 50, f"only {len(pixels)} colours: a blank page?"
assert others > 0.10, f"only {others:.1%} of pixels differ from the background"
# The detail heatmap's largest cell is drawn in the top of the ramp (#08306b), the head-0
# toggle in category10's #1f77b4: both must be on screen in solid areas.
for name, rgb in (("heatmap maximum", b"\x08\x30\x6b"), ("head 0 colour", b"\x1f\x77\xb4")):
    assert pixels[rgb] >= 50, f"{name} #{rgb.hex()} covers {pixels[rgb]} pixels"
EOF

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

finish browser
