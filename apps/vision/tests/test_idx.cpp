// IDX files (apps/vision/idx.h): round trips plain and gzip, the images and labels readers, and
// every malformed input, each error naming the file.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "vision/idx.h"
#include "attention/expect_error.h"
#include "temp_dir.h"
#include "qkv/error.h"

namespace fs = std::filesystem;

namespace {

using qkv::io::idx_bytes;
using qkv::io::IdxArray;
using qkv::io::parse_idx;
using qkv::io::read_idx;
using qkv::io::read_idx_images;
using qkv::io::read_idx_labels;
using qkv::io::write_idx;

using qkv::testing::expect_error_mentioning;
using qkv::testing::TempDir;


void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// `bytes` as one gzip member (zlib's deflate with gzip framing, as gzip(1) writes).
std::string gzip(const std::string& bytes) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// (N, H, W) images whose pixels are a pattern that a shifted or dropped byte changes.
IdxArray images(std::int64_t n, std::int64_t h, std::int64_t w) {
  IdxArray a{{n, h, w}, {}};
  for (std::int64_t i = 0; i < n * h * w; ++i) a.data.push_back(static_cast<std::uint8_t>((i * 7 + i / 256) & 0xFF));
  return a;
}

// The header bytes 00 00 TYPE NDIMS and the sizes.
std::string header(std::uint8_t type, const std::vector<std::uint32_t>& dims) {
  std::string out = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (const std::uint32_t d : dims)
    for (const int shift : {24, 16, 8, 0}) out += static_cast<char>((d >> shift) & 0xFF);
  return out;
}

TEST(Idx, WriterBytesAreTheFormat) {
  const IdxArray a{{2, 3}, {1, 2, 3, 4, 5, 6}};
  EXPECT_EQ(idx_bytes(a), header(0x08, {2, 3}) + std::string("\x01\x02\x03\x04\x05\x06"));
  // The big-endian sizes of Fashion-MNIST's training images: 60000 = 0x0000EA60.
  EXPECT_EQ(idx_bytes(images(60000, 1, 1)).substr(0, 8), std::string("\x00\x00\x08\x03\x00\x00\xea\x60", 8));
}

TEST(Idx, RoundTripPlainAndGzip) {
  TempDir dir;
  const IdxArray a = images(5, 28, 28);
  write_idx(dir.file("plain-idx3-ubyte"), a);
  write_file(dir.file("train-idx3-ubyte.gz"), gzip(idx_bytes(a)));
  for (const std::string name : {"plain-idx3-ubyte", "train-idx3-ubyte.gz"}) {
    const IdxArray b = read_idx_images(dir.file(name), 28, 28);
    EXPECT_EQ(b.dims, a.dims) << name;
    EXPECT_EQ(b.data, a.data) << name;
  }
  // Several gzip members, as `cat a.gz b.gz` makes, inflate to their concatenation.
  const std::string bytes = idx_bytes(a);
  const IdxArray c = parse_idx(gzip(bytes.substr(0, 100)) + gzip(bytes.substr(100)), "two members");
  EXPECT_EQ(c.data, a.data);
  // A gzip member may hold nothing: the file's data are still exactly the sizes' product.
  EXPECT_EQ(parse_idx(gzip(bytes) + gzip(""), "empty member").data, a.data);

  // More than the 1 MiB first chunk of the gzip reader: its doubling is exercised.
  const IdxArray big = images(3000, 28, 28);  // 2,352,000 bytes
  EXPECT_EQ(parse_idx(gzip(idx_bytes(big)), "big.gz").data, big.data);

  const IdxArray labels{{6}, {0, 9, 3, 3, 1, 0}};
  write_idx(dir.file("labels-idx1-ubyte"), labels);
  EXPECT_EQ(read_idx_labels(dir.file("labels-idx1-ubyte")).data, labels.data);
  EXPECT_EQ(read_idx(dir.file("labels-idx1-ubyte")).dims, std::vector<std::int64_t>{6});
  // Other ranks than the readers' are plain IDX arrays.
  const IdxArray four{{1, 2, 1, 2}, {4, 3, 2, 1}};
  EXPECT_EQ(parse_idx(idx_bytes(four), "four").dims, four.dims);
}

TEST(Idx, MalformedHeaderNamesTheFile) {
  TempDir dir;
  const auto at = [&](const std::string& name, const std::string& bytes) {
    write_file(dir.file(name), bytes);
    return dir.file(name);
  };
  const std::string path_empty = at("empty", "");
  expect_error_mentioning([&] { read_idx(path_empty); }, {"IDX file '" + path_empty + "'", "empty (0 bytes"});
  const std::string path_short = at("short", std::string("\x00\x00\x08", 3));
  expect_error_mentioning([&] { read_idx(path_short); }, {path_short, "truncated", "3 byte(s), fewer than the 4"});
  const std::string path_magic = at("magic.png", "\x89PNG\r\n\x1a\n-------");
  expect_error_mentioning([&] { read_idx(path_magic); }, {path_magic, "wrong magic number 89 50 4e 47", "not an IDX file"});
  const std::string path_float = at("float", header(0x0D, {2}) + std::string(8, '\0'));
  expect_error_mentioning([&] { read_idx(path_float); }, {path_float, "type 0x0d (float32) is not supported", "only 0x08"});
  const std::string path_type = at("type", header(0x42, {2}) + "ab");
  expect_error_mentioning([&] { read_idx(path_type); }, {path_type, "unknown IDX element type 0x42"});
  const std::string path_nodims = at("nodims", header(0x08, {}));
  expect_error_mentioning([&] { read_idx(path_nodims); }, {path_nodims, "0 dimensions"});
  const std::string path_header = at("header", header(0x08, {10, 28, 28}).substr(0, 10));
  expect_error_mentioning([&] { read_idx(path_header); }, {path_header, "truncated header: 3 dimensions need 16 bytes", "has 10"});
  const std::string path_zero = at("zero", header(0x08, {10, 0, 28}));
  expect_error_mentioning([&] { read_idx(path_zero); }, {path_zero, "size 1 is 0"});
  // 255 sizes of 2^32-1 overflow any integer product; the check comes before multiplying.
  const std::string path_overflow = at("overflow", header(0x08, std::vector<std::uint32_t>(255, 0xFFFFFFFF)));
  expect_error_mentioning([&] { read_idx(path_overflow); }, {path_overflow, "hold more than the limit of 1.0 GiB"});
  // 2^32-1 x 2^32-1 would wrap a 32-bit product to a small number.
  const std::string path_wrap = at("wrap", header(0x08, {0xFFFFFFFF, 0xFFFFFFFF}) + "x");
  expect_error_mentioning([&] { read_idx(path_wrap); }, {path_wrap, "4294967295 x 4294967295 hold more than"});
  // Just over a limit: the limit is the product, not one size.
  expect_error_mentioning(
      [] {
        parse_idx(header(0x08, {3, 4}) + std::string(12, 'x'), "limit", 11);
      },
      {"limit: sizes 3 x 4 hold more than the limit of 11 bytes"});
  EXPECT_EQ(parse_idx(header(0x08, {3, 4}) + std::string(12, 'x'), "limit", 12).data.size(), 12u);
  expect_error_mentioning([] { read_idx("/nonexistent/x-idx3-ubyte"); }, {"IDX file '/nonexistent/x-idx3-ubyte'", "cannot open"});
}

TEST(Idx, DataOfTheWrongLengthNamesTheFile) {
  TempDir dir;
  const std::string bytes = idx_bytes(images(4, 5, 6));  // 16 + 120 bytes
  const std::string truncated = dir.file("truncated");
  write_file(truncated, bytes.substr(0, bytes.size() - 1));
  expect_error_mentioning([&] { read_idx(truncated); }, {truncated, "truncated: sizes 4 x 5 x 6 = 120 bytes", "has 119"});
  const std::string trailing = dir.file("trailing");
  write_file(trailing, bytes + "zz");
  expect_error_mentioning([&] { read_idx(trailing); }, {trailing, "2 byte(s) after the data (sizes 4 x 5 x 6 = 120 bytes)"});

  const std::string gz_truncated = dir.file("truncated.gz");
  write_file(gz_truncated, gzip(bytes.substr(0, bytes.size() - 1)));
  expect_error_mentioning([&] { read_idx(gz_truncated); }, {gz_truncated, "truncated", "gzip data inflates to 119"});
  const std::string gz_trailing = dir.file("trailing.gz");
  write_file(gz_trailing, gzip(bytes + "zz"));
  expect_error_mentioning([&] { read_idx(gz_trailing); }, {gz_trailing, "gzip data holds 2 byte(s) after the data"});
  const std::string gz_header = dir.file("header.gz");
  write_file(gz_header, gzip(bytes.substr(0, 9)));
  expect_error_mentioning([&] { read_idx(gz_header); }, {gz_header, "truncated header", "inflates to 9"});
  const std::string gz_empty = dir.file("empty.gz");
  write_file(gz_empty, gzip(""));
  expect_error_mentioning([&] { read_idx(gz_empty); }, {gz_empty, "inflates to 0 byte(s)"});
}

TEST(Idx, CorruptOrTruncatedGzipNamesTheFile) {
  TempDir dir;
  const std::string good = gzip(idx_bytes(images(20, 28, 28)));
  // Cut inside the deflate data, and cut in the 8-byte trailer (CRC-32, length): both end
  // before the member's end marker, whether or not all the data inflated.
  for (const std::size_t keep : {good.size() / 2, good.size() - 4, std::size_t{11}}) {
    const std::string path = dir.file("cut" + std::to_string(keep) + ".gz");
    write_file(path, good.substr(0, keep));
    expect_error_mentioning([&] { read_idx(path); }, {path, "ends before its end marker (truncated"});
  }
  // A flipped byte in the CRC-32: the data inflate, the check fails.
  std::string crc = good;
  crc[crc.size() - 6] ^= 0x5A;
  const std::string path_crc = dir.file("crc.gz");
  write_file(path_crc, crc);
  expect_error_mentioning([&] { read_idx(path_crc); }, {path_crc, "corrupt gzip data: incorrect data check"});
  // A bad deflate block type right after the 10-byte gzip header.
  std::string block = good;
  block[10] = static_cast<char>(0x07);  // BFINAL 1, BTYPE 11: reserved
  const std::string path_block = dir.file("block.gz");
  write_file(path_block, block);
  expect_error_mentioning([&] { read_idx(path_block); }, {path_block, "corrupt gzip data: invalid block type"});
  // Bytes after the last member that are not another member.
  const std::string path_junk = dir.file("junk.gz");
  write_file(path_junk, good + "junk");
  expect_error_mentioning([&] { read_idx(path_junk); }, {path_junk, "corrupt gzip data after member 1"});
  // The gzip magic alone.
  expect_error_mentioning([] { parse_idx("\x1f\x8b", "magic.gz"); }, {"magic.gz", "truncated"});
}

TEST(Idx, ImagesAndLabelsReaders) {
  TempDir dir;
  const std::string imgs = dir.file("images");
  write_idx(imgs, images(2, 32, 30));
  EXPECT_EQ(read_idx_images(imgs).dims, (std::vector<std::int64_t>{2, 32, 30}));
  expect_error_mentioning([&] { read_idx_images(imgs, 28, 28); }, {imgs, "images are 32 x 30 (H x W), expected 28 x 28"});
  expect_error_mentioning([&] { read_idx_labels(imgs); },
               {imgs, "expected labels, 1 dimension (N); the file has 3", "an image file?"});

  const std::string labels = dir.file("labels");
  write_idx(labels, IdxArray{{5}, {0, 9, 2, 10, 1}});
  expect_error_mentioning([&] { read_idx_labels(labels); }, {labels, "label 3 (from 0) is 10, outside 0..9 (10 classes)"});
  EXPECT_EQ(read_idx_labels(labels, 11).data.size(), 5u);
  expect_error_mentioning([&] { read_idx_labels(labels, 0); }, {"classes must be in 1..256, got 0"});
  expect_error_mentioning([&] { read_idx_images(labels); },
               {labels, "expected images, 3 dimensions (N, H, W); the file has 1", "a label file?"});
  write_idx(labels, IdxArray{{3}, {0, 255, 1}});
  EXPECT_EQ(read_idx_labels(labels, 256).data[1], 255);
}

TEST(Idx, WriterRefusesWhatIdxCannotHold) {
  expect_error_mentioning([] { idx_bytes(IdxArray{{}, {}}); }, {"1 to 255 dimensions, got 0"});
  expect_error_mentioning([] { idx_bytes(IdxArray{{2, 0}, {}}); }, {"sizes must be in 1..2^32-1, got 2 x 0"});
  expect_error_mentioning([] { idx_bytes(IdxArray{{int64_t{1} << 32}, {}}); }, {"sizes must be in 1..2^32-1"});
  expect_error_mentioning([] { idx_bytes(IdxArray{{2, 3}, {1, 2}}); }, {"sizes 2 x 3 hold 6 bytes, data has 2"});
  expect_error_mentioning(
      [] {
        write_idx("/nonexistent/out-idx1-ubyte", IdxArray{{1}, {0}});
      },
      {"IDX file '/nonexistent/out-idx1-ubyte'", "cannot write"});
}

}  // namespace
