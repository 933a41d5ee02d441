// Bounded reading of lines of text from a file a user names, or from standard input: the
// one reader behind `--file` of every qkv command, and for any line-oriented input.
// Internal to the library, its tests and the qkv tool.
//
// Why bounded: a path may name anything: a directory, /dev/zero, a FIFO that never ends,
// a binary file, a terabyte. Read naively (std::getline) these hang, grow without bound
// until memory runs out, or end "successfully" with nothing. Here every line has a limit
// checked before its bytes are kept (and the whole input one, if asked), and every refusal
// is a qkv::Error naming the input (its label and path), the line (counted in lines, from
// 1) and what was wrong. Unlike a whole-file read of a model file, which may insist on a
// regular file, a stream of lines may be a pipe, a FIFO or a terminal.
//
// "-" names standard input. A FIFO that no process writes to reads as empty (it is opened
// without waiting for a writer), so it ends with an error instead of waiting forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qkv::io {

// The longest line LineReader accepts unless told otherwise: a line of text a person or a
// tokenizer file holds is far shorter; a longer one is data that is not lines of text.
inline constexpr std::size_t kMaxLineBytes = std::size_t{1} << 20;  // 1 MiB

struct LineReaderOptions {
  std::size_t max_line_bytes = kMaxLineBytes;  // without the line break
  std::uint64_t max_total_bytes = 0;           // 0 = a stream: any number of lines
  bool allow_empty = false;                    // a file of 0 bytes is an error unless set
};

// Lines of a file (or of standard input for "-"), one at a time, each without its "\n"
// or "\r\n". Refuses, with qkv::Error "<label> '<path>'[ line N]: <what>":
//   a path that does not exist or cannot be opened, a directory, an empty input (unless
//   allow_empty), binary data (a NUL byte), a line that is not UTF-8, a line longer than
//   max_line_bytes, more than max_total_bytes in all (checked against a regular file's
//   size before reading).
class LineReader {
 public:
  // label: how messages name the input, e.g. "--file" or "BpeTokenizer::from_files: merges".
  LineReader(std::string path, std::string label, LineReaderOptions options = {});
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line into `line`; false at the end of the input.
  bool next(std::string& line);
  // The number of the line next() returned last, from 1.
  std::int64_t line_number() const { return line_number_; }
  // "<label> '<path>' line N" of the line next() returned last, for messages about it.
  std::string where() const;
  // "<label> '<path>'" (standard input is "'-' (standard input)").
  const std::string& name() const { return name_; }

 private:
  bool fill();  // reads more bytes into buffer_; false at the end of the input
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  std::string name_;
  LineReaderOptions options_;
  int fd_ = -1;
  bool owns_fd_ = false;
  std::string buffer_;       // bytes read; those before begin_ were returned already
  std::size_t begin_ = 0;    // where the current line starts in buffer_
  std::size_t scanned_ = 0;  // bytes of buffer_ already searched for "\n" and NUL
  bool eof_ = false;
  std::uint64_t total_ = 0;  // bytes read so far
  std::int64_t line_number_ = 0;
};

// A byte count as messages show it: "1048576 bytes (1 MiB)".
std::string bytes_text(std::uint64_t bytes);

// A whole text a model trains on or is scored on: every line of `path` (LineReader's
// checks; lines of up to 64 MiB, since one speech or one book per line is common, 4 GiB in
// all), each followed by "\n". A file without a final line break gains one; "\r\n" becomes
// "\n".
std::string read_text(const std::string& path, const std::string& label);

}  // namespace qkv::io
