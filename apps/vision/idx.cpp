// IDX reading (plain or gzip) and writing. See idx.h.
#include "vision/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "io/read_file.h"
#include "qkv/error.h"
#include "qkv/files.h"

namespace qkv::io {

namespace {

constexpr std::uint8_t kUnsignedByte = 0x08;
constexpr std::size_t kMaxDims = 255;  // NDIMS is one byte

// IDX element types (the format's page); only 0x08 is read.
const char* idx_type_name(std::uint8_t type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return nullptr;
  }
}

std::string hex_bytes(const std::uint8_t* p, std::size_t n) {
  std::string out;
  char byte[4];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(byte, sizeof byte, "%s%02x", i ? " " : "", p[i]);
    out += byte;
  }
  return out;
}

// "60000 x 28 x 28"
std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::ostringstream out;
  for (std::size_t i = 0; i < dims.size(); ++i) out << (i ? " x " : "") << dims[i];
  return out.str();
}

// The bytes of an IDX file in order: from memory, or inflated from gzip a bounded chunk
// at a time, so that nothing larger than the caller's buffer is ever produced.
class IdxSource {
 public:
  IdxSource(std::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {
    gzip_ =
        bytes.size() >= 2 && static_cast<std::uint8_t>(bytes[0]) == 0x1f && static_cast<std::uint8_t>(bytes[1]) == 0x8b;
    if (!gzip_) return;
    // 16 + MAX_WBITS: gzip framing only, its CRC-32 and length checked at each member's end.
    const int rc = inflateInit2(&z_, 16 + MAX_WBITS);
    QKV_CHECK_KIND(rc == Z_OK, ErrorKind::memory, name_ << ": zlib cannot start inflating: " << zError(rc));
  }
  ~IdxSource() {
    if (gzip_) inflateEnd(&z_);
  }
  IdxSource(const IdxSource&) = delete;
  IdxSource& operator=(const IdxSource&) = delete;

  bool gzip() const { return gzip_; }
  // Plain input: the bytes not read yet.
  std::size_t plain_left() const { return bytes_.size() - at_; }

  // Up to n bytes into out; fewer only where the data ends. Throws for corrupt gzip data
  // and for a gzip stream that ends before its end marker (truncated).
  std::size_t read(std::uint8_t* out, std::size_t n) {
    if (!gzip_) {
      const std::size_t k = std::min(n, plain_left());
      std::memcpy(out, bytes_.data() + at_, k);
      at_ += k;
      return k;
    }
    std::size_t got = 0;
    while (got < n) {
      if (member_ended_) {
        if (at_ == bytes_.size() && z_.avail_in == 0) break;  // the last member's end
        inflateReset(&z_);                                    // another member follows (`cat a.gz b.gz`)
        member_ended_ = false;
      }
      if (z_.avail_in == 0 && at_ < bytes_.size()) {
        // uInt counts: feed at most 1 GiB at a time.
        const std::size_t k = std::min<std::size_t>(bytes_.size() - at_, std::size_t{1} << 30);
        z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes_.data() + at_));
        z_.avail_in = static_cast<uInt>(k);
        at_ += k;
      }
      const std::size_t want = std::min<std::size_t>(n - got, std::size_t{1} << 30);
      z_.next_out = out + got;
      z_.avail_out = static_cast<uInt>(want);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      got += want - z_.avail_out;
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
        ++members_;
        continue;
      }
      if (rc == Z_OK) continue;
      if (rc == Z_BUF_ERROR && z_.avail_in == 0 && at_ == bytes_.size())
        QKV_CHECK(false, name_ << ": the gzip data ends before its end marker (truncated after " << bytes_.size()
                               << " compressed bytes)");
      QKV_CHECK_KIND(rc != Z_MEM_ERROR, ErrorKind::memory, name_ << ": zlib ran out of memory");
      QKV_CHECK(rc == Z_BUF_ERROR, name_ << ": corrupt gzip data"
                                         << (members_ ? " after member " + std::to_string(members_) : "") << ": "
                                         << (z_.msg ? z_.msg : zError(rc)));
    }
    return got;
  }

 private:
  std::string_view bytes_;
  const std::string& name_;
  bool gzip_ = false;
  std::size_t at_ = 0;  // bytes of input consumed (plain) or handed to zlib (gzip)
  z_stream z_{};
  bool member_ended_ = false;
  int members_ = 0;  // gzip members inflated to their end
};

// How the readers of a path name it in errors.
std::string path_name(const std::string& path) { return "IDX file '" + path + "'"; }

}  // namespace

IdxArray parse_idx(std::string_view bytes, const std::string& name, std::uint64_t max_bytes) {
  QKV_CHECK(!bytes.empty(), name << ": empty (0 bytes; an IDX file starts with the magic 00 00 08 NDIMS)");
  IdxSource source(bytes, name);
  const char* what = source.gzip() ? "the gzip data inflates to" : "the file has";

  std::uint8_t magic[4];
  const std::size_t got = source.read(magic, 4);
  QKV_CHECK(got == 4, name << ": truncated: " << what << " " << got << " byte(s), fewer than the 4 of the IDX magic");
  QKV_CHECK(magic[0] == 0 && magic[1] == 0,
            name << ": wrong magic number " << hex_bytes(magic, 4)
                 << ": not an IDX file (its magic is 00 00 TYPE NDIMS, 00 00 08 03 for images)");
  const char* type = idx_type_name(magic[2]);
  QKV_CHECK(type != nullptr, name << ": unknown IDX element type 0x" << hex_bytes(magic + 2, 1) << " (magic "
                                  << hex_bytes(magic, 4) << "; the types are 08, 09, 0b-0e)");
  QKV_CHECK(magic[2] == kUnsignedByte, name << ": IDX element type 0x" << hex_bytes(magic + 2, 1) << " (" << type
                                            << ") is not supported: only 0x08 (unsigned byte)");
  const std::size_t ndims = magic[3];
  QKV_CHECK(ndims > 0, name << ": 0 dimensions (magic " << hex_bytes(magic, 4) << ")");

  std::uint8_t header[4 * kMaxDims];
  const std::size_t header_got = source.read(header, 4 * ndims);
  QKV_CHECK(header_got == 4 * ndims, name << ": truncated header: " << ndims << " dimensions need " << 4 + 4 * ndims
                                          << " bytes, " << what << " " << 4 + header_got);
  IdxArray array;
  std::uint64_t count = 1;  // elements so far, never over max_bytes
  bool over = false;
  for (std::size_t i = 0; i < ndims; ++i) {
    const std::uint8_t* p = header + 4 * i;
    const std::uint64_t d =
        (std::uint64_t{p[0]} << 24) | (std::uint64_t{p[1]} << 16) | (std::uint64_t{p[2]} << 8) | p[3];
    array.dims.push_back(static_cast<std::int64_t>(d));
    QKV_CHECK(d > 0, name << ": size " << i << " is 0 (sizes " << dims_text(array.dims) << ")");
    // Checked before multiplying: 255 sizes of up to 2^32-1 would overflow any integer.
    if (!over && d > max_bytes / count) over = true;
    if (!over) count *= d;
  }
  QKV_CHECK(!over, name << ": sizes " << dims_text(array.dims) << " hold more than the limit of "
                        << byte_size(max_bytes) << " (" << max_bytes << " bytes)");

  const std::string shape = dims_text(array.dims) + " = " + std::to_string(count) + " bytes";
  if (!source.gzip()) {
    // The whole input is at hand: its length is checked before anything is allocated.
    const std::size_t left = source.plain_left();
    QKV_CHECK(left >= count, name << ": truncated: sizes " << shape << " of data, the file has " << left
                                  << " after its " << 4 + 4 * ndims << "-byte header");
    QKV_CHECK(left == count, name << ": " << left - count << " byte(s) after the data (sizes " << shape
                                  << "): not an IDX file of these sizes");
    array.data.resize(count);
    source.read(array.data.data(), count);
    return array;
  }
  // gzip: the data grows (doubling from 1 MiB) only as fast as it inflates, so a stream
  // whose header claims more than it holds allocates no more than it held.
  while (array.data.size() < count) {
    const std::size_t have = array.data.size();
    const std::size_t chunk = std::min<std::uint64_t>(count - have, std::max<std::size_t>(have, std::size_t{1} << 20));
    array.data.resize(have + chunk);
    const std::size_t n = source.read(array.data.data() + have, chunk);
    QKV_CHECK(n == chunk, name << ": truncated: sizes " << shape << " of data, the gzip data inflates to " << have + n
                               << " after the header");
  }
  std::uint8_t extra[4096];
  const std::size_t more = source.read(extra, sizeof extra);
  QKV_CHECK(more == 0, name << ": the gzip data holds " << (more == sizeof extra ? "at least " : "") << more
                            << " byte(s) after the data (sizes " << shape << "): not an IDX file of these sizes");
  return array;
}

IdxArray read_idx(const std::string& path) {
  // deflate's stored blocks add 5 bytes in 65,535 and gzip's framing a few dozen: a
  // compressed file of the largest data is a little larger than the data.
  const std::uint64_t max_file = kIdxMaxBytes + kIdxMaxBytes / 8192 + 4 + 4 * kMaxDims + 65536;
  const std::string name = path_name(path);
  return parse_idx(read_file(path, "IDX file", max_file), name);
}

IdxArray read_idx_images(const std::string& path, std::int64_t height, std::int64_t width) {
  IdxArray array = read_idx(path);
  const std::string name = path_name(path);
  QKV_CHECK(array.dims.size() == 3, name << ": expected images, 3 dimensions (N, H, W); the file has "
                                         << array.dims.size() << " (" << dims_text(array.dims) << ")"
                                         << (array.dims.size() == 1 ? ": a label file?" : ""));
  QKV_CHECK((height == 0 || array.dims[1] == height) && (width == 0 || array.dims[2] == width),
            name << ": the images are " << array.dims[1] << " x " << array.dims[2] << " (H x W), expected "
                 << (height ? std::to_string(height) : "any") << " x " << (width ? std::to_string(width) : "any"));
  return array;
}

IdxArray read_idx_labels(const std::string& path, int classes) {
  QKV_CHECK(classes >= 1 && classes <= 256, "read_idx_labels: classes must be in 1..256, got " << classes);
  IdxArray array = read_idx(path);
  const std::string name = path_name(path);
  QKV_CHECK(array.dims.size() == 1, name << ": expected labels, 1 dimension (N); the file has " << array.dims.size()
                                         << " (" << dims_text(array.dims) << ")"
                                         << (array.dims.size() == 3 ? ": an image file?" : ""));
  for (std::size_t i = 0; i < array.data.size(); ++i)
    QKV_CHECK(array.data[i] < classes, name << ": label " << i << " (from 0) is " << int{array.data[i]}
                                            << ", outside 0.." << classes - 1 << " (" << classes << " classes)");
  return array;
}

std::string idx_bytes(const IdxArray& array) {
  QKV_CHECK(!array.dims.empty() && array.dims.size() <= kMaxDims,
            "idx_bytes: an IDX file has 1 to 255 dimensions, got " << array.dims.size());
  std::uint64_t count = 1;
  for (const std::int64_t d : array.dims) {
    QKV_CHECK(d >= 1 && d <= 0xFFFFFFFF, "idx_bytes: sizes must be in 1..2^32-1, got " << dims_text(array.dims));
    QKV_CHECK(static_cast<std::uint64_t>(d) <= kIdxMaxBytes / count,
              "idx_bytes: sizes " << dims_text(array.dims) << " hold more than " << byte_size(kIdxMaxBytes));
    count *= static_cast<std::uint64_t>(d);
  }
  QKV_CHECK(array.data.size() == count, "idx_bytes: sizes " << dims_text(array.dims) << " hold " << count
                                                            << " bytes, data has " << array.data.size());
  std::string out = {0, 0, static_cast<char>(kUnsignedByte), static_cast<char>(array.dims.size())};
  for (const std::int64_t d : array.dims)
    for (const int shift : {24, 16, 8, 0}) out += static_cast<char>((static_cast<std::uint64_t>(d) >> shift) & 0xFF);
  out.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  return out;
}

void write_idx(const std::string& path, const IdxArray& array) {
  write_file(path, idx_bytes(array), path_name(path));
}

}  // namespace qkv::io
