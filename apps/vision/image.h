// One grey image from a PNG or PGM file, told apart by their magic bytes (PNG's 89 'PNG'
// \r \n 1a \n; PGM's "P5" binary or "P2" ASCII). Internal to the library (`qkv classify
// --images`, which then checks the size the model takes).
//
// What is read as grey, 8 bits (0 black .. 255 white):
//   PGM   maxval 1..255 (16-bit PGM, maxval over 255, is refused); '#' comments wherever
//         white space may stand; a maxval under 255 is scaled, v * 255 / maxval rounded.
//   PNG   any colour type and bit depth, through libpng: grey as is; 1, 2 and 4-bit grey
//         scaled to 8 bits; 16-bit scaled to 8 (v * 255 / 65535 rounded); palette
//         expanded to its colours; colour to grey as Pillow's Image.convert("L") does
//         (ITU-R 601-2 luma, L = (19595 R + 38470 G + 7471 B + 2^15) >> 16), so images
//         prepared with Pillow/torchvision read the same. Alpha (and tRNS) is dropped, as
//         Pillow drops it; gAMA and colour profiles are ignored.
// Anything else (PPM, PBM, JPEG, IDX, ...) is refused naming what the file starts with.
// Errors are qkv::Error "<name>: <what>", where read_image names the file "image '<path>'".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::io {

struct GreyImage {
  std::int64_t height = 0;           // H
  std::int64_t width = 0;            // W
  std::vector<std::uint8_t> pixels;  // (H, W) row-major, 0 black .. 255 white
};

// The most pixels an image may have, 2^24 (4096 x 4096): a header that claims more is
// refused before anything is allocated, so a small file cannot claim gigabytes. (A PGM's
// pixels are stored as they are read; a PNG's rows, at most 48 MiB, are allocated once
// its header is read, as libpng's reading of whole images needs.)
inline constexpr std::int64_t kImageMaxPixels = std::int64_t{1} << 24;

// The image in `bytes`, a whole PNG or PGM file. Throws qkv::Error "<name>: ..." for an
// empty or unknown file, a truncated or corrupt one, data after a PGM's raster, a pixel
// over a PGM's maxval, and more than kImageMaxPixels pixels.
GreyImage parse_image(std::string_view bytes, const std::string& name);

// The PNG or PGM file at `path`, read as parse_image reads bytes; errors name it.
// `height` and `width`, when not 0, are what its size must be (an error says both).
GreyImage read_image(const std::string& path, std::int64_t height = 0, std::int64_t width = 0);

}  // namespace qkv::io
