// Grey images (apps/vision/image.h): PGM P5 and P2, PNG of every colour type and bit depth
// (written here with libpng), the size check, and malformed files, each error naming the file.
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "vision/image.h"
#include "attention/expect_error.h"
#include "temp_dir.h"
#include "qkv/error.h"

namespace fs = std::filesystem;

namespace {

using qkv::io::GreyImage;
using qkv::io::parse_image;
using qkv::io::read_image;
using namespace std::string_literals;  // "\x00"s: literals that hold NUL bytes

using qkv::testing::expect_error_mentioning;
using qkv::testing::TempDir;

// Writes `bytes` to dir/name -> its path (checked written whole).
std::string at(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.write(name, bytes).string();
  EXPECT_EQ(fs::file_size(path), bytes.size()) << path;
  return path;
}


// A PNG written by libpng. `rows` are the packed rows as PNG stores them (16-bit samples
// big-endian, sub-byte samples packed from the high bit).
struct PngSpec {
  int width = 0;
  int height = 0;
  int colour = PNG_COLOR_TYPE_GRAY;
  int depth = 8;
  bool interlaced = false;
  std::vector<png_color> palette;
  std::vector<std::string> rows;  // (H) rows of packed bytes
};

void append_png(png_structp png, png_bytep data, std::size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}

constexpr char kPngStart[] = "\x89PNG\r\n\x1a\n";

std::string png_bytes(const PngSpec& spec) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, append_png, nullptr);
  png_set_check_for_invalid_index(png, 0);  // palette indices past the PLTE entries may be written
  png_set_IHDR(png, info, spec.width, spec.height, spec.depth, spec.colour,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!spec.palette.empty()) png_set_PLTE(png, info, spec.palette.data(), static_cast<int>(spec.palette.size()));
  std::vector<png_bytep> rows;
  for (const std::string& row : spec.rows) rows.push_back(reinterpret_cast<png_bytep>(const_cast<char*>(row.data())));
  png_set_rows(png, info, rows.data());
  png_write_png(png, info, PNG_TRANSFORM_IDENTITY, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// A 28 x 28 grey pattern, as Fashion-MNIST's images are.
std::vector<std::uint8_t> pattern(int h, int w) {
  std::vector<std::uint8_t> p;
  for (int i = 0; i < h * w; ++i) p.push_back(static_cast<std::uint8_t>((i * 37 + i / w) & 0xFF));
  return p;
}

std::vector<std::string> grey_rows(const std::vector<std::uint8_t>& pixels, int h, int w) {
  std::vector<std::string> rows;
  for (int y = 0; y < h; ++y) rows.emplace_back(reinterpret_cast<const char*>(pixels.data()) + y * w, w);
  return rows;
}

// Pillow's Image.convert("L") of one RGB pixel (ITU-R 601-2 luma, 16-bit fixed point).
std::uint8_t luma(int r, int g, int b) {
  return static_cast<std::uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

TEST(Image, PngGrey8) {
  TempDir dir;
  const auto pixels = pattern(28, 28);
  for (const bool interlaced : {false, true}) {
    const std::string path =
        at(dir, "grey.png", png_bytes({28, 28, PNG_COLOR_TYPE_GRAY, 8, interlaced, {}, grey_rows(pixels, 28, 28)}));
    const GreyImage image = read_image(path, 28, 28);
    EXPECT_EQ(image.height, 28);
    EXPECT_EQ(image.width, 28);
    EXPECT_EQ(image.pixels, pixels) << "interlaced " << interlaced;
  }
  // Not square: rows are rows (H = 2, W = 3).
  const GreyImage wide =
      parse_image(png_bytes({3, 2, PNG_COLOR_TYPE_GRAY, 8, false, {}, {"\x01\x02\x03", "\x04\x05\x06"}}), "w");
  EXPECT_EQ(wide.height, 2);
  EXPECT_EQ(wide.width, 3);
  EXPECT_EQ(wide.pixels, (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
}

TEST(Image, PngOtherDepthsAndColoursBecomeGrey8) {
  // 1-bit and 4-bit grey scale to 0..255: 1 -> 255, 4-bit v -> 17 v.
  EXPECT_EQ(parse_image(png_bytes({4, 1, PNG_COLOR_TYPE_GRAY, 1, false, {}, {"\xA0"}}), "g1").pixels,
            (std::vector<std::uint8_t>{255, 0, 255, 0}));
  EXPECT_EQ(
      parse_image(png_bytes({3, 1, PNG_COLOR_TYPE_GRAY, 4, false, {}, {std::string("\x0F\x80", 2)}}), "g4").pixels,
      (std::vector<std::uint8_t>{0, 255, 8 * 17}));
  // 16-bit: v * 255 / 65535 rounded (257 k -> k exactly; 0x8080 -> 128.0; 0x00FF -> 0.99 -> 1,
  // where keeping the high byte would give 0).
  EXPECT_EQ(
      parse_image(png_bytes({5, 1, PNG_COLOR_TYPE_GRAY, 16, false, {}, {"\x00\x00\xFF\xFF\x65\x65\x80\x80\x00\xFF"s}}),
                  "g16")
          .pixels,
      (std::vector<std::uint8_t>{0, 255, 0x65, 128, 1}));
  // Grey + alpha: the alpha is dropped.
  EXPECT_EQ(parse_image(
                png_bytes({2, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, {}, {std::string("\x10\x00\xF0\x80", 4)}}), "ga")
                .pixels,
            (std::vector<std::uint8_t>{0x10, 0xF0}));
  // RGB as Pillow converts it: red 76, green 150, blue 29 (Pillow's own values), white 255.
  EXPECT_EQ(luma(255, 0, 0), 76);
  EXPECT_EQ(luma(0, 255, 0), 150);
  EXPECT_EQ(luma(0, 0, 255), 29);
  const std::string rgb("\xFF\x00\x00\x00\xFF\x00\x00\x00\xFF\xFF\xFF\xFF\x12\x34\x56", 15);
  EXPECT_EQ(parse_image(png_bytes({5, 1, PNG_COLOR_TYPE_RGB, 8, false, {}, {rgb}}), "rgb").pixels,
            (std::vector<std::uint8_t>{76, 150, 29, 255, luma(0x12, 0x34, 0x56)}));
  // RGBA: the alpha is dropped, as Pillow's convert("L") drops it.
  EXPECT_EQ(
      parse_image(
          png_bytes(
              {2, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8, false, {}, {std::string("\xFF\x00\x00\x00\x00\xFF\x00\xFF", 8)}}),
          "rgba")
          .pixels,
      (std::vector<std::uint8_t>{76, 150}));
  // 16-bit RGB: scaled to 8 bits, then the luma.
  EXPECT_EQ(
      parse_image(png_bytes({1, 1, PNG_COLOR_TYPE_RGB, 16, false, {}, {std::string("\xFF\xFF\x00\x00\x00\x00", 6)}}),
                  "rgb16")
          .pixels,
      (std::vector<std::uint8_t>{76}));
  // Palette, 2 bits a pixel: the entries' colours, then the luma.
  const std::vector<png_color> palette = {{0, 0, 0}, {255, 0, 0}, {0x12, 0x34, 0x56}, {255, 255, 255}};
  EXPECT_EQ(parse_image(png_bytes({4, 1, PNG_COLOR_TYPE_PALETTE, 2, false, palette, {"\x1B"}}), "p2").pixels,
            (std::vector<std::uint8_t>{0, 76, luma(0x12, 0x34, 0x56), 255}));
}

TEST(Image, Pgm) {
  TempDir dir;
  // P5 with comments in the header; the one white-space byte after the maxval may be a
  // byte a pixel could be ('\n' = 10), and pixels may look like white space or '#'.
  const std::string p5 = at(dir, "a.pgm", "P5\n# made by hand\n3 2 # W H\n255\n\x0a#\x00\xff\x20\x09"s);
  GreyImage image = read_image(p5, 2, 3);
  EXPECT_EQ(image.pixels, (std::vector<std::uint8_t>{10, '#', 0, 255, 32, 9}));
  // P2, comments between numbers too; maxval 15 scales to 0..255 (v * 17).
  const std::string p2 = at(dir, "b.pgm", "P2\n3 2\n15\n0 1 # first row\n15\n7\t14   2\n");
  image = read_image(p2);
  EXPECT_EQ(image.height, 2);
  EXPECT_EQ(image.width, 3);
  EXPECT_EQ(image.pixels, (std::vector<std::uint8_t>{0, 17, 255, 119, 238, 34}));
  // maxval 100: rounded, 50 -> 127.5 -> 128 (round half up), 1 -> 2.55 -> 3.
  EXPECT_EQ(parse_image("P2 2 1 100 50 1", "c").pixels, (std::vector<std::uint8_t>{128, 3}));
  // A 28 x 28 P5, as `qkv classify` will read.
  const auto pixels = pattern(28, 28);
  const std::string big = at(dir, "28.pgm", "P5 28 28 255\n" + std::string(pixels.begin(), pixels.end()));
  EXPECT_EQ(read_image(big, 28, 28).pixels, pixels);
}

TEST(Image, MalformedPgmNamesTheFile) {
  TempDir dir;
  const auto check = [&](const std::string& name, const std::string& bytes, const std::string& what) {
    const std::string path = at(dir, name, bytes);
    expect_error_mentioning([&] { read_image(path); }, {"image '" + path + "'", what});
  };
  check("header.pgm", "P5 28", "truncated PGM: the file ends before the height");
  check("bare.pgm", "P5", "truncated PGM: the file ends before the width");
  check("word.pgm", "P5 28 x8 255\n", "expected the height, found 'x'");
  check("zero.pgm", "P2 0 28 255\n", "the image is 28 x 0 (H x W): empty");
  check("huge.pgm", "P5 100000 100000 255\n",
        "the image is 100000 x 100000 (H x W), more than the limit of 16777216 pixels");
  check("sixteen.pgm", "P5 2 2 65535\n",
        "PGM maxval 65535 is not supported: only 1..255 (8-bit grey); this is a 16-bit PGM");
  check("maxval0.pgm", "P2 1 1 0\n0\n", "PGM maxval 0 is not supported");
  check("nospace.pgm", "P5 1 1 255", "no white space after the maxval");
  check("short.pgm", "P5 3 2 255\n" + std::string(5, 'x'),
        "truncated PGM: 2 x 3 (H x W) needs 6 bytes of pixels, the file has 5");
  check("long.pgm", "P5 3 2 255\n" + std::string(8, 'x'), "2 byte(s) after the 6 pixels");
  check("over.pgm", "P5 2 1 100\n\x10\xC8", "PGM pixel (row 0, column 1) is 200, over the maxval 100");
  check("few.pgm", "P2 2 2 255\n1 2 3\n", "truncated PGM: the file ends after 3 of the 4 pixels");
  check("many.pgm", "P2 2 1 255\n1 2 3\n", "data after the 2 pixels of the PGM");
  check("p2over.pgm", "P2 2 1 9\n1 10\n", "PGM pixel (row 0, column 1) is 10, over the maxval 9");
  check("p2word.pgm", "P2 2 1 9\n1 x\n", "expected pixel 1, found 'x'");
  check("p2byte.pgm", "P2 2 1 9\n1 \x01\n", "expected pixel 1, found byte 01 at byte 11");
}

TEST(Image, MalformedPngNamesTheFile) {
  TempDir dir;
  const auto pixels = pattern(28, 28);
  const std::string good = png_bytes({28, 28, PNG_COLOR_TYPE_GRAY, 8, false, {}, grey_rows(pixels, 28, 28)});
  const auto check = [&](const std::string& name, const std::string& bytes, const std::string& what) {
    const std::string path = at(dir, name, bytes);
    expect_error_mentioning([&] { read_image(path); }, {"image '" + path + "'", what});
  };
  // Cut in the IHDR, in the image data and before the IEND chunk.
  check("cut20.png", good.substr(0, 20), "corrupt or truncated PNG: the file ends inside the PNG (truncated)");
  check("cut-half.png", good.substr(0, good.size() / 2),
        "corrupt or truncated PNG: the file ends inside the PNG (truncated)");
  check("cut-end.png", good.substr(0, good.size() - 6), "corrupt or truncated PNG");
  // A flipped byte in the IHDR's width: its CRC no longer matches.
  std::string ihdr = good;
  ihdr[18] ^= 0x01;
  check("ihdr.png", ihdr, "corrupt or truncated PNG: IHDR: CRC error");
  // A flipped byte inside the IDAT chunk's data.
  std::string idat = good;
  idat[good.find("IDAT") + 10] ^= 0x40;
  check("idat.png", idat, "corrupt or truncated PNG: IDAT");
  // An IHDR (with a right CRC) that claims 5000 x 5000: refused before anything is allocated.
  std::string chunk = std::string("IHDR") + std::string("\x00\x00\x13\x88\x00\x00\x13\x88\x08\x00\x00\x00\x00", 13);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(chunk.size()));
  std::string huge = good.substr(0, 8) + std::string("\x00\x00\x00\x0d", 4) + chunk;
  for (const int shift : {24, 16, 8, 0}) huge += static_cast<char>((crc >> shift) & 0xFF);
  check("huge.png", huge + good.substr(33), "the image is 5000 x 5000 (H x W), more than the limit of 16777216 pixels");
  // The right image at the wrong size.
  const std::string path = at(dir, "good.png", good);
  expect_error_mentioning([&] { read_image(path, 32, 32); },
               {"image '" + path + "'", "the image is 28 x 28 (H x W), expected 32 x 32"});
  expect_error_mentioning([&] { read_image(path, 0, 27); }, {path, "expected any x 27"});
}

// A chunk: its length, type, data and CRC (of type and data).
std::string png_chunk(const std::string& type, const std::string& data, std::uint32_t length) {
  std::string out;
  for (const int shift : {24, 16, 8, 0}) out += static_cast<char>((length >> shift) & 0xFF);
  const std::string body = type + data;
  out += body;
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  for (const int shift : {24, 16, 8, 0}) out += static_cast<char>((crc >> shift) & 0xFF);
  return out;
}

// Issue 48 row 10: a 44-byte PNG whose tEXt chunk claims 2^31 - 1 bytes took 2.1 GB and
// 5 s before libpng found it truncated. Chunk lengths are checked against the file first.
TEST(Image, PngChunkLongerThanTheFileIsRefusedBeforeReading) {
  TempDir dir;
  const auto check = [&](const std::string& name, const std::string& bytes, const std::vector<std::string>& what) {
    const std::string path = at(dir, name, bytes);
    std::vector<std::string> parts = what;
    parts.insert(parts.begin(), "image '" + path + "'");
    expect_error_mentioning([&] { read_image(path); }, parts);
  };
  const std::string ihdr = png_chunk("IHDR", "\x00\x00\x00\x01\x00\x00\x00\x01\x08\x00\x00\x00\x00"s, 13);
  const std::string start = std::string(kPngStart, 8) + ihdr;
  const std::string text = start + "\x7f\xff\xff\xfftEXtabc"s;
  ASSERT_EQ(text.size(), 44u);
  check("text.png", text, {"truncated", "chunk 'tEXt' at byte 33 declares 2147483647 bytes of data, the file has 0"});
  check("text4g.png", start + "\xff\xff\xff\xfftEXtabc"s,
        {"chunk 'tEXt' at byte 33 declares 4294967295 bytes, over PNG's limit of 2^31 - 1"});
  // The same for an IDAT, and a chunk header cut short.
  check("idat.png", start + png_chunk("IDAT", "", 0x10000000).substr(0, 12), {"chunk 'IDAT' at byte 33 declares 268435456"});
  check("cut.png", start + "\x00\x00"s, {"truncated", "2 byte(s) at byte 33 are not a whole chunk header"});
  // Bytes after IEND are not chunks this reads.
  const auto pixels = pattern(28, 28);
  const std::string good = png_bytes({28, 28, PNG_COLOR_TYPE_GRAY, 8, false, {}, grey_rows(pixels, 28, 28)});
  EXPECT_EQ(parse_image(good + "\x7f\xff\xff\xff"s, "after").pixels, pixels);
}

// Issue 48 row 18: a palette of 1 entry with indices up to 255 read the missing entries
// as black; an index past the palette is an error naming it and the palette's size.
TEST(Image, PngPaletteIndexPastThePaletteIsRefused) {
  TempDir dir;
  const std::vector<png_color> one = {{10, 20, 30}};
  const std::string path = at(dir, "p.png", png_bytes({4, 1, PNG_COLOR_TYPE_PALETTE, 8, false, one, {"\x00\x00\x80\xff"s}}));
  expect_error_mentioning([&] { read_image(path); },
                          {"image '" + path + "'", "pixel (row 0, column 2) is palette index 128, past the 1 entries of its PLTE chunk"});
  // 2 bits a pixel, 3 entries: index 3 in the second row of an interlaced image.
  const std::vector<png_color> three = {{0, 0, 0}, {255, 255, 255}, {1, 2, 3}};
  expect_error_mentioning(
      [&] { parse_image(png_bytes({4, 2, PNG_COLOR_TYPE_PALETTE, 2, true, three, {"\x1A"s, "\x1B"s}}), "p2"); },
      {"p2", "pixel (row 1, column 3) is palette index 3, past the 3 entries"});
  // Every index within the palette: read as before.
  EXPECT_EQ(parse_image(png_bytes({4, 1, PNG_COLOR_TYPE_PALETTE, 8, false, one, {"\x00\x00\x00\x00"s}}), "ok").pixels,
            std::vector<std::uint8_t>(4, luma(10, 20, 30)));
}

TEST(Image, NotAnImageNamesTheFile) {
  TempDir dir;
  const auto check = [&](const std::string& name, const std::string& bytes, const std::string& what) {
    const std::string path = at(dir, name, bytes);
    expect_error_mentioning([&] { read_image(path); }, {"image '" + path + "'", what});
  };
  check("empty.png", "", "empty (0 bytes; expected a PNG or PGM image)");
  check("photo.jpg", "\xFF\xD8\xFF\xE0\x00\x10JFIF"s,
        "not a PNG or PGM image (it starts with ff d8 ff e0 00 10 4a 46)");
  check("colour.ppm", "P6 1 1 255\n\x01\x02\x03",
        "a netpbm image of type P6 (PBM, PPM or PAM): only grey PGM (P5 or P2) and PNG are read");
  check("images.gz", "\x1f\x8b\x08\x00"s, "gzip data, an IDX file?");
  check("images-idx3-ubyte", std::string("\x00\x00\x08\x03\x00\x00\x00\x01", 8), "an IDX file?");
  expect_error_mentioning([] { read_image("/nonexistent/x.png"); }, {"image '/nonexistent/x.png'", "cannot open"});
}

}  // namespace
