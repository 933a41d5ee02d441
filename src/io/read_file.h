// Reading a whole small file (a config.json, a safetensors index, a vocabulary) with its
// size bounded before anything is allocated. Internal to the library.
//
// A path that names a directory, a device (/dev/zero), a FIFO or anything else that is not
// a regular file is refused before it is read, as is a file larger than `max_bytes`: a
// hostile or mistaken path must give an error, not exhaust memory or block forever.
// Errors are qkv::Error "<what> '<path>': <why>", e.g.
//   "config '/dev/zero': not a regular file (a character device)".
#pragma once

#include <cstdint>
#include <string>

namespace qkv::io {

// The bytes of the regular file at `path`, at most `max_bytes` of them (a file that grows
// past the limit while it is read is refused too). `what` names the file's role in errors.
std::string read_file(const std::string& path, const std::string& what, std::uint64_t max_bytes);

// "1.5 MiB"-style rendering of a byte count, for messages.
std::string byte_size(std::uint64_t bytes);

}  // namespace qkv::io
