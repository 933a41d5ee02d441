// qkv::apps::register_model_types (model_types.h): the one place that knows every
// application that registers a model type.
#include "model_types.h"

#include <mutex>

#include "dates/dates.h"
#include "qkv/model_registry.h"
#include "recommender/recommender.h"
#include "vision/vision.h"

namespace qkv::apps {

void register_model_types() {
  static std::once_flag once;
  std::call_once(once, [] {
    models::register_library_model_types();
    dates::register_date_model_type();
    recommender::register_recommender_model_type();
    vision::register_vision_model_type();
  });
}

}  // namespace qkv::apps
