// Writing files whole or not at all, and model directories that change as a whole.
//
// Every file qkv writes (weights, configs, tokenizers, checkpoints, indexes, pages, SVG,
// JSON, CSV) goes through AtomicFile: the bytes go to a uniquely named temporary file beside
// the target, created exclusively (mkstemp: O_CREAT | O_EXCL, so a symlink or a file planted
// at a predictable name is never written through), then flushed and fsynced, renamed over
// the target, and the parent directory fsynced. A failure at any point (a full disk, a bad
// path, an exception, a kill) leaves the old file as it was; the temporary file is removed,
// or, when the process was killed, by the next write of the same target (a temporary file
// is locked with flock while it is written, so one no living process holds is stale).
//
// - A new file gets mode 0666 & ~umask, as open(2) would give it; a replaced one keeps its
//   mode (and, where the process may, its owner).
// - A target that is a symlink is followed: the file it names is replaced and the link
//   stays. A dangling symlink is replaced by the new file.
// - A target that exists and is not a regular file (/dev/stdout, /dev/null, a FIFO, a
//   terminal) is written in place, since renaming over it would replace the device.
//
// A model directory (config.json + weights + tokenizer) is written with ModelFiles: every
// file is written in full beside its target first, then each is renamed into place, and
// config.json last. config.json records the size and SHA-256 of every file written with it
// ("files": {"model.safetensors": {"bytes": N, "sha256": "..."}, ...}), and every loader
// (JsonConfig::load of a config.json, so every model and tokenizer) refuses a listed file
// that does not match, naming it. So a directory either loads as the model it held before
// or as the new one, or - for a kill inside the few renames of the commit itself - is
// refused with a message naming the file that does not match; it never loads as a mix.
//
// Crash points for tests: with QKV_TEST_CRASH_AT=N set, the process kills itself (SIGKILL)
// at the N-th durable step (a temporary file written and fsynced, or a rename done), counted
// from 1 over the whole process. Without it, nothing is counted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv {

// What a model directory's config.json records of a file written with it.
struct FileRecord {
  std::uint64_t bytes = 0;
  std::string sha256;  // 64 lowercase hex digits
};

class AtomicFile {
 public:
  // Opens the temporary file beside `path` (or `path` itself, for a special file). `what`
  // names the file in errors ("save_safetensors", "--html"). Throws qkv::Error naming the
  // path when the file cannot be created (no such directory, a directory at `path`, no
  // permission).
  AtomicFile(const std::string& path, std::string what);
  ~AtomicFile();  // removes the temporary file unless commit() renamed it
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }

  // Flushes and fsyncs the temporary file: it is complete, not yet in place. Idempotent.
  void finish();
  // finish(), then renames the temporary file over the target and fsyncs the directory.
  void commit();
  // commit() without the directory's fsync, for a caller that renames several files of one
  // directory and syncs it once after the last (ModelFiles).
  void rename_into_place();

  const std::string& path() const { return path_; }  // the target (a symlink resolved)
  // The bytes written so far and, after finish(), their SHA-256.
  FileRecord record() const;

  struct Digest;  // SHA-256 of what is written (OpenSSL), kept out of this header

 private:
  std::string path_;
  std::string temp_;  // empty for a special file, written in place
  std::string what_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
  std::unique_ptr<Digest> digest_;
  std::string sha256_;
  bool finished_ = false;
  bool committed_ = false;
};

// The whole of `text` to `path` through an AtomicFile.
void write_file(const std::string& path, std::string_view text, const std::string& what = "write_file");

// A model directory written as a whole (see above). Files are added, each written in full
// beside its target; commit() writes config.json beside its target too, then renames them
// all, in the order added and config.json last, back to back (no sync between the renames,
// so the window in which a kill leaves a directory that is refused is a few system calls
// long), then fsyncs the directory.
class ModelFiles {
 public:
  explicit ModelFiles(std::string dir);  // creates the directory and its parents
  ~ModelFiles();
  ModelFiles(const ModelFiles&) = delete;
  ModelFiles& operator=(const ModelFiles&) = delete;

  // A file of the directory ("model.safetensors", "vocab.json"), to be written by the
  // caller; the reference stays valid until commit().
  AtomicFile& add(const std::string& name);
  void add(const std::string& name, std::string_view text);

  // Renames every added file into place, then writes config.json: `config_json` (a JSON
  // object) with "files" set to the record of every added file. Throws qkv::Error if the
  // config is not a JSON object or a write fails (files already renamed stay: config.json
  // still records the old ones, so the directory is refused until written again).
  void commit(std::string_view config_json);

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::pair<std::string, std::unique_ptr<AtomicFile>>> files_;
};

// The files a model directory's config.json records ("files"), checked against the files
// beside it: a missing one, another size or another SHA-256 is a qkv::Error naming the file
// and config.json. A config.json without "files" (one not written by qkv) is not checked.
void check_model_files(const std::string& config_path);

// SHA-256 of a regular file, as 64 lowercase hex digits (the search index records its
// corpus and model by it). Throws qkv::Error naming the path if it cannot be read.
std::string file_sha256(const std::string& path);
// SHA-256 of bytes in memory, as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace qkv
