// The date translator committed under models/dates (weights and config.json), compiled
// into the library so `qkv translate` works from any directory with no files beside it.
//
// The files are pulled in by the assembler's .incbin at build time (CMake passes
// QKV_DATE_MODEL_DIR and makes this object depend on both files); a checkout without the
// model still builds, and embedded_date_model() then says so.

#include <cstddef>
#include <span>
#include <string>

#include "dates/dates.h"
#include "qkv/error.h"
#include "qkv/safetensors.h"

#ifdef QKV_DATE_MODEL_DIR
// 64-byte alignment, so SafeTensors could map the tensors in place (parse copies anyway).
__asm__(
    ".pushsection .rodata\n"
    ".balign 64\n"
    "qkv_date_model_weights_begin:\n"
    ".incbin \"" QKV_DATE_MODEL_DIR "/model.safetensors\"\n"
    "qkv_date_model_weights_end:\n"
    ".balign 8\n"
    "qkv_date_model_config_begin:\n"
    ".incbin \"" QKV_DATE_MODEL_DIR "/config.json\"\n"
    "qkv_date_model_config_end:\n"
    ".popsection\n");
extern "C" const unsigned char qkv_date_model_weights_begin[], qkv_date_model_weights_end[],
    qkv_date_model_config_begin[], qkv_date_model_config_end[];
#endif

namespace qkv::models {

bool has_embedded_date_model() {
#ifdef QKV_DATE_MODEL_DIR
  return true;
#else
  return false;
#endif
}

Seq2Seq embedded_date_model() {
#ifdef QKV_DATE_MODEL_DIR
  const std::string config(reinterpret_cast<const char*>(qkv_date_model_config_begin),
                           reinterpret_cast<const char*>(qkv_date_model_config_end));
  const auto* begin = reinterpret_cast<const std::byte*>(qkv_date_model_weights_begin);
  const auto* end = reinterpret_cast<const std::byte*>(qkv_date_model_weights_end);
  const SafeTensors weights =
      SafeTensors::parse(std::span<const std::byte>(begin, end), "<embedded models/dates/model.safetensors>");
  return Seq2Seq::load(weights,
                       Seq2SeqConfig::from_json(config, "<embedded models/dates/config.json>"),
                       nullptr, "<embedded models/dates>");
#else
  throw Error("this build of qkv has no embedded date model (models/dates/model.safetensors "
              "was missing at build time); pass --model DIR from `qkv train dates`");
#endif
}

}  // namespace qkv::models
