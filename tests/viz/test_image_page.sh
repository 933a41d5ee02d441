#!/usr/bin/env bash
# The image page of `qkv classify --html` in a real browser, on the embedded models/fashion-vit
# (and models/fashion-point) and twelve garment-like 28x28 images written here (trousers, a
# T-shirt, a bag, a sneaker, a boot, a dress, twice; the model gets some wrong). Headless
# Chromium draws the page; a script injected after the page's own reads back what is drawn
# and records it in body data attributes; the screenshot shows the composite. Checks, each
# asserting:
#   - the title names the model ("Vision Transformer · fashion-vit"), not a path;
#   - --show-images 5,0,9: three cards, captioned #5, #0, #9 in that order; --misclassified
#     --html-images 3: the first three images `qkv classify --json` says are wrong;
#   - the overlay canvas (canvas.heat) is transparent where the heat is least and never
#     opaque: each patch's alpha is 255·opacity·t (t the patch's heat between the image's
#     smallest and largest) to within 2, some pixels' alpha is 0, each image's largest patch
#     reaches the full opacity, and the colours vary (a ramp, not one colour);
#   - the image beneath (canvas.image) is the image's grey levels themselves;
#   - on the screenshot, each image's pixels show many grey levels that follow the image's
#     own (the image reads through the overlay) and many colours;
#   - the options' errors: an index out of range named with the file's count, --misclassified
#     without --labels, either without --html, both at once.
# Chromium: tests/viz/chrome.sh (without it this test FAILS).
#   tests/viz/test_image_page.sh PATH/TO/qkv
set -u

QKV=${1:?usage: test_image_page.sh PATH/TO/qkv}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

source "$HERE/../cli/lib.sh"
source "$HERE/chrome.sh" image_page  # CHROMIUM and chrome ARGS... URL
WINDOW=(--window-size=1000,800 --hide-scrollbars)  # the same layout for the DOM and the screenshot

"$PYTHON" - "$TMP" <<'PY'
import gzip, random, struct, sys
out = sys.argv[1]
rng = random.Random(3)
def canvas(): return [[0] * 28 for _ in range(28)]
def fill(img, y0, y1, x0, x1, v):  # a noisy rectangle, as a photographed garment is
    for y in range(y0, y1):
        for x in range(x0, x1):
            img[y][x] = max(0, min(255, v + rng.randrange(-25, 26)))
def trouser():
    i = canvas(); fill(i, 2, 6, 8, 20, 200); fill(i, 6, 27, 8, 13, 190); fill(i, 6, 27, 15, 20, 190); return i
def tshirt():
    i = canvas(); fill(i, 4, 9, 3, 25, 170); fill(i, 4, 26, 8, 20, 180); fill(i, 4, 6, 12, 16, 0); return i
def bag():
    i = canvas(); fill(i, 11, 26, 4, 24, 150)
    for y in range(4, 11): fill(i, y, y + 1, 9, 11, 120); fill(i, y, y + 1, 17, 19, 120)
    fill(i, 4, 6, 9, 19, 120); return i
def sneaker():
    i = canvas(); fill(i, 14, 20, 3, 25, 160); fill(i, 10, 14, 3, 14, 170); fill(i, 20, 22, 2, 26, 230); return i
def boot():
    i = canvas(); fill(i, 3, 22, 8, 17, 120); fill(i, 15, 22, 8, 25, 130); fill(i, 22, 25, 7, 26, 60); return i
def dress():
    i = canvas()
    for y in range(2, 27):
        h = 3 + (y - 2) * 8 // 25; fill(i, y, y + 1, 14 - h, 14 + h, 175)
    return i
shapes = [(trouser, 1), (tshirt, 0), (bag, 8), (sneaker, 7), (boot, 9), (dress, 3)]
px, labels = bytearray(), bytearray()
for f, k in shapes + shapes:
    for row in f(): px += bytes(row)
    labels.append(k)
def idx(dims, payload):
    return struct.pack(">BBBB", 0, 0, 8, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + bytes(payload)
open(f"{out}/images.gz", "wb").write(gzip.compress(idx((len(labels), 28, 28), px)))
open(f"{out}/labels.gz", "wb").write(gzip.compress(idx((len(labels),), labels)))
PY

VIT=(classify --model "$ROOT/models/fashion-vit" --images "$TMP/images.gz")
run "${VIT[@]}" --labels "$TMP/labels.gz" --json
expect_status 0 "classify --json"
cp "$TMP/out" "$TMP/predictions.jsonl"
run "${VIT[@]}" --labels "$TMP/labels.gz" --show-images 5,0,9 --html "$TMP/show.html"
expect_status 0 "classify --show-images 5,0,9 --html"
run "${VIT[@]}" --labels "$TMP/labels.gz" --misclassified --html-images 3 --html "$TMP/wrong.html"
expect_status 0 "classify --misclassified --html"
run classify --model "$ROOT/models/fashion-point" --images "$TMP/images.gz" --show-images 1,4 --html "$TMP/point.html"
expect_status 0 "classify a point model --html"

usage_fails() { expect_usage_error "$@"; }
usage_fails "--show-images: image 12 is outside [0, 12)" "${VIT[@]}" --show-images 3,12 --html "$TMP/x.html"
expect_in err "images.gz holds 12 images" "the error names the file's count"
usage_fails "--misclassified: needs --labels" "${VIT[@]}" --misclassified --html "$TMP/x.html"
usage_fails "--show-images: picks the images of the --html page" "${VIT[@]}" --show-images 1
usage_fails "--misclassified: picks the images of the --html page" "${VIT[@]}" --labels "$TMP/labels.gz" --misclassified
usage_fails "both pick the page's images" "${VIT[@]}" --labels "$TMP/labels.gz" --misclassified --show-images 1 --html "$TMP/x.html"
usage_fails "'x' is not an image index" "${VIT[@]}" --show-images 1,x --html "$TMP/x.html"

# The injected script: runs after the page's, reads every card's canvases back and records,
# as JSON in body data-drawn, what is on them (see the checks below).
for page in show wrong point; do
  "$PYTHON" - "$TMP/$page.html" "$TMP/$page-read.html" <<'EOF'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
script = r"""<script>
(function () {
  var out = {cards: []};
  try {
    var data = JSON.parse(document.getElementById("qkv-image-data").textContent);
    var op = document.getElementById("qkv-opacity").value / 100;
    out.title = document.querySelector("h1").textContent;
    out.error = document.getElementById("qkv-error").hidden ? "" : document.getElementById("qkv-error").textContent;
    document.querySelectorAll(".card").forEach(function (card, n) {
      var im = data.images[n], base = card.querySelector("canvas.image"), heat = card.querySelector("canvas.heat");
      var r = {caption: card.querySelector(".cap").textContent, rect: heat.getBoundingClientRect().toJSON(),
               alpha: {}, colours: {}, grey_ok: true, greys: {}, patch_err: 0, max_alpha: 0};
      var W = heat.width, H = heat.height, s = W / im.width;
      var h = heat.getContext("2d").getImageData(0, 0, W, H).data;
      var b = base.getContext("2d").getImageData(0, 0, W, H).data;
      for (var i = 0; i < W * H; i++) {
        var a = h[4 * i + 3];
        r.alpha[a] = (r.alpha[a] || 0) + 1;
        // colours quantised to 16 levels a channel, where alpha is high enough for the
        // colour to be read back to within a few levels (canvas stores it premultiplied)
        if (a >= 32) r.colours[(h[4 * i] >> 4) + "," + (h[4 * i + 1] >> 4) + "," + (h[4 * i + 2] >> 4)] = 1;
        if (a > r.max_alpha) { r.max_alpha = a; r.top_colour = [h[4 * i], h[4 * i + 1], h[4 * i + 2]]; }
      }
      // the image beneath: pixel (y, x)'s grey level at the centre of its s×s square
      for (var y = 0; y < im.height; y++) for (var x = 0; x < im.width; x++) {
        var k = 4 * ((Math.floor((y + 0.5) * s)) * W + Math.floor((x + 0.5) * s)), p = im.pixels[y * im.width + x];
        if (b[k] !== p || b[k + 1] !== p || b[k + 2] !== p || b[k + 3] !== 255) r.grey_ok = false;
        r.greys[b[k]] = 1;
      }
      // a patch's alpha against 255·opacity·t, t its heat between the image's min and max
      if (!im.points) {
        var lo = Math.min.apply(null, im.heat), hi = Math.max.apply(null, im.heat);
        for (var gy = 0; gy < im.grid_h; gy++) for (var gx = 0; gx < im.grid_w; gx++) {
          var cy = Math.floor((gy + 0.5) * H / im.grid_h), cx = Math.floor((gx + 0.5) * W / im.grid_w);
          var t = (im.heat[gy * im.grid_w + gx] - lo) / (hi - lo);
          r.patch_err = Math.max(r.patch_err, Math.abs(h[4 * (cy * W + cx) + 3] - 255 * op * t));
        }
      }
      r.colours = Object.keys(r.colours).length;
      r.greys = Object.keys(r.greys).length;
      out.cards.push(r);
    });
  } catch (e) { out.error = "exception: " + e; }
  document.body.dataset.drawn = JSON.stringify(out);
})();
</script>
"""
at = page.rindex("</body>")
open(sys.argv[2], "w", encoding="utf-8").write(page[:at] + script + page[at:])
EOF
  if chrome "${WINDOW[@]}" --dump-dom "file://$TMP/$page-read.html" >"$TMP/$page-dom.html" && [[ -s "$TMP/$page-dom.html" ]]; then
    pass
  else
    fail "chromium --dump-dom $page: $(tail -c 600 "$TMP/chrome.err")"
  fi
done
for page in show wrong; do
  if chrome "${WINDOW[@]}" --screenshot="$TMP/$page.png" "file://$TMP/$page.html" >/dev/null && [[ -s "$TMP/$page.png" ]]; then
    pass
  else
    fail "chromium --screenshot $page: $(tail -c 600 "$TMP/chrome.err")"
  fi
done

if PYTHONPATH="$HERE" "$PYTHON" - "$TMP" <<'EOF'; then pass; else fail "what the image pages draw"; fi
import html, json, re, sys
import numpy as np
from screenshot_check import read_png

tmp = sys.argv[1]
bad = []
def check(ok, what):
    if not ok:
        bad.append(what)

def drawn(page):
    dom = open(f"{tmp}/{page}-dom.html", encoding="utf-8").read()
    body = re.search(r"<body[^>]*>", dom).group(0)
    check('data-rendered="1"' in body, f"{page}: the page's script did not finish")
    m = re.search(r'data-drawn="([^"]*)"', body)
    return json.loads(html.unescape(m.group(1))) if m else {"cards": [], "error": "no data-drawn", "title": ""}

predictions = [json.loads(line) for line in open(f"{tmp}/predictions.jsonl")]
wrong = [p["index"] for p in predictions if p["label"] != p["truth"]]
assert len(wrong) >= 3, f"the test images need three the model gets wrong: {wrong}"
want = {"show": [5, 0, 9], "wrong": wrong[:3]}

for page, title in (("show", "Vision Transformer · fashion-vit"), ("wrong", "Vision Transformer · fashion-vit"),
                    ("point", "Point Transformer · fashion-point")):
    d = drawn(page)
    check(not d.get("error"), f"{page}: {d.get('error')}")
    check(d["title"] == title and "/" not in d["title"], f"{page}: title {d['title']!r}, expected {title!r}")
    shown = [int(re.match(r"#(\d+) ", c["caption"]).group(1)) if re.match(r"#\d+ ", c["caption"]) else None
             for c in d["cards"]]
    if page in want:
        check(shown == want[page], f"{page}: cards show images {shown}, expected {want[page]}")
    else:
        check(shown == [1, 4], f"point: cards show images {shown}, expected [1, 4]")
    for n, c in enumerate(d["cards"]):
        where = f"{page} card {n}"
        check(c["grey_ok"] and c["greys"] >= 20, f"{where}: the image beneath is not its grey levels ({c['greys']} levels)")
        if page == "point":
            check(c["colours"] >= 4, f"{where}: points in {c['colours']} colours (16 levels a channel)")
            continue
        alpha = {int(a): k for a, k in c["alpha"].items()}
        total = sum(alpha.values())
        clear = sum(k for a, k in alpha.items() if a <= 5)
        strong = sum(k for a, k in alpha.items() if a >= 100)
        # a 7x7 grid: the least-weighed patch at least (1/49 of the pixels) shows the image
        check(clear >= total / 49, f"{where}: {clear} of {total} overlay pixels transparent")
        check(strong > 0 and alpha.get(255, 0) == 0, f"{where}: alpha {min(alpha)}..{max(alpha)}, 255 on {alpha.get(255, 0)}")
        check(len(alpha) >= 10, f"{where}: only {len(alpha)} alpha values")
        check(abs(c["max_alpha"] - 255 * 0.7) <= 2, f"{where}: the largest patch's alpha {c['max_alpha']}, not 255·0.7")
        check(c["patch_err"] <= 2, f"{where}: a patch's alpha is {c['patch_err']:.1f} off 255·opacity·t")
        # a ramp: many colours, the largest patch in its top (plasma's yellow, #f0f921)
        check(c["colours"] >= 6, f"{where}: the overlay has {c['colours']} colours (16 levels a channel)")
        check(max(abs(u - v) for u, v in zip(c["top_colour"], (240, 249, 33))) <= 8,
              f"{where}: the largest patch is drawn in {c['top_colour']}, not the ramp's top #f0f921")

    if page == "point":
        continue
    # The composite on screen: at each pixel of each card's image, the screenshot's
    # luminance follows the image's grey level (the image reads through the overlay: many
    # levels, correlated with the image), and the heat colours it (many colours).
    width, height, rows = read_png(f"{tmp}/{page}.png")
    text = open(f"{tmp}/{page}.html", encoding="utf-8").read()
    images = json.loads(re.search(r'id="qkv-image-data">(.*?)</script>', text, re.S).group(1))["images"]
    for n, c in enumerate(d["cards"]):
        im, r = images[n], c["rect"]
        s = (r["right"] - r["left"]) / im["width"]
        lum, grey, colours = [], [], set()
        for y in range(im["height"]):
            for x in range(im["width"]):
                X, Y = int(r["left"] + (x + 0.5) * s), int(r["top"] + (y + 0.5) * s)
                if not (0 <= X < width and 0 <= Y < height):
                    continue
                px = rows[Y][3 * X:3 * X + 3]
                colours.add(px)
                lum.append(0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2])
                grey.append(im["pixels"][y * im["width"] + x])
        where = f"{page} card {n} on screen"
        check(len(lum) == im["height"] * im["width"], f"{where}: only {len(lum)} of its pixels on screen")
        levels = len({round(v) for v in lum})
        corr = float(np.corrcoef(lum, grey)[0, 1]) if len(lum) > 2 else 0.0
        check(levels >= 40, f"{where}: {levels} grey levels")
        check(corr >= 0.6, f"{where}: its luminance correlates {corr:.2f} with the image's grey levels")
        check(len(colours) >= 60, f"{where}: {len(colours)} colours")
        print(f"{where}: {levels} grey levels, correlation {corr:.2f} with the image, {len(colours)} colours")

for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF

finish image_page
