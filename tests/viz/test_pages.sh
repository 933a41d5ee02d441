#!/usr/bin/env bash
# What a learner sees when each command's attention page opens, read from the DOM of
# headless Chromium (1200 px wide) after the page's own script ran. The pages of:
#   qkv run --html       a synthetic BERT (tests/python/test_bert.py) and models/sotu-gpt
#   qkv translate --html the embedded date model
#   qkv generate --html  models/sotu-gpt
#   qkv recommend --html a SASRec model trained here in a second (long movie titles)
# Checked on each: the title names the model (kind · directory base name, no path), the
# group selected at load (cross-attention for the translator), one head drawn in the head
# view (one toggle on, one line colour), the detail heatmap in many colours (a real head,
# not one flat colour), the detail title in the project's words ("layer 0, head 0"), and
# no horizontal scrolling at 1200 px; on the recommender's page the movie titles are drawn
# with their spaces (no "␣"), cut with the whole title in a tooltip.
# One Chromium run per page. Chromium is installed by `scripts/setup.sh test`.
#   tests/viz/test_pages.sh PATH/TO/qkv
set -u

QKV=${1:?usage: test_pages.sh PATH/TO/qkv}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

source "$HERE/../cli/lib.sh"
source "$HERE/chrome.sh" pages  # CHROMIUM and chrome ARGS... URL

# The probe, run after the page's script: what is on screen, as JSON in body data-probe.
cat >"$TMP/probe.html" <<'EOF'
<script>
(function () {
  var r = {};
  function $(s) { return document.querySelector(s); }
  function $$(s) { return Array.prototype.slice.call(document.querySelectorAll(s)); }
  function distinct(a) { var o = {}; a.forEach(function (x) { o[x] = 1; }); return Object.keys(o).length; }
  try {
    r.rendered = document.body.dataset.rendered;
    r.document_title = document.title;
    r.h1 = $("header h1").textContent;
    var g = $("#qkv-group");
    r.group = g.options[g.selectedIndex].text;
    r.layer = $("#qkv-layer").value;
    r.head = $("#qkv-head").value;
    r.heads_on = $$("#qkv-heads button.head:not(.off)").length;
    r.heads = $$("#qkv-heads button.head").length;
    r.line_colours = distinct($$("#qkv-lines line").map(function (l) { return l.getAttribute("stroke"); }));
    r.lines = $$("#qkv-lines line").length;
    var cells = $$("#qkv-heatmap td.c");
    r.cells = cells.length;
    r.cell_colours = distinct(cells.map(function (c) { return getComputedStyle(c).backgroundColor; }));
    r.detail_title = $("#qkv-detail-title").textContent;
    r.scroll_width = document.documentElement.scrollWidth;
    r.client_width = document.documentElement.clientWidth;
    // Every label drawn (head view, heatmap rows and columns), and their tooltips.
    var labels = $$("#qkv-lines .tok text").concat($$("#qkv-heatmap th"));
    r.labels = labels.map(function (e) { return e.textContent; });
    r.tooltips = $$("#qkv-lines .tok title").map(function (e) { return e.textContent; })
        .concat($$("#qkv-heatmap th.row").map(function (e) { return e.title; }));
    r.text = document.body.innerText;
  } catch (e) { r.exception = String(e); }
  document.body.dataset.probe = JSON.stringify(r);
})();
</script>
EOF

# page NAME FILE: the page with the probe, drawn; its probe in $TMP/NAME.json.
page() {
  local name=$1 file=$2
  "$PYTHON" - "$file" "$TMP/probe.html" "$TMP/$name.probe.html" <<'EOF'
import sys
page, probe = open(sys.argv[1], encoding="utf-8").read(), open(sys.argv[2], encoding="utf-8").read()
at = page.rindex("</body>")
open(sys.argv[3], "w", encoding="utf-8").write(page[:at] + probe + page[at:])
EOF
  chrome --window-size=1200,900 --dump-dom "file://$TMP/$name.probe.html" >"$TMP/$name.dom"
  "$PYTHON" - "$TMP/$name.dom" "$TMP/$name.json" <<'EOF'
import html, re, sys
m = re.search(r'<body[^>]*data-probe="([^"]*)"', open(sys.argv[1], encoding="utf-8").read())
open(sys.argv[2], "w", encoding="utf-8").write(html.unescape(m.group(1)) if m else "{}")
EOF
}

# check NAME TITLE GROUP [recommender]: the assertions on a page's probe.
check() {
  if "$PYTHON" - "$TMP/$1.json" "$2" "$3" "${4:-}" <<'EOF'; then pass; else fail "$1 page (probe: $(head -c 300 "$TMP/$1.json"))"; fi
import json, sys
r, title, group, kind = json.load(open(sys.argv[1], encoding="utf-8")), sys.argv[2], sys.argv[3], sys.argv[4]
bad = []
def want(ok, what):
    if not ok: bad.append(what)
want("exception" not in r, f"probe exception: {r.get('exception')}")
want(r.get("rendered") == "1", f"the page's script did not finish: {r.get('rendered')}")
want(r.get("h1") == title, f"title {r.get('h1')!r}, expected {title!r}")
want("/" not in r.get("h1", "/") and "/" not in r.get("document_title", "/"),
     f"a path in the title: {r.get('document_title')!r}")
want(r.get("group") == group, f"group at load {r.get('group')!r}, expected {group!r}")
want(r.get("heads_on") == 1, f"{r.get('heads_on')} heads on at load, expected 1 (of {r.get('heads')})")
want(r.get("line_colours") == 1 and r.get("lines", 0) >= 1,
     f"head view: {r.get('lines')} lines in {r.get('line_colours')} head colours, expected one colour")
want(r.get("cells", 0) >= 4 and r.get("cell_colours", 0) > 5,
     f"detail heatmap: {r.get('cell_colours')} colours over {r.get('cells')} cells, expected > 5")
want(r.get("detail_title") == f"{group} \u2014 layer 0, head {r.get('head')}" and r.get("layer") == "0",
     f"detail title {r.get('detail_title')!r}")
want(0 < r.get("scroll_width", 1e9) <= r.get("client_width", 0),
     f"horizontal scrolling: scrollWidth {r.get('scroll_width')} > clientWidth {r.get('client_width')}")
if kind == "recommender":
    want("\u2423" not in r.get("text", "\u2423") and not any("\u2423" in s for s in r.get("labels", [])),
         "\u2423 drawn in the movie titles")
    want(any(" " in s for s in r.get("labels", [])), "no label with a space")
    full = [t for t in r.get("tooltips", []) if "(Director's Cut, Restored Edition)" in t]
    want(len(full) >= 2, f"the long titles' tooltips are not whole: {r.get('tooltips', [])[:3]}")
    want(all(len(s) <= 40 for s in r.get("labels", [])), "a label is not cut short")
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
EOF
}

# The pages.
if ! "$PYTHON" "$HERE/../python/test_bert.py" write "$TMP/bert-dir" 2>"$TMP/err"; then
  fail "writing the synthetic checkpoint: $(cat "$TMP/err")"
  finish pages
fi
run run --model "$TMP/bert-dir" --text "the cat sat on the mat" --html "$TMP/bert.html"
expect_status 0 "run --html on BERT"
run run --model "$ROOT/models/sotu-gpt" --text "the people of the union and the state" --html "$TMP/gpt.html"
expect_status 0 "run --html on GPT-2"
run translate --html "$TMP/dates.html" "Saturday, 21 November 2026"
expect_status 0 "translate --html"
run generate --model "$ROOT/models/sotu-gpt" --prompt "the people of the" --max-new-tokens 8 --html "$TMP/generate.html"
expect_status 0 "generate --html"

# A SASRec model over movies with long titles, spaces in each (trains in about a second).
"$PYTHON" - "$TMP/ratings.csv" <<'EOF'
import random, sys
rng = random.Random(3)
lines = ["movieId,title,year,genres,userId,rating,timestamp"]
for u in range(1, 21):
    for j, m in enumerate(rng.sample(range(1, 31), 20)):
        title = f"The Film Number {m} of a Long Series (Director's Cut, Restored Edition)"
        lines.append(f'{m},"{title}",{1980 + m},Drama,{u},{rng.choice([1, 2, 3, 4, 5])},{1000000 + u * 1000 + j}')
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
EOF
run train sasrec --data "$TMP/ratings.csv" --epochs 1 --dim 8 --heads 2 --max-len 20 --out "$TMP/sasrec-model" --quiet
expect_status 0 "train sasrec"
run recommend --model "$TMP/sasrec-model" --user 1 --html "$TMP/recommend.html"
expect_status 0 "recommend --html"

page bert "$TMP/bert.html" && check bert "BERT · bert-dir" "self-attention"
page gpt "$TMP/gpt.html" && check gpt "GPT-2 · sotu-gpt" "causal self-attention"
page dates "$TMP/dates.html" && check dates "date translator (embedded model)" "cross-attention"
page generate "$TMP/generate.html" && check generate "GPT-2 · sotu-gpt" "causal self-attention"
page recommend "$TMP/recommend.html" &&
  check recommend "SASRec recommender · sasrec-model" "SASRec self-attention over user 1's history" recommender

finish pages
