// io::read_file (io/read_file.h): a whole regular file, its size bounded before reading.
#include "io/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "qkv/error.h"

namespace qkv::io {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

std::string byte_size(std::uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[64];
  if (unit == 0)
    std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

std::string read_file(const std::string& path, const std::string& what, std::uint64_t max_bytes) {
  const std::string where = what + " '" + path + "'";
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  QKV_CHECK(fd >= 0, where << ": cannot open: " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    QKV_CHECK(false, where << ": cannot stat: " << std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    QKV_CHECK(false, where << ": not a regular file (" << file_kind(st.st_mode) << ")");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    QKV_CHECK(false, where << ": the file is " << byte_size(size) << " (" << size
                           << " bytes), over the limit of " << byte_size(max_bytes) << " ("
                           << max_bytes << " bytes)");
  }
  // Read to the end, not to the stat size: a file that grows while it is read is bounded
  // by the same limit.
  std::string text;
  text.reserve(static_cast<std::size_t>(size));
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      QKV_CHECK(false, where << ": read error: " << std::strerror(err));
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes) {
      ::close(fd);
      QKV_CHECK(false, where << ": the file grew past " << byte_size(max_bytes)
                             << " while it was read");
    }
    text.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace qkv::io
