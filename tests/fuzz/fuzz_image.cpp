// libFuzzer harness for the grey image reader (apps/vision/image.h), PNG through libpng and PGM:
// parse_image must either accept the bytes or throw qkv::Error (libpng's errors come back
// by longjmp), and an image it accepts has H x W pixels within the limit. Any other
// exception, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vision/image.h"
#include "qkv/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  qkv::io::GreyImage image;
  try {
    image = qkv::io::parse_image(bytes, "fuzz");
  } catch (const qkv::Error&) {
    return 0;
  }
  if (image.height < 1 || image.width < 1 || image.height * image.width > qkv::io::kImageMaxPixels) __builtin_trap();
  if (image.pixels.size() != static_cast<std::size_t>(image.height * image.width)) __builtin_trap();
  return 0;
}
