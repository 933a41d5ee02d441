// The applications' model types in the model registry (qkv/model_registry.h):
// "qkv-seq2seq" (apps/dates), "qkv-recommender" (apps/recommender), "qkv-vision"
// (apps/vision), with the library's own. The CLI's main and the Python module's init call
// it once; it is idempotent. An explicit call, not static initialisers: the libraries are
// static archives, and the linker drops an object file that nothing references.
#pragma once

namespace qkv::apps {
void register_model_types();
}  // namespace qkv::apps
