// "qkv-vision" in the model registry (qkv/model_registry.h): a directory written by
// `qkv train vit` and `qkv train point` (models/fashion-vit, models/fashion-point), loaded by
// Classifier::load. Its attention is over one image of a file (read_images: IDX, PNG or
// PGM): the ViT's over the class token and the patches, the point model's over its points.
#include <memory>
#include <sstream>
#include <string>

#include "qkv/error.h"
#include "qkv/model_registry.h"
#include "vision/vision.h"

namespace qkv::vision {
namespace {

class VisionEntry final : public models::Model {
 public:
  explicit VisionEntry(const std::string& dir) : dir_(dir), model_(Classifier::load(dir)) {}
  std::string model_type() const override { return "qkv-vision"; }
  std::string description() const override {
    std::ostringstream s;
    const VisionNetwork& n = model_.network();
    if (model_.model() == "vit")
      s << "image classifier, Vision Transformer: " << n.vit.layers << " blocks, " << n.vit.heads
        << " heads, " << n.vit.patches() << " patches of " << n.vit.patch_size << "x" << n.vit.patch_size;
    else
      s << "image classifier, Point Transformer: " << n.point.blocks << " blocks of vector attention over "
        << n.point.points << " points, " << n.point.neighbors << " neighbours each";
    s << ", " << model_.classes() << " classes";
    return s.str();
  }
  models::AttentionInput attention_input() const override { return models::AttentionInput::image; }
  models::ModelAttention attention(const models::AttentionRequest& r) const override {
    QKV_CHECK(!r.image_path.empty(), "qkv-vision shows the attention over an image: give an image file");
    const Images images = read_images(r.image_path, model_.image_size(), model_.image_size());
    QKV_CHECK(r.image_index >= 0 && r.image_index < images.count,
              "image index " << r.image_index << " is outside [0, " << images.count << "): '" << r.image_path
                             << "' holds " << images.count << " image" << (images.count == 1 ? "" : "s"));
    const Classifier::Attention att = model_.attention(images, r.image_index);
    const Prediction p = model_.classify(images.slice(r.image_index, r.image_index + 1)).front();
    models::ModelAttention a;
    a.tokens = att.tokens;
    a.view.title = viz::page_title("image classifier", dir_);
    a.view.subtitle = r.image_path + " #" + std::to_string(r.image_index) + ": " +
                      model_.class_names()[static_cast<std::size_t>(p.label)];
    a.view.groups.push_back({model_.model() == "vit" ? "self-attention" : "vector attention over neighbours",
                             att.tokens, att.tokens, att.layers});
    return a;
  }

 private:
  std::string dir_;
  Classifier model_;
};

}  // namespace

void register_vision_model_type() {
  models::register_model_type("qkv-vision", [](const std::string& dir) -> std::unique_ptr<models::Model> {
    return std::make_unique<VisionEntry>(dir);
  });
}

}  // namespace qkv::vision
