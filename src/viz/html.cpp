// render_html: the self-contained attention explorer (head view, detail heatmap, model view).
//
// The page is static markup, the data as JSON, and one inline script that draws everything
// on load. Nothing is fetched: the SVG namespace the script needs is read from the page's
// own <svg> element, so the page holds no URL at all (outside token text).
#include <string>
#include <vector>

#include "common.h"
#include "qkv/error.h"

namespace qkv::viz {
namespace {

constexpr const char* kStyle = R"CSS(
:root { color-scheme: light; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #222; background: #f6f7f9; }
header { padding: 14px 20px 8px; }
h1 { font-size: 20px; margin: 0; }
.sub { color: #555; margin: 4px 0 0; }
h1, .sub { overflow-wrap: anywhere; }  /* a long unbroken input must not widen the page */
#qkv-controls { display: flex; flex-wrap: wrap; gap: 8px 18px; align-items: center;
                padding: 8px 20px; background: #fff; border-top: 1px solid #e2e2e2;
                border-bottom: 1px solid #e2e2e2; position: sticky; top: 0; z-index: 1; }
select { font: inherit; padding: 1px 4px; }
#qkv-heads { display: inline-flex; flex-wrap: wrap; gap: 4px; vertical-align: middle; }
button { font: inherit; font-size: 12px; cursor: pointer; border-radius: 4px; padding: 1px 7px;
         min-width: 30px; border: 2px solid #999; background: #fff; color: #333; }
button.head { border-color: var(--c); background: var(--c); color: #fff; }
button.head.off { background: #fff; color: var(--c); }
main { display: grid; grid-template-columns: minmax(360px, 1fr) minmax(360px, 1.25fr);
       gap: 16px; padding: 16px 20px; align-items: start; }
@media (max-width: 900px) { main { grid-template-columns: 1fr; } }
section { background: #fff; border: 1px solid #e2e2e2; border-radius: 8px; padding: 12px 14px;
          overflow: auto; min-width: 0; }
#qkv-model-view { grid-column: 1 / -1; }
h2 { font-size: 15px; margin: 0 0 4px; }
h2 label { font-weight: normal; font-size: 13px; margin-left: 10px; }
.hint { color: #666; font-size: 12px; margin: 0 0 10px; }
#qkv-lines text { font-size: 13px; fill: #222; }
#qkv-lines text.colhead { font-size: 12px; fill: #777; }
#qkv-lines .tok { cursor: default; }
#qkv-lines .tok .hit { fill: transparent; }
#qkv-lines .tok.hl .hit { fill: #fff1a8; }
#qkv-lines .tok.hl text { font-weight: bold; }
table.heat { border-collapse: collapse; font-size: 12px; }
table.heat td.c { width: var(--s); height: var(--s); min-width: var(--s); padding: 0;
                  border: 0; }
table.heat td.c:hover { outline: 2px solid #d62728; outline-offset: -2px; }
table.heat th { font-weight: normal; padding: 0 5px; white-space: nowrap; color: #333; }
table.heat th.row { text-align: right; }
table.heat th.col { vertical-align: bottom; padding: 4px 0; }
table.heat th.col div { writing-mode: vertical-rl; transform: rotate(180deg); margin: 0 auto;
                        max-height: 140px; overflow: hidden; }
canvas.big { image-rendering: pixelated; display: block; cursor: crosshair; }
.legend { display: flex; align-items: center; gap: 6px; font-size: 12px; margin-top: 10px; }
.legend .bar { width: 160px; height: 10px; border: 1px solid #bbb;
               background: linear-gradient(to right, #f7fbff, #c6dbef, #6baed6, #2171b5, #08306b); }
#qkv-readout { font-size: 12px; color: #444; margin-top: 6px; min-height: 1.4em; }
#qkv-grid { display: grid; gap: 4px; align-items: center; justify-items: center;
            justify-content: start; }
#qkv-grid canvas { image-rendering: pixelated; display: block; cursor: pointer;
                   border: 2px solid transparent; border-radius: 3px; }
#qkv-grid canvas:hover { border-color: #999; }
#qkv-grid canvas.sel { border-color: #d62728; }
#qkv-grid .lab { font-size: 12px; color: #555; white-space: nowrap; }
#qkv-grid .lab.head { border-bottom: 3px solid var(--c); padding: 0 2px; }
#qkv-error { margin: 12px 20px; padding: 8px 12px; background: #fde8e8; color: #8a1c1c;
             border-radius: 6px; }
footer { color: #888; font-size: 11px; padding: 0 20px 16px; }
)CSS";

// The drawing script. Plain ES5-style code, no modules, no network; it reads the JSON
// above it and sets document.body.dataset.rendered = "1" once everything is drawn.
constexpr const char* kBody = R"HTML(<div id="qkv-controls">
<label>Attention <select id="qkv-group"></select></label>
<label>Layer <select id="qkv-layer"></select></label>
<span>Heads <span id="qkv-heads"></span></span>
</div>
<div id="qkv-error" hidden></div>
<noscript><p id="qkv-noscript">The views are drawn by JavaScript, which is off. The numbers are in
the qkv-attention-data element of this file.</p></noscript>
<main>
<section id="qkv-head-view"><h2>Head view</h2>
<p class="hint">Each query (left) is joined to the keys (right) it attends to: opacity is the
probability, colour the head. Hover a token to keep only its lines; click a head above to show
or hide it.</p>
<svg id="qkv-lines" role="img" aria-label="head view"></svg></section>
<section id="qkv-detail"><h2><span id="qkv-detail-title"></span><label>head
<select id="qkv-head"></select></label></h2>
<p class="hint">Rows: queries, columns: keys. Colour runs from 0 to this head's largest
probability.</p>
<div id="qkv-heatmap"></div>
<div class="legend"><span>0</span><span class="bar"></span><span id="qkv-legend-max"></span></div>
<div id="qkv-readout"></div></section>
<section id="qkv-model-view"><h2 id="qkv-model-title">Model view</h2>
<p class="hint">Every layer (rows) and head (columns), coloured on one scale from 0 to 1.
Click one to select that layer and head.</p>
<div id="qkv-grid"></div></section>
</main>)HTML";

constexpr const char* kScript = R"JS(
(function () {
  "use strict";
  var body = document.body;
  function el(id) { return document.getElementById(id); }
  try {
    var data = JSON.parse(el("qkv-attention-data").textContent);
    if (!data.groups || !data.groups.length) throw new Error("the data holds no attention groups");
    var svg = el("qkv-lines");
    var NS = svg.namespaceURI;  // the SVG namespace, read from the page's own <svg>
    // d3's category10 for the first ten heads (as bertviz), then golden-angle hues.
    var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                   "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
    function headColour(h) {
      return h < PALETTE.length ? PALETTE[h] : "hsl(" + ((h * 137.508) % 360).toFixed(1) + ",65%,42%)";
    }
    // ColorBrewer "Blues", the same ramp as render_svg.
    var STOPS = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
    function ramp(t) {
      if (!(t > 0)) t = 0;
      if (t > 1) t = 1;
      var x = t * 4, k = Math.min(3, Math.floor(x)), f = x - k, a = STOPS[k], b = STOPS[k + 1];
      return [Math.round(a[0] + f * (b[0] - a[0])), Math.round(a[1] + f * (b[1] - a[1])),
              Math.round(a[2] + f * (b[2] - a[2]))];
    }
    function rgb(c) { return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")"; }
    // A label as shown: control characters as their control pictures, spaces of a token
    // as "\u2423" (GPT-2's " the" is a different token from "the"; a group whose labels
    // are text, such as movie titles, keeps its spaces), "" as the empty set, at most
    // `max` code points.
    function show(token, max) {
      var s = String(token).replace(/[\u0000-\u001f\u007f]/g, function (c) {
        var k = c.charCodeAt(0);
        return String.fromCharCode(k === 127 ? 0x2421 : 0x2400 + k);
      });
      if (!group().text_labels) s = s.replace(/ /g, "\u2423");
      if (s === "") s = "\u2205";
      var cps = Array.from(s);
      if (max && cps.length > max) s = cps.slice(0, max - 1).join("") + "\u2026";
      return s;
    }
    function fmt(p) { return p === 0 ? "0" : p.toPrecision(4); }  // 4 significant digits
    function svgNode(tag, attrs, parent) {
      var e = document.createElementNS(NS, tag);
      for (var k in attrs) e.setAttribute(k, attrs[k]);
      if (parent) parent.appendChild(e);
      return e;
    }
    function html(tag, cls, parent, text) {
      var e = document.createElement(tag);
      if (cls) e.className = cls;
      if (text !== undefined) e.textContent = text;
      if (parent) parent.appendChild(e);
      return e;
    }
    function maxOf(P) {
      var top = 0;
      for (var i = 0; i < P.length; ++i)
        for (var j = 0; j < P[i].length; ++j) if (P[i][j] > top) top = P[i][j];
      return top;
    }
    function paint(canvas, P, top) {
      var ctx = canvas.getContext("2d"), img = ctx.createImageData(canvas.width, canvas.height);
      var d = img.data, n = 0;
      for (var i = 0; i < canvas.height; ++i) {
        for (var j = 0; j < canvas.width; ++j) {
          var c = ramp(top > 0 ? P[i][j] / top : 0);
          d[n++] = c[0]; d[n++] = c[1]; d[n++] = c[2]; d[n++] = 255;
        }
      }
      ctx.putImageData(img, 0, 0);
    }

    // The page opens on the view's initial group and head, that head alone in the head view.
    var state = { group: 0, layer: 0, head: data.initial_head || 0, active: [] };
    function group() { return data.groups[state.group]; }
    function heads() { return group().attention[0].length; }
    function probs(l, h) { return group().attention[l][h]; }  // [query][key]
    function allHeads() { var a = []; for (var h = 0; h < heads(); ++h) a.push(h); return a; }

    var groupSel = el("qkv-group"), layerSel = el("qkv-layer"), headSel = el("qkv-head");
    data.groups.forEach(function (g, k) { groupSel.add(new Option(g.name, String(k))); });
    groupSel.addEventListener("change", function () { selectGroup(Number(groupSel.value)); });
    layerSel.addEventListener("change", function () { state.layer = Number(layerSel.value); update(); });
    headSel.addEventListener("change", function () {
      state.head = Number(headSel.value);
      if (state.active.indexOf(state.head) < 0) state.active.push(state.head);
      update();
    });

    function selectGroup(k) {
      state.group = k;
      var L = group().attention.length, H = heads();
      state.layer = Math.min(state.layer, L - 1);
      state.head = Math.min(state.head, H - 1);
      state.active = [state.head];  // one head: every head at once is a tangle of lines
      groupSel.value = String(k);
      layerSel.length = 0;
      for (var l = 0; l < L; ++l) layerSel.add(new Option(String(l), String(l)));
      headSel.length = 0;
      for (var h = 0; h < H; ++h) headSel.add(new Option(String(h), String(h)));
      drawModel();
      update();
    }
    function update() {
      layerSel.value = String(state.layer);
      headSel.value = String(state.head);
      drawToggles();
      drawHeadView();
      drawDetail();
      markSelected();
    }

    // Head toggles: click shows or hides a head's lines, double-click shows it alone.
    function drawToggles() {
      var box = el("qkv-heads");
      box.textContent = "";
      for (var h = 0; h < heads(); ++h) (function (h) {
        var on = state.active.indexOf(h) >= 0;
        var b = html("button", "head" + (on ? "" : " off"), box, String(h));
        b.type = "button";
        b.style.setProperty("--c", headColour(h));
        b.setAttribute("aria-pressed", on ? "true" : "false");
        b.title = "head " + h + ": click to show or hide, double-click to show alone";
        b.addEventListener("click", function () {
          var k = state.active.indexOf(h);
          if (k < 0) { state.active.push(h); state.head = h; } else state.active.splice(k, 1);
          update();
        });
        b.addEventListener("dblclick", function () { state.active = [h]; state.head = h; update(); });
      })(h);
      var all = html("button", "all", box, "all");
      all.type = "button";
      all.addEventListener("click", function () { state.active = allHeads(); update(); });
    }

    // Head view: queries left, keys right, a line per (query, key, active head).
    var LEFT = 170, RIGHT = 300, WIDTH = 480, TOP = 28;
    function drawHeadView() {
      var g = group(), rows = Math.max(g.query_tokens.length, g.key_tokens.length);
      var row = rows > 60 ? 14 : 20;
      svg.textContent = "";
      svg.setAttribute("width", WIDTH);
      svg.setAttribute("height", TOP + rows * row + 8);
      svgNode("text", { x: LEFT, y: 16, "text-anchor": "end", "class": "colhead" }, svg).textContent = "queries";
      svgNode("text", { x: RIGHT, y: 16, "class": "colhead" }, svg).textContent = "keys";
      var lines = svgNode("g", {}, svg), labels = svgNode("g", {}, svg);
      function label(side, i, token) {
        var q = side === "q", y = TOP + i * row;
        var t = svgNode("g", { "class": "tok", "data-side": side, "data-i": i }, labels);
        svgNode("rect", { "class": "hit", x: q ? 4 : RIGHT - 4, y: y, width: q ? LEFT + 4 - 4 : WIDTH - RIGHT,
                          height: row, rx: 3 }, t);
        svgNode("text", { x: q ? LEFT : RIGHT, y: y + row / 2, "text-anchor": q ? "end" : "start",
                          "dominant-baseline": "central" }, t).textContent = show(token, 22);
        svgNode("title", {}, t).textContent = (q ? "query " : "key ") + i + ": " + show(token);
        t.addEventListener("mouseenter", function () { t.classList.add("hl"); drawLines(lines, side, i, row); });
        t.addEventListener("mouseleave", function () { t.classList.remove("hl"); drawLines(lines, "", -1, row); });
      }
      g.query_tokens.forEach(function (token, i) { label("q", i, token); });
      g.key_tokens.forEach(function (token, j) { label("k", j, token); });
      drawLines(lines, "", -1, row);
    }
    function drawLines(parent, side, index, row) {
      parent.textContent = "";
      var g = group(), Lq = g.query_tokens.length, Lk = g.key_tokens.length;
      var frag = document.createDocumentFragment();
      state.active.forEach(function (h) {
        var P = probs(state.layer, h), colour = headColour(h);
        for (var i = 0; i < Lq; ++i) {
          if (side === "q" && i !== index) continue;
          for (var j = 0; j < Lk; ++j) {
            if (side === "k" && j !== index) continue;
            var w = P[i][j];
            if (w < 0.002) continue;  // invisible at that opacity; keeps long inputs fast
            svgNode("line", { x1: LEFT + 8, y1: TOP + (i + 0.5) * row, x2: RIGHT - 8,
                              y2: TOP + (j + 0.5) * row, stroke: colour,
                              "stroke-opacity": w.toFixed(3), "stroke-width": 2 }, frag);
          }
        }
      });
      parent.appendChild(frag);
    }

    // Detail: the selected layer and head, a table of cells (a canvas when very large).
    function drawDetail() {
      var g = group(), P = probs(state.layer, state.head);
      var Lq = g.query_tokens.length, Lk = g.key_tokens.length, top = maxOf(P);
      el("qkv-detail-title").textContent = g.name + " \u2014 layer " + state.layer + ", head " + state.head;
      el("qkv-legend-max").textContent = fmt(top);
      var box = el("qkv-heatmap"), readout = el("qkv-readout");
      box.textContent = "";
      readout.textContent = "Hover a cell to read its probability.";
      function say(i, j) {
        return "query " + i + " \u201c" + show(g.query_tokens[i]) + "\u201d \u2192 key " + j +
               " \u201c" + show(g.key_tokens[j]) + "\u201d: " + fmt(P[i][j]);
      }
      if (Lq * Lk <= 16384) {
        var s = Math.max(10, Math.min(32, Math.floor(520 / Lk)));
        var table = html("table", "heat", box);
        table.style.setProperty("--s", s + "px");
        var tr = html("tr", "", html("thead", "", table));
        html("th", "", tr);
        g.key_tokens.forEach(function (token, j) {
          html("div", "", html("th", "col", tr), show(token, 16)).title = "key " + j + ": " + show(token);
        });
        var tbody = html("tbody", "", table);
        for (var i = 0; i < Lq; ++i) {
          tr = html("tr", "", tbody);
          html("th", "row", tr, show(g.query_tokens[i], 20)).title = "query " + i + ": " + show(g.query_tokens[i]);
          for (var j = 0; j < Lk; ++j) {
            var td = html("td", "c", tr);
            td.style.background = rgb(ramp(top > 0 ? P[i][j] / top : 0));
            td.title = say(i, j);
            td.setAttribute("data-i", i);
            td.setAttribute("data-j", j);
          }
        }
        table.addEventListener("mouseover", function (e) {
          var t = e.target;
          if (t.classList && t.classList.contains("c"))
            readout.textContent = say(Number(t.getAttribute("data-i")), Number(t.getAttribute("data-j")));
        });
      } else {
        var c = html("canvas", "big", box), z = Math.min(4, 560 / Math.max(Lq, Lk));
        c.width = Lk;
        c.height = Lq;
        c.style.width = Math.max(1, Math.round(Lk * z)) + "px";
        c.style.height = Math.max(1, Math.round(Lq * z)) + "px";
        paint(c, P, top);
        c.addEventListener("mousemove", function (e) {
          var r = c.getBoundingClientRect();
          var j = Math.floor((e.clientX - r.left) / r.width * Lk), i = Math.floor((e.clientY - r.top) / r.height * Lq);
          if (i >= 0 && i < Lq && j >= 0 && j < Lk) { c.title = say(i, j); readout.textContent = c.title; }
        });
      }
    }

    // Model view: every layer (rows) by every head (columns) of the group.
    var thumbs = [];
    function drawModel() {
      var g = group(), L = g.attention.length, H = heads();
      var Lq = g.query_tokens.length, Lk = g.key_tokens.length, grid = el("qkv-grid");
      grid.textContent = "";
      thumbs = [];
      el("qkv-model-title").textContent = "Model view \u2014 " + g.name + ": " + L + " layer" +
          (L === 1 ? "" : "s") + " \u00d7 " + H + " head" + (H === 1 ? "" : "s");
      var avail = Math.max(300, grid.clientWidth || 1000);
      var size = Math.max(36, Math.min(96, Math.floor((avail - 70) / H) - 8));
      var w = Math.max(4, Math.round(size * Lk / Math.max(Lq, Lk)));
      var h = Math.max(4, Math.round(size * Lq / Math.max(Lq, Lk)));
      grid.style.gridTemplateColumns = "auto repeat(" + H + ", " + (size + 4) + "px)";
      html("div", "lab", grid);
      for (var k = 0; k < H; ++k) html("div", "lab head", grid, "head " + k).style.setProperty("--c", headColour(k));
      for (var l = 0; l < L; ++l) {
        html("div", "lab", grid, "layer " + l);
        thumbs.push([]);
        for (k = 0; k < H; ++k) (function (l, k) {
          var c = html("canvas", "", grid), P = probs(l, k);
          c.width = Lk;
          c.height = Lq;
          c.style.width = w + "px";
          c.style.height = h + "px";
          paint(c, P, 1);  // one absolute scale, so a uniform head stays pale (as bertviz)
          c.title = "layer " + l + ", head " + k + " (click to select)";
          c.addEventListener("click", function () { state.layer = l; state.head = k; state.active = [k]; update(); });
          thumbs[l].push(c);
        })(l, k);
      }
    }
    function markSelected() {
      thumbs.forEach(function (row, l) {
        row.forEach(function (c, k) { c.classList.toggle("sel", l === state.layer && k === state.head); });
      });
    }

    selectGroup(data.initial_group || 0);
    body.dataset.rendered = "1";
  } catch (e) {
    var box = el("qkv-error");
    box.textContent = "This page could not be drawn: " + e;
    box.hidden = false;
    body.dataset.rendered = "error";
  }
})();
)JS";

void append_tokens(std::string& out, const std::vector<std::string>& tokens) {
  out += '[';
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i) out += ',';
    out += detail::json_string(tokens[i]);
  }
  out += ']';
}

}  // namespace

std::string render_html(const AttentionView& view) {
  QKV_CHECK(!view.groups.empty(), "render_html: the view has no attention groups");
  std::vector<detail::CheckedGroup> checked;
  std::size_t numbers = 0;
  for (std::size_t k = 0; k < view.groups.size(); ++k) {
    checked.push_back(detail::check_group(
        view.groups[k], "render_html: " + detail::group_label(view.groups[k], k)));
    for (const auto& p : checked.back().probs) numbers += p.size();
  }
  QKV_CHECK(view.initial_group < view.groups.size(),
            "render_html: initial_group is " << view.initial_group << ", but the view has "
                                             << view.groups.size() << " groups (0-"
                                             << view.groups.size() - 1 << ")");
  const std::int64_t heads = checked[view.initial_group].heads;
  QKV_CHECK(view.initial_head >= 0 && view.initial_head < heads,
            "render_html: initial_head is " << view.initial_head << ", but "
                << detail::group_label(view.groups[view.initial_group], view.initial_group)
                << " (initial_group) has " << heads << " heads (0-" << heads - 1 << ")");

  // The data: {"title", "subtitle", "initial_group", "initial_head", "groups": [{"name",
  // "text_labels", "query_tokens", "key_tokens", "attention": [layer][head][query][key]}]}.
  std::string data;
  data.reserve(numbers * 10 + 4096);
  data += "{\"title\":" + detail::json_string(view.title) +
          ",\"subtitle\":" + detail::json_string(view.subtitle) +
          ",\"initial_group\":" + std::to_string(view.initial_group) +
          ",\"initial_head\":" + std::to_string(view.initial_head) + ",\"groups\":[";
  for (std::size_t k = 0; k < view.groups.size(); ++k) {
    const AttentionGroup& group = view.groups[k];
    const detail::CheckedGroup& c = checked[k];
    if (k) data += ',';
    data += "{\"name\":" + detail::json_string(group.name) +
            ",\"text_labels\":" + (group.text_labels ? "true" : "false") + ",\"query_tokens\":";
    append_tokens(data, group.query_tokens);
    data += ",\"key_tokens\":";
    append_tokens(data, group.key_tokens);
    data += ",\"attention\":[";
    for (std::size_t n = 0; n < c.probs.size(); ++n) {
      data += n ? ",[" : "[";
      for (std::int64_t h = 0; h < c.heads; ++h) {
        data += h ? ",[" : "[";
        for (std::int64_t i = 0; i < c.queries; ++i) {
          data += i ? ",[" : "[";
          for (std::int64_t j = 0; j < c.keys; ++j) {
            if (j) data += ',';
            detail::append_number(data, c.at(n, h, i, j));
          }
          data += ']';
        }
        data += ']';
      }
      data += ']';
    }
    data += "]}";
  }
  data += "]}";

  return detail::self_contained_page(view.title, "attention", view.subtitle, kStyle, kBody, "qkv-attention-data",
                                     data, kScript);
}

}  // namespace qkv::viz
