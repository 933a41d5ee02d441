// PGM and PNG reading as one grey image. See image.h.
#include "vision/image.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "io/read_file.h"
#include "qkv/error.h"

namespace qkv::io {

namespace {

constexpr char kPngSignature[] = "\x89PNG\r\n\x1a\n";

std::string hex_start(std::string_view bytes) {
  std::string out;
  char byte[4];
  for (std::size_t i = 0; i < bytes.size() && i < 8; ++i) {
    std::snprintf(byte, sizeof byte, "%s%02x", i ? " " : "", static_cast<std::uint8_t>(bytes[i]));
    out += byte;
  }
  return out;
}

// How a byte reads in a message: 'x' when printable, else its value in hex.
std::string byte_text(char c) {
  char text[16];
  if (c >= 0x20 && c < 0x7f)
    std::snprintf(text, sizeof text, "'%c'", c);
  else
    std::snprintf(text, sizeof text, "byte %02x", static_cast<std::uint8_t>(c));
  return text;
}

// H x W checked against kImageMaxPixels without overflow.
void check_size(std::int64_t height, std::int64_t width, const std::string& name) {
  QKV_CHECK(width >= 1 && height >= 1, name << ": the image is " << height << " x " << width << " (H x W): empty");
  QKV_CHECK(width <= kImageMaxPixels && height <= kImageMaxPixels / width,
            name << ": the image is " << height << " x " << width << " (H x W), more than the limit of "
                 << kImageMaxPixels << " pixels");
}

// ---- PGM (netpbm.sourceforge.net/doc/pgm.html) ----

bool pgm_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Reads the header's and P2's numbers; '#' starts a comment to the end of the line.
class PgmCursor {
 public:
  PgmCursor(std::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {}
  std::size_t at() const { return at_; }
  void skip(std::size_t n) { at_ += n; }

  void skip_space() {
    while (at_ < bytes_.size()) {
      if (pgm_space(bytes_[at_])) {
        ++at_;
      } else if (bytes_[at_] == '#') {
        while (at_ < bytes_.size() && bytes_[at_] != '\n' && bytes_[at_] != '\r') ++at_;
      } else {
        break;
      }
    }
  }
  bool at_end() const { return at_ == bytes_.size(); }

  // A decimal number after white space and comments; `what` names it in errors.
  std::int64_t number(const std::string& what) {
    skip_space();
    QKV_CHECK(at_ < bytes_.size(), name_ << ": truncated PGM: the file ends before " << what);
    const char c = bytes_[at_];
    QKV_CHECK(c >= '0' && c <= '9',
              name_ << ": PGM: expected " << what << ", found " << byte_text(c) << " at byte " << at_);
    std::int64_t v = 0;
    while (at_ < bytes_.size() && bytes_[at_] >= '0' && bytes_[at_] <= '9') {
      v = v * 10 + (bytes_[at_++] - '0');
      QKV_CHECK(v <= (std::int64_t{1} << 40), name_ << ": PGM: " << what << " is too large");
    }
    return v;
  }

 private:
  std::string_view bytes_;
  const std::string& name_;
  std::size_t at_ = 0;
};

GreyImage parse_pgm(std::string_view bytes, const std::string& name) {
  const bool binary = bytes[1] == '5';
  PgmCursor cursor(bytes, name);
  cursor.skip(2);
  GreyImage image;
  image.width = cursor.number("the width");
  image.height = cursor.number("the height");
  check_size(image.height, image.width, name);
  const std::int64_t maxval = cursor.number("the maxval");
  QKV_CHECK(maxval >= 1 && maxval <= 255, name << ": PGM maxval " << maxval
                                               << " is not supported: only 1..255 (8-bit grey)"
                                               << (maxval > 255 && maxval <= 65535 ? "; this is a 16-bit PGM" : ""));
  const std::size_t count = static_cast<std::size_t>(image.height * image.width);
  // A maxval under 255 is scaled to 0..255, rounded. Pixels are stored as they are read,
  // so a header that claims more than the file holds allocates no more than it held.
  auto store = [&](std::int64_t v) {
    const std::size_t i = image.pixels.size();
    QKV_CHECK(v <= maxval, name << ": PGM pixel (row " << i / image.width << ", column " << i % image.width << ") is "
                                << v << ", over the maxval " << maxval);
    image.pixels.push_back(static_cast<std::uint8_t>((v * 255 + maxval / 2) / maxval));
  };
  if (binary) {
    // P5: exactly one white-space byte after the maxval, then H * W bytes.
    QKV_CHECK(!cursor.at_end() && pgm_space(bytes[cursor.at()]),
              name << ": truncated PGM: no white space after the maxval (the raster follows it)");
    cursor.skip(1);
    const std::size_t left = bytes.size() - cursor.at();
    QKV_CHECK(left >= count, name << ": truncated PGM: " << image.height << " x " << image.width << " (H x W) needs "
                                  << count << " bytes of pixels, the file has " << left);
    QKV_CHECK(left == count, name << ": " << left - count << " byte(s) after the " << count
                                  << " pixels of the PGM (a file of several images is not read)");
    image.pixels.reserve(count);
    for (std::size_t i = 0; i < count; ++i) store(static_cast<std::uint8_t>(bytes[cursor.at() + i]));
    return image;
  }
  // P2: H * W decimal numbers, separated by white space.
  for (std::size_t i = 0; i < count; ++i) {
    cursor.skip_space();
    QKV_CHECK(!cursor.at_end(), name << ": truncated PGM: the file ends after " << i << " of the " << count
                                     << " pixels (" << image.height << " x " << image.width << ", H x W)");
    store(cursor.number("pixel " + std::to_string(i)));
  }
  cursor.skip_space();
  QKV_CHECK(cursor.at_end(), name << ": data after the " << count << " pixels of the PGM, at byte " << cursor.at());
  return image;
}

// ---- PNG, through libpng ----
//
// libpng reports errors by longjmp. The functions that call setjmp (png_header,
// png_pixels) and the callbacks hold no objects with destructors, so a longjmp out of
// libpng skips nothing C++ must run; the C++ objects live in parse_png, around them.

struct PngErrorText {
  char text[256] = "";
};

void on_png_error(png_structp png, png_const_charp message) {
  auto* error = static_cast<PngErrorText*>(png_get_error_ptr(png));
  std::snprintf(error->text, sizeof error->text, "%s", message);
  png_longjmp(png, 1);
}

// Warnings (a bad ancillary chunk's CRC, an unknown sRGB profile) leave the pixels
// readable; they are not printed.
void on_png_warning(png_structp, png_const_charp) {}

struct PngInput {
  const unsigned char* data;
  std::size_t size;
  std::size_t at;
};

void read_png_input(png_structp png, png_bytep out, std::size_t n) {
  auto* input = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > input->size - input->at) png_error(png, "the file ends inside the PNG (truncated)");
  std::memcpy(out, input->data + input->at, n);
  input->at += n;
}

// Every chunk's declared length checked against the bytes the file has, before libpng
// reads any: libpng allocates a chunk's declared length before it reads the data, so a
// 44-byte file whose tEXt chunk claims 2^31 - 1 bytes took 2 GB (issue 48). The chunks
// are walked up to IEND (or the end of the file); what comes after IEND is libpng's.
void check_png_chunks(std::string_view bytes, const std::string& name) {
  const auto u32 = [&](std::size_t at) {
    return (std::uint32_t{static_cast<std::uint8_t>(bytes[at])} << 24) |
           (std::uint32_t{static_cast<std::uint8_t>(bytes[at + 1])} << 16) |
           (std::uint32_t{static_cast<std::uint8_t>(bytes[at + 2])} << 8) | static_cast<std::uint8_t>(bytes[at + 3]);
  };
  std::size_t at = 8;  // after the signature
  while (at < bytes.size()) {
    const std::size_t left = bytes.size() - at;
    QKV_CHECK(left >= 8, name << ": corrupt or truncated PNG: the file ends inside the PNG (truncated): " << left
                              << " byte(s) at byte " << at << " are not a whole chunk header (8 bytes)");
    const std::uint32_t length = u32(at);
    std::string type;
    for (std::size_t i = 4; i < 8; ++i) {
      const char c = bytes[at + i];
      type += (c >= 0x20 && c < 0x7f) ? c : '?';
    }
    QKV_CHECK(length <= 0x7fffffffu, name << ": corrupt PNG: chunk '" << type << "' at byte " << at
                                          << " declares " << length << " bytes, over PNG's limit of 2^31 - 1");
    QKV_CHECK(std::uint64_t{length} + 12 <= left,
              name << ": corrupt or truncated PNG: the file ends inside the PNG (truncated): chunk '" << type
                   << "' at byte " << at << " declares " << length << " bytes of data, the file has "
                   << (left >= 12 ? left - 12 : 0) << " after its header and CRC");
    at += std::size_t{length} + 12;
    if (type == "IEND") break;
  }
}

struct PngHeader {
  png_uint_32 width;
  png_uint_32 height;
  int channels;  // after the transforms: 1 grey, 3 RGB, or 1 palette index
  bool palette;  // the pixels read are indices into the PLTE entries (to be checked)
};

// The header, with the transforms to 8-bit grey or RGB set. False on a libpng error.
bool png_header(png_structp png, png_infop info, PngHeader* header) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int colour = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  // A palette image is read as its indices (1, 2 and 4-bit ones unpacked to a byte each)
  // and mapped here: libpng's own expansion reads an index past the PLTE entries as
  // black, where this refuses it (issue 48).
  header->palette = colour == PNG_COLOR_TYPE_PALETTE;
  if (header->palette && depth < 8) png_set_packing(png);
  if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_scale_16(png);  // v * 255 / 65535, rounded
  if (colour & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  header->width = png_get_image_width(png, info);
  header->height = png_get_image_height(png, info);
  header->channels = png_get_channels(png, info);
  return true;
}

// The pixels into `rows`, then the chunks after them (their CRCs checked). False on a
// libpng error.
bool png_pixels(png_structp png, png_infop info, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, info);
  return true;
}

struct PngReadStruct {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReadStruct() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

GreyImage parse_png(std::string_view bytes, const std::string& name) {
  PngErrorText error;
  PngInput input{reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), 0};
  PngReadStruct read;
  read.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &error, on_png_error, on_png_warning);
  QKV_CHECK_KIND(read.png != nullptr, ErrorKind::memory, name << ": libpng cannot start reading");
  read.info = png_create_info_struct(read.png);
  QKV_CHECK_KIND(read.info != nullptr, ErrorKind::memory, name << ": libpng cannot start reading");
  png_set_read_fn(read.png, &input, read_png_input);

  PngHeader header{};
  QKV_CHECK(png_header(read.png, read.info, &header), name << ": corrupt or truncated PNG: " << error.text);
  GreyImage image;
  image.height = header.height;
  image.width = header.width;
  check_size(image.height, image.width, name);
  QKV_CHECK(header.channels == 1 || header.channels == 3,
            name << ": PNG with " << header.channels << " channels after conversion (expected 1 or 3)");
  png_colorp palette = nullptr;
  int palette_size = 0;
  if (header.palette)
    QKV_CHECK(png_get_PLTE(read.png, read.info, &palette, &palette_size) == PNG_INFO_PLTE && palette_size > 0,
              name << ": corrupt PNG: a palette image without a PLTE chunk");
  const std::size_t row_bytes = static_cast<std::size_t>(image.width) * header.channels;  // (W, C)
  std::vector<std::uint8_t> pixels(row_bytes * image.height);                             // (H, W, C)
  std::vector<png_bytep> rows(image.height);                                              // (H)
  for (std::int64_t y = 0; y < image.height; ++y) rows[y] = pixels.data() + y * row_bytes;
  QKV_CHECK(png_pixels(read.png, read.info, rows.data()), name << ": corrupt or truncated PNG: " << error.text);

  if (header.palette) {
    image.pixels.resize(pixels.size());
    for (std::size_t i = 0; i < pixels.size(); ++i) {
      const int index = pixels[i];
      QKV_CHECK(index < palette_size, name << ": corrupt PNG: pixel (row " << i / image.width << ", column "
                                           << i % image.width << ") is palette index " << index
                                           << ", past the " << palette_size << " entries of its PLTE chunk");
      const png_color& c = palette[index];
      image.pixels[i] = static_cast<std::uint8_t>((c.red * 19595 + c.green * 38470 + c.blue * 7471 + 0x8000) >> 16);
    }
    return image;
  }
  if (header.channels == 1) {
    image.pixels = std::move(pixels);
    return image;
  }
  // Pillow's RGB -> L (libImaging/Convert.c rgb2l): ITU-R 601-2 luma in 16-bit fixed point.
  image.pixels.resize(static_cast<std::size_t>(image.height * image.width));
  for (std::size_t i = 0; i < image.pixels.size(); ++i) {
    const std::uint8_t* rgb = pixels.data() + 3 * i;
    image.pixels[i] = static_cast<std::uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
  }
  return image;
}

}  // namespace

GreyImage parse_image(std::string_view bytes, const std::string& name) {
  QKV_CHECK(!bytes.empty(), name << ": empty (0 bytes; expected a PNG or PGM image)");
  if (bytes.starts_with(std::string_view(kPngSignature, 8))) {
    check_png_chunks(bytes, name);
    return parse_png(bytes, name);
  }
  if (bytes.size() >= 2 && bytes[0] == 'P' && (bytes[1] == '5' || bytes[1] == '2') &&
      (bytes.size() == 2 || pgm_space(bytes[2]) || bytes[2] == '#'))
    return parse_pgm(bytes, name);
  const bool netpbm =
      bytes.size() >= 2 && bytes[0] == 'P' && std::string_view("13467").find(bytes[1]) != std::string_view::npos;
  QKV_CHECK(!netpbm, name << ": a netpbm image of type P" << bytes[1]
                          << " (PBM, PPM or PAM): only grey PGM (P5 or P2) and PNG are read");
  const bool gzip =
      bytes.size() >= 2 && static_cast<std::uint8_t>(bytes[0]) == 0x1f && static_cast<std::uint8_t>(bytes[1]) == 0x8b;
  const bool idx = bytes.size() >= 3 && bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 8;
  QKV_CHECK(false, name << ": not a PNG or PGM image (it starts with " << hex_start(bytes) << ")"
                        << (gzip  ? ": gzip data, an IDX file?"
                            : idx ? ": an IDX file?"
                                  : ""));
  return {};
}

GreyImage read_image(const std::string& path, std::int64_t height, std::int64_t width) {
  const std::string name = "image '" + path + "'";
  // 64 MiB: a PNG of kImageMaxPixels RGB pixels, stored uncompressed, is 48 MiB.
  GreyImage image = parse_image(read_file(path, "image", std::uint64_t{64} << 20), name);
  QKV_CHECK((height == 0 || image.height == height) && (width == 0 || image.width == width),
            name << ": the image is " << image.height << " x " << image.width << " (H x W), expected "
                 << (height ? std::to_string(height) : "any") << " x " << (width ? std::to_string(width) : "any"));
  return image;
}

}  // namespace qkv::io
