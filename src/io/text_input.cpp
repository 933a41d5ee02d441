// Bounded reading of lines (io/text_input.h): POSIX file descriptors rather than iostreams,
// so that the type of what a path names (directory, FIFO, device) is known before reading,
// a FIFO can be opened without waiting for a writer, and every read is a counted chunk.
#include "io/text_input.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unicode/utf8.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "qkv/error.h"

namespace qkv::io {
namespace {

constexpr std::size_t kChunk = std::size_t{64} << 10;

std::string describe(const std::string& label, const std::string& path) {
  return label + " '" + path + "'" + (path == "-" ? " (standard input)" : "");
}

// Opens path ("-": standard input, not owned) and refuses what cannot be read as text.
// A FIFO is opened with O_NONBLOCK so that open() returns even when no process has it
// open for writing (it then reads as empty); reads are made blocking again afterwards.
int open_input(const std::string& path, const std::string& name, bool* owned, struct stat* st) {
  int fd = STDIN_FILENO;
  *owned = false;
  if (path != "-") {
    QKV_CHECK(!path.empty(), name << ": the path is empty");
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      throw Error(name + ": cannot open: " + std::strerror(e));
    }
    *owned = true;
  }
  const auto close_and_fail = [&](const std::string& what) {
    if (*owned) ::close(fd);
    throw Error(name + ": " + what);
  };
  if (::fstat(fd, st) != 0) close_and_fail(std::string("cannot read: ") + std::strerror(errno));
  if (S_ISDIR(st->st_mode)) close_and_fail("is a directory, not a file");
  if (*owned) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
      close_and_fail(std::string("cannot read: ") + std::strerror(errno));
  }
  return fd;
}

// read(2) of up to n bytes: retried after a signal, and waiting where a descriptor handed
// to us (standard input) was left non-blocking. Returns 0 at the end of the input.
std::size_t read_some(int fd, char* data, std::size_t n, const std::string& name) {
  for (;;) {
    const ssize_t got = ::read(fd, data, n);
    if (got >= 0) return static_cast<std::size_t>(got);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    const int e = errno;
    throw Error(name + ": cannot read: " + std::strerror(e));
  }
}

// "" when line is UTF-8, else what is wrong, counting characters from 1 (ICU's U8_NEXT
// refuses overlong forms, surrogates, values above U+10FFFF and truncated sequences).
std::string utf8_problem(const std::string& line) {
  const auto* s = reinterpret_cast<const std::uint8_t*>(line.data());
  const auto length = static_cast<std::int32_t>(line.size());
  std::int32_t i = 0;
  std::int64_t character = 0;
  while (i < length) {
    const std::int32_t start = i;
    UChar32 c = 0;
    U8_NEXT(s, i, length, c);
    ++character;
    if (c < 0) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned>(s[start]));
      return "not UTF-8 text: byte " + std::string(byte) + " at character " +
             std::to_string(character);
    }
  }
  return {};
}

}  // namespace

std::string bytes_text(std::uint64_t bytes) {
  std::string s = std::to_string(bytes) + " bytes";
  if (bytes >= (std::uint64_t{1} << 20)) {
    char mib[48];
    const double value = static_cast<double>(bytes) / 0x1p20;
    const bool whole = value == static_cast<double>(bytes >> 20);
    std::snprintf(mib, sizeof mib, whole ? " (%.0f MiB)" : " (%.1f MiB)", value);
    s += mib;
  }
  return s;
}

std::string read_text(const std::string& path, const std::string& label) {
  LineReader reader(path, label, {.max_line_bytes = std::size_t{64} << 20,
                                  .max_total_bytes = std::uint64_t{4} << 30});
  std::string text, line;
  while (reader.next(line)) {
    text += line;
    text += '\n';
  }
  return text;
}

LineReader::LineReader(std::string path, std::string label, LineReaderOptions options)
    : path_(std::move(path)), name_(describe(label, path_)), options_(options) {
  struct stat st{};
  fd_ = open_input(path_, name_, &owns_fd_, &st);
  if (options_.max_total_bytes > 0 && S_ISREG(st.st_mode) &&
      static_cast<std::uint64_t>(st.st_size) > options_.max_total_bytes) {
    if (owns_fd_) ::close(fd_);
    fail("is " + bytes_text(static_cast<std::uint64_t>(st.st_size)) + ", more than the limit of " +
         bytes_text(options_.max_total_bytes));
  }
}

LineReader::~LineReader() {
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
}

void LineReader::fail(const std::string& what) const { throw Error(name_ + ": " + what); }

std::string LineReader::where() const { return name_ + " line " + std::to_string(line_number_); }

bool LineReader::fill() {
  if (eof_) return false;
  // Drop the lines already returned; what stays is the start of the current line.
  buffer_.erase(0, begin_);
  scanned_ -= begin_;
  begin_ = 0;
  const std::size_t old = buffer_.size();
  buffer_.resize(old + kChunk);
  const std::size_t got = read_some(fd_, buffer_.data() + old, kChunk, name_);
  buffer_.resize(old + got);
  if (got == 0) {
    eof_ = true;
    return false;
  }
  total_ += got;
  if (options_.max_total_bytes > 0 && total_ > options_.max_total_bytes)
    fail("has more than the limit of " + bytes_text(options_.max_total_bytes));
  return true;
}

bool LineReader::next(std::string& line) {
  const auto line_error = [&](const std::string& what) {
    return Error(name_ + " line " + std::to_string(line_number_ + 1) + ": " + what);
  };
  const std::string too_long = "longer than the limit of " + bytes_text(options_.max_line_bytes);
  for (;;) {
    const std::size_t newline = buffer_.find('\n', scanned_);
    const std::size_t end = newline == std::string::npos ? buffer_.size() : newline;
    if (std::memchr(buffer_.data() + scanned_, '\0', end - scanned_) != nullptr)
      throw line_error("binary data (a NUL byte), not text");
    scanned_ = end;
    // + 1: a "\r" before the "\n" is not part of the line. Checked before reading more,
    // so an endless line stops here.
    if (end - begin_ > options_.max_line_bytes + 1) throw line_error(too_long);
    std::size_t next_begin = end + 1;
    if (newline == std::string::npos) {
      if (fill()) continue;
      // The end of the input: a last line without "\n", or nothing more.
      if (buffer_.size() == begin_) {
        if (total_ == 0 && !options_.allow_empty) fail("is empty");
        return false;
      }
      next_begin = buffer_.size();
    }
    line.assign(buffer_, begin_, (newline == std::string::npos ? buffer_.size() : end) - begin_);
    begin_ = scanned_ = next_begin;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
    if (line.size() > options_.max_line_bytes) throw line_error(too_long);
    if (const std::string problem = utf8_problem(line); !problem.empty())
      throw line_error(problem);
    ++line_number_;
    return true;
  }
}

}  // namespace qkv::io
