// qkv::viz — pictures of attention: one self-contained HTML page to explore every layer and
// head of a model (in the spirit of bertviz, Vig 2019, https://github.com/jessevig/bertviz),
// and a standalone SVG heatmap of one head for papers.
//
// The page is one file: inline CSS and vanilla JavaScript, no network fetch of any kind
// (no CDN, fonts or remote images), so it opens offline and can be mailed. It holds
//   - a head view: query tokens left, key tokens right, one line per (query, key, head)
//     whose opacity is the probability, one colour per head; heads toggle on and off, and
//     hovering a token keeps only its lines;
//   - a model view: a thumbnail heatmap for every layer (rows) and head (columns) of the
//     selected group; clicking one selects that layer and head;
//   - a detail heatmap of the selected layer and head, with token labels and each value in
//     a tooltip.
// The data sits in <script type="application/json" id="qkv-attention-data">:
//   {"title": s, "subtitle": s, "initial_group": n, "initial_head": n,
//    "groups": [{"name": s, "text_labels": b, "query_tokens": [s], "key_tokens": [s],
//     "attention": [layer][head][query][key] numbers (6 significant digits)}]}
// with '<', '>' and '&' written as \u003c, \u003e, \u0026, so no token can close the element.
// The page opens on group initial_group, layer 0, with only head initial_head drawn in the
// head view (every head at once is a tangle of lines; the toggles add the others).
// Once drawn, the script sets document.body.dataset.rendered = "1" (tests look for it).
//
// Layers and heads are numbered from 0, as the CLI's --layer/--head and the JSON number
// them, and written "layer 1, head 0" everywhere (page, SVG, terminal).
//
// Text (titles, names, tokens) is UTF-8; an invalid byte becomes U+FFFD (in the data too).
// On screen a control character is shown as its control picture (U+2400 + c; "\n" as ␊)
// and a space in a token as ␣ (GPT-2's " the" and "the" differ) unless the group's labels
// are text (text_labels: movie titles), whose spaces are plain; the data keeps them as is.
// Long labels are cut with "…" and shown whole in a tooltip.
//
// Depends on core only (qkv::Tensor, qkv::Error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qkv/tensor.h"

namespace qkv::viz {

// One kind of attention in a model ("encoder self-attention", "cross-attention", ...).
struct AttentionGroup {
  std::string name;
  std::vector<std::string> query_tokens;  // Lq labels (rows)
  std::vector<std::string> key_tokens;    // Lk labels (columns)
  std::vector<Tensor> layers;             // per layer: (H, Lq, Lk) probabilities, any strides
                                          // and dtype, H the same in every layer
  // The labels are text for people (movie titles), not a tokenizer's tokens: spaces are
  // shown as spaces, not as ␣.
  bool text_labels = false;
};

struct AttentionView {
  std::string title;     // what the model is: page_title(kind, directory)
  std::string subtitle;  // e.g. the input text; may be empty
  std::vector<AttentionGroup> groups;  // at least one
  // What the page opens on: the group that is the point of the model (a translator's
  // cross-attention), and the one head drawn in the head view and the detail heatmap.
  std::size_t initial_group = 0;   // in [0, groups.size())
  std::int64_t initial_head = 0;   // in [0, H) of that group
};

// A page's title naming the model: "GPT-2 · sotu-gpt" for kind "GPT-2" and directory
// "/any/where/models/sotu-gpt/" — the directory's base name, never its whole path (the
// same directory on another machine gets the same title). An empty directory: the kind.
std::string page_title(const std::string& kind, const std::string& directory);

// The page described above. Throws qkv::Error naming the group, layer and what is wrong
// when the view is inconsistent: no groups, a group without layers or tokens, a layer not
// 3-D, a size that disagrees with the token counts, H differing between layers, H = 0, a
// value that is not finite or outside [0, 1], or initial_group / initial_head out of range.
std::string render_html(const AttentionView& view);

// An SVG heatmap of group.layers[layer] head `head`: rows = queries, columns = keys, both
// labelled, a colour scale from 0 to the head's largest probability, and a title naming the
// group, layer and head. Valid standalone XML. Throws as render_html, and when layer or
// head is out of range.
std::string render_svg(const AttentionGroup& group, std::int64_t layer, std::int64_t head);

// Images with where a model looked: one card per image, the grey picture scaled up
// (canvas.image) under a transparent heat overlay over its patch grid (canvas.heat; for a
// Vision Transformer, the class token's attention rollout): each image's values stretched
// from its smallest to its largest, t in [0, 1], each patch painted in a colour ramp at t
// with alpha t·opacity, so the patches weighed least leave the picture as it is. A caption,
// a slider for the overlay's opacity; hovering a patch shows its weight. Self-contained like render_html (no network, data in
// <script type="application/json" id="qkv-image-data">: {"title", "subtitle", "images":
// [{"caption", "height", "width", "pixels": [H·W grey 0-255], "grid_h", "grid_w",
// "heat": [grid_h·grid_w]} or, for a point model, {..., "points": [P·2], "point_heat": [P],
// "neighbors": K, "neighbor": [P·K], "neighbor_weight": [P·K]}]}); sets
// document.body.dataset.rendered = "1" once drawn.
struct ImageAttention {
  std::string caption;               // e.g. "#3 Sneaker 0.98 (label: Sneaker)"
  std::int64_t height = 0, width = 0;
  std::vector<std::uint8_t> pixels;  // (height, width) grey, 0 = black
  // A patch model: a heat value per patch of a grid_h × grid_w grid over the image.
  std::int64_t grid_h = 0, grid_w = 0;
  std::vector<float> heat;           // (grid_h, grid_w), each >= 0; shown from its min to its max
  // A point model (no grid, no heat): its points, each with a heat value, and each point's
  // `neighbors` neighbours with the weight it gives them (drawn when the point is hovered).
  std::vector<float> points;         // (P, 2) column, row in pixels, inside the image
  std::vector<float> point_heat;     // (P), each >= 0
  std::int64_t neighbors = 0;        // K (0: no neighbours)
  std::vector<std::int64_t> neighbor;    // (P, K) in [0, P)
  std::vector<float> neighbor_weight;    // (P, K), each in [0, 1]
};
struct ImageAttentionView {
  std::string title;
  std::string subtitle;
  std::vector<ImageAttention> images;  // at least one
};
// Throws qkv::Error naming the image and what is wrong: no images, sizes that disagree with
// the pixel or heat counts, a grid larger than the image, a heat value negative or not finite,
// an image with both or neither of a grid and points, a point outside the image, a
// neighbour index out of range or a weight outside [0, 1].
std::string render_image_html(const ImageAttentionView& view);

// Writes text to path (replacing it). Throws qkv::Error naming the path and the reason.
void write_file(const std::string& path, const std::string& text);

}  // namespace qkv::viz
