// qkv classify — what a model of `qkv train vit` and `qkv train point` sees in images:
//   --images F    an IDX image file (gzip or plain) or one PNG or PGM image, of the model's size
//   --labels F    their IDX labels: accuracy and the confusion matrix too
//   --tta         test-time augmentation: each image's class probabilities are the mean of
//                 its own and its left-right mirror image's (two forwards per image)
//   --json        one line per image, in input order:
//                 {"index": 0, "label": 9, "class": "Ankle boot", "score": 0.97}
//                 (+ "truth" with --labels; the summary then goes to standard error)
//   --html OUT    the first --html-images images, each with what the model attended to: a
//                 ViT's class-token attention rollout over its patches as a heat overlay; a
//                 point model's points, coloured by the attention they receive in its last
//                 block, and (on hover) a point's neighbours weighted by its attention
//   --show-images 3,17,42   the page shows these images (0-based indices into --images)
//   --misclassified         the page shows the images the model got wrong (needs --labels),
//                           the first --html-images of them
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "print.h"
#include "qkv/qkv.h"
#include "vision/vision.h"

namespace qkv::cli {

namespace {

std::string class_name(const vision::Classifier& c, std::int64_t k) {
  return c.class_names()[static_cast<std::size_t>(k)];
}

// A class name as the terminal shows it: config.json's names are data, so a control
// character in one ("\x1b[2J") is written \xNN, never sent to the terminal. JSON and the
// HTML page escape names their own way and take class_name.
std::string class_label(const vision::Classifier& c, std::int64_t k) {
  return printable(class_name(c, k), 200);
}

void print_summary(std::ostream& out, const vision::Classifier& c, const vision::Evaluation& e) {
  out << format("accuracy %.2f%% (%lld of %lld)\n", 100.0 * e.accuracy(), static_cast<long long>(e.correct),
                static_cast<long long>(e.images));
  out << "confusion matrix (rows: label, columns: predicted):\n";
  const std::int64_t K = e.classes;
  out << format("%-14s", "");
  for (std::int64_t k = 0; k < K; ++k) out << format("%6lld", static_cast<long long>(k));
  out << '\n';
  for (std::int64_t t = 0; t < K; ++t) {
    out << format("%2lld %-11s", static_cast<long long>(t), truncate_display(class_label(c, t), 11).c_str());
    for (std::int64_t p = 0; p < K; ++p)
      out << format("%6lld", static_cast<long long>(e.counts[static_cast<std::size_t>(t * K + p)]));
    out << '\n';
  }
}

// The images the --html page shows, by index into `images`: those --show-images names,
// the first --html-images the model got wrong (--misclassified), or the first
// --html-images. Empty only when --misclassified finds every image right.
std::vector<std::int64_t> page_images(const ClassifyOptions& o, const vision::ClassifyQueryOptions& q,
                                      const vision::Images& images,
                                      const std::vector<vision::Prediction>& predictions) {
  std::vector<std::int64_t> chosen;
  if (!q.shown.empty()) return q.shown;  // checked against the file before the forward
  for (std::int64_t i = 0; i < images.count && static_cast<std::int64_t>(chosen.size()) < o.html_images; ++i)
    if (!q.misclassified || predictions[static_cast<std::size_t>(i)].label != images.labels[static_cast<std::size_t>(i)])
      chosen.push_back(i);
  return chosen;
}

}  // namespace

int run_classify(const ClassifyOptions& o, const vision::ClassifyQueryOptions& q, std::ostream& out) {
  if (o.html.empty() && (!q.shown.empty() || q.misclassified))
    throw UsageError(q.misclassified ? "--misclassified" : "--show-images", "picks the images of the --html page: give --html too");
  if (q.misclassified && o.labels.empty())
    throw UsageError("--misclassified", "needs --labels (the images' true classes say which the model got wrong)");
  if (!o.html.empty()) {  // before the work that fills it
    Inputs inputs;
    add_directory_inputs(inputs, "--model", o.model);
    add_input(inputs, "--images", o.images);
    add_input(inputs, "--labels", o.labels);
    check_output_path("--html", o.html, inputs);
  }
  const vision::Classifier c = vision::Classifier::load(o.model);
  const std::int64_t side = c.image_size();
  vision::Images images = vision::read_images(o.images, side, side);
  if (!o.labels.empty()) vision::read_labels(o.labels, images, static_cast<int>(c.classes()));
  for (const std::int64_t i : q.shown)  // before the forward: a typo costs no time
    if (i >= images.count)
      throw UsageError("--show-images", format("image %lld is outside [0, %lld): ", static_cast<long long>(i),
                                               static_cast<long long>(images.count)) +
                                            printable(o.images) + format(" holds %lld image%s", static_cast<long long>(images.count),
                                                                         images.count == 1 ? "" : "s"));
  const std::vector<vision::Prediction> predictions = c.classify(images, q.batch, q.tta);

  const std::vector<std::int64_t> chosen =
      o.html.empty() ? std::vector<std::int64_t>{} : page_images(o, q, images, predictions);
  if (!o.html.empty() && chosen.empty()) {
    (o.json ? std::cerr : out) << format("no page written: the model got all %lld images right (--misclassified)\n",
                                         static_cast<long long>(images.count));
  } else if (!o.html.empty()) {
    const bool vit = c.model() == "vit";
    viz::ImageAttentionView view;
    view.title = viz::page_title(vit ? "Vision Transformer" : "Point Transformer", o.model);
    const auto count = [](std::int64_t n) { return static_cast<long long>(n); };
    const std::string file = std::filesystem::path(o.images).filename().string();
    std::string which;
    if (!q.shown.empty()) {
      which = format("%lld of the %lld images in ", count(static_cast<std::int64_t>(chosen.size())), count(images.count)) +
              file + ", as --show-images chose them";
    } else if (q.misclassified) {
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < images.count; ++i)
        wrong += predictions[static_cast<std::size_t>(i)].label != images.labels[static_cast<std::size_t>(i)];
      which = format("The first %lld of the %lld images in ", count(static_cast<std::int64_t>(chosen.size())),
                     count(wrong)) +
              file + format(" the model got wrong (of %lld)", count(images.count));
    } else {
      which = format("The first %lld of the %lld images in ", count(static_cast<std::int64_t>(chosen.size())),
                     count(images.count)) +
              file;
    }
    view.subtitle =
        which + (vit ? ". Over each, the class token's attention rollout over its " +
                           std::to_string(c.network().vit.grid()) + "x" + std::to_string(c.network().vit.grid()) +
                           " patches: the more weight, the warmer and more opaque the patch"
                     : ". Over each, the " + std::to_string(c.network().point.points) +
                           " points the model read, coloured by the attention they receive in its last block");
    for (const std::int64_t i : chosen) {
      const vision::Prediction& p = predictions[static_cast<std::size_t>(i)];
      viz::ImageAttention im;
      im.caption = format("#%lld %s %.3f", static_cast<long long>(i), class_name(c, p.label).c_str(), p.score);
      if (!images.labels.empty()) {
        const std::int64_t truth = images.labels[static_cast<std::size_t>(i)];
        im.caption += truth == p.label ? " (right)" : " (wrong: it is " + class_name(c, truth) + ")";
      }
      im.height = images.height;
      im.width = images.width;
      im.pixels.assign(images.pixels.begin() + i * images.height * images.width,
                       images.pixels.begin() + (i + 1) * images.height * images.width);
      if (vit) {
        im.grid_h = im.grid_w = c.network().vit.grid();
        im.heat = c.rollout(images, i);
      } else {
        const vision::Classifier::PointView pv = c.point_view(images, i);
        const std::int64_t N = static_cast<std::int64_t>(pv.points.size() / 3);
        // [−1, 1] back to pixel centres: column = (x + 1)·(W − 1)/2.
        for (std::int64_t n = 0; n < N; ++n) {
          im.points.push_back((pv.points[static_cast<std::size_t>(3 * n)] + 1.0f) * 0.5f *
                              static_cast<float>(images.width - 1));
          im.points.push_back((pv.points[static_cast<std::size_t>(3 * n + 1)] + 1.0f) * 0.5f *
                              static_cast<float>(images.height - 1));
        }
        im.point_heat = pv.received;
        im.neighbors = pv.neighbors;
        im.neighbor = pv.neighbor;
        im.neighbor_weight = pv.weight;
      }
      view.images.push_back(std::move(im));
    }
    viz::write_file(o.html, viz::render_image_html(view));
    (o.json ? std::cerr : out) << "wrote " << printable(o.html) << '\n';
  }

  vision::Evaluation e;
  if (!images.labels.empty()) e = vision::evaluate(predictions, images.labels, c.classes());
  if (o.json) {
    for (std::size_t i = 0; i < predictions.size(); ++i) {
      nlohmann::ordered_json j;
      j["index"] = i;
      j["label"] = predictions[i].label;
      j["class"] = class_name(c, predictions[i].label);
      j["score"] = std::round(static_cast<double>(predictions[i].score) * 1e6) / 1e6;
      if (!images.labels.empty()) j["truth"] = images.labels[i];
      out << j.dump() << '\n';
    }
    if (!images.labels.empty()) print_summary(std::cerr, c, e);
    return 0;
  }
  out << format("%lld image%s of %lldx%lld from %s\n", static_cast<long long>(images.count),
                images.count == 1 ? "" : "s", static_cast<long long>(images.height),
                static_cast<long long>(images.width), printable(o.images).c_str());
  const std::int64_t listed = std::min<std::int64_t>(images.count, o.list);
  for (std::int64_t i = 0; i < listed; ++i) {
    const vision::Prediction& p = predictions[static_cast<std::size_t>(i)];
    out << format("%6lld  %lld %-12s %.3f", static_cast<long long>(i), static_cast<long long>(p.label),
                  class_label(c, p.label).c_str(), p.score);
    if (!images.labels.empty()) {
      const std::int64_t t = images.labels[static_cast<std::size_t>(i)];
      out << (t == p.label ? "  right" : "  wrong: " + class_label(c, t));
    }
    out << '\n';
  }
  if (listed < images.count)
    out << format("... %lld more (--list N shows more; --json prints every image)\n",
                  static_cast<long long>(images.count - listed));
  if (!images.labels.empty()) print_summary(out, c, e);
  return 0;
}

}  // namespace qkv::cli
