// IDX files, the format of MNIST and Fashion-MNIST (yann.lecun.com/exdb/mnist): a 4-byte
// magic 00 00 TYPE NDIMS, then NDIMS sizes as big-endian uint32, then the product of the
// sizes in elements, row-major, and nothing after them. Read plain or gzip-compressed (as
// the data sets ship them: detected by gzip's 1f 8b magic). Internal to the library (the
// Fashion-MNIST images and labels, `qkv classify --images`).
//
// Only TYPE 0x08 (unsigned byte) is read: what every MNIST-like image and label file
// holds. The other IDX types (0x09 signed byte, 0x0B int16, 0x0C int32, 0x0D float32,
// 0x0E float64) are refused by name.
//
// Errors are qkv::Error "<name>: <what>", where the readers of a path name it as
// "IDX file '<path>'", e.g.
//   "IDX file 'train-labels-idx1-ubyte.gz': label 17 is 12, outside 0..9 (10 classes)".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::io {

struct IdxArray {
  std::vector<std::int64_t> dims;  // (N, H, W) for images, (N) for labels; each in 1..2^32-1
  std::vector<std::uint8_t> data;  // (prod dims) elements, row-major
};

// The most element bytes an IDX file may hold, 1 GiB: EMNIST's largest file (ByClass
// training images, 697,932 x 28 x 28 = 547 MB) fits, a header that claims more is refused
// before anything is allocated. Fashion-MNIST's training images are 47,040,000 bytes.
inline constexpr std::uint64_t kIdxMaxBytes = std::uint64_t{1} << 30;

// The array in `bytes`, a whole IDX file, plain or gzip (one member or several, as `cat
// a.gz b.gz` makes). Its data is never allocated beyond what the header's dims imply and
// `max_bytes` allows; compressed data is inflated in bounded chunks, so a gzip stream that
// ends early is found with no more allocated than it held. Throws qkv::Error "<name>: ..."
// for an empty or truncated input, a wrong magic, a type other than 0x08, 0 dimensions, a
// size of 0, sizes whose product is over `max_bytes`, data shorter or longer than the
// sizes imply, and corrupt or truncated gzip data.
IdxArray parse_idx(std::string_view bytes, const std::string& name, std::uint64_t max_bytes = kIdxMaxBytes);

// The IDX file at `path` (plain or gzip), read as parse_idx reads bytes; errors name it
// "IDX file '<path>'", as do those of the two readers below.
IdxArray read_idx(const std::string& path);

// Images: 3 dims (N, H, W). `height` and `width`, when not 0, are what H and W must be.
IdxArray read_idx_images(const std::string& path, std::int64_t height = 0, std::int64_t width = 0);

// Labels: 1 dim (N), each label in 0..classes-1 (classes in 1..256); an error names the
// first label outside, by index from 0, and its value.
IdxArray read_idx_labels(const std::string& path, int classes = 10);

// The bytes of `array` as an IDX file of type 0x08 (plain, not compressed); throws
// qkv::Error for dims that an IDX file cannot hold (0 or over 255 dims, a size of 0 or
// over 2^32-1) or a data size that is not their product.
std::string idx_bytes(const IdxArray& array);

// idx_bytes(array) written to `path` (replaced if it exists); errors name the path.
void write_idx(const std::string& path, const IdxArray& array);

}  // namespace qkv::io
