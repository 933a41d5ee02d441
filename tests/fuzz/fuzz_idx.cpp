// libFuzzer harness for the IDX reader (apps/vision/idx.h), plain and gzip: parse_idx must
// either accept the bytes or throw qkv::Error, and what it accepts must be consistent: the
// data are exactly the product of the sizes, written back with idx_bytes they parse to the
// same array, and a plain input is exactly what idx_bytes writes. Any other exception, a
// crash, a sanitizer report or a changed array is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "vision/idx.h"
#include "qkv/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  qkv::io::IdxArray array;
  try {
    array = qkv::io::parse_idx(bytes, "fuzz");
  } catch (const qkv::Error&) {
    return 0;
  }
  std::uint64_t count = 1;
  for (const std::int64_t d : array.dims) {
    if (d < 1 || d > 0xFFFFFFFF) __builtin_trap();
    count *= static_cast<std::uint64_t>(d);
  }
  if (array.dims.empty() || count != array.data.size()) __builtin_trap();
  std::string written;
  try {
    written = qkv::io::idx_bytes(array);
  } catch (const qkv::Error&) {
    __builtin_trap();  // what the reader accepts, the writer can write
  }
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!gzip && written != bytes) __builtin_trap();
  const qkv::io::IdxArray again = qkv::io::parse_idx(written, "round trip");
  if (again.dims != array.dims || again.data != array.data) __builtin_trap();
  return 0;
}
