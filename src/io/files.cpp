// AtomicFile, ModelFiles, check_model_files, file_sha256 (qkv/files.h).
#include "qkv/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

#include "io/json_bounded.h"
#include "io/read_file.h"
#include "qkv/error.h"

namespace qkv {

namespace fs = std::filesystem;

struct AtomicFile::Digest {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx{EVP_MD_CTX_new(), EVP_MD_CTX_free};
  Digest() {
    QKV_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1,
              "SHA-256: OpenSSL could not start a digest");
  }
  void update(const void* data, std::size_t size) {
    QKV_CHECK(EVP_DigestUpdate(ctx.get(), data, size) == 1, "SHA-256: OpenSSL digest failed");
  }
  std::string hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
    unsigned int size = 0;
    QKV_CHECK(EVP_DigestFinal_ex(ctx.get(), digest.data(), &size) == 1,
              "SHA-256: OpenSSL digest failed");
    static const char* kHex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < size; ++i) {
      out += kHex[digest[i] >> 4];
      out += kHex[digest[i] & 15];
    }
    return out;
  }
};

namespace {

std::string why(int err) { return std::strerror(err); }

// QKV_TEST_CRASH_AT=N: SIGKILL at the N-th durable step (see qkv/files.h).
void durable_step() {
  static const long crash_at = [] {
    const char* v = std::getenv("QKV_TEST_CRASH_AT");
    if (v == nullptr || *v == '\0') return 0L;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    QKV_CHECK(*end == '\0' && n >= 1, "QKV_TEST_CRASH_AT must be a step number >= 1, got '" << v << "'");
    return n;
  }();
  if (crash_at == 0) return;
  static std::atomic<long> steps{0};
  if (++steps == crash_at) ::kill(::getpid(), SIGKILL);
}

// Removes DIR/NAME.tmp-XXXXXX files that no living writer holds (see AtomicFile's constructor).
void remove_stale_temporaries(const std::string& dir, const std::string& name, const std::string& mine) {
  std::error_code ec;
  const std::string prefix = name + ".tmp-";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.size() != prefix.size() + 6 || !file.starts_with(prefix) || it->path().string() == mine) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st{};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0)
      ::unlink(it->path().c_str());
    ::close(fd);
  }
}

mode_t creation_mode() {
  // umask() can only be read by setting it; this is how open(2) would apply it.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return 0666 & ~mask;
}

void fsync_directory(const std::string& dir, const std::string& what) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  QKV_CHECK(fd >= 0, what << ": cannot open the directory '" << dir << "' to sync it: " << why(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync a directory (EINVAL); the rename is still done.
  QKV_CHECK(rc == 0 || err == EINVAL, what << ": syncing the directory '" << dir << "' failed: " << why(err));
}

// An exclusive flock of a directory, held while one writer renames its group of files into
// it. Only writers take it (readers that look between two renames are refused by the digests
// config.json records, not misled). A directory that cannot be opened for reading goes
// unlocked: the renames themselves still need only write access.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& dir) : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_;
};

}  // namespace

AtomicFile::AtomicFile(const std::string& path, std::string what)
    : path_(path), what_(std::move(what)), digest_(std::make_unique<Digest>()) {
  QKV_CHECK(!path.empty(), what_ << ": the output path is empty");
  struct stat link{};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    // Follow the link to the file it names; a dangling link is replaced.
    char resolved[PATH_MAX];
    if (::realpath(path.c_str(), resolved) != nullptr) path_ = resolved;
  }
  struct stat st{};
  const bool exists = ::stat(path_.c_str(), &st) == 0;
  QKV_CHECK(!(exists && S_ISDIR(st.st_mode)), what_ << ": '" << path << "' is a directory, not a file");
  if (exists && !S_ISREG(st.st_mode)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    QKV_CHECK(fd_ >= 0, what_ << ": cannot write '" << path << "': " << why(errno));
    return;
  }
  const fs::path target(path_);
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  // The temporary file is locked while it is written; the lock dies with its process. So a
  // temporary file of this target that can be locked was left by a writer that was killed,
  // and is removed (a killed training would otherwise leave a copy of its weights per kill).
  // Between mkostemp and flock another writer of the same target may take the new file for
  // a stale one, lock and unlink it (two `train lm --out D` at once once failed so): once
  // locked, a file that is no longer linked is given up and another one made.
  for (int attempt = 0;; ++attempt) {
    std::string templ = (fs::path(dir) / (target.filename().string() + ".tmp-XXXXXX")).string();
    fd_ = ::mkostemp(templ.data(), O_CLOEXEC);
    QKV_CHECK(fd_ >= 0, what_ << ": cannot write '" << path << "': " << why(errno)
                               << " (creating its temporary file beside it)");
    ::flock(fd_, LOCK_EX);
    struct stat made{};
    if ((::fstat(fd_, &made) == 0 && made.st_nlink > 0) || attempt == 100) {
      temp_ = templ;
      break;
    }
    ::close(fd_);
  }
  remove_stale_temporaries(dir, target.filename().string(), temp_);
  if (exists) {
    ::fchmod(fd_, st.st_mode & 07777);
    if (st.st_uid != ::geteuid() || st.st_gid != ::getegid()) {
      [[maybe_unused]] const int ignored = ::fchown(fd_, st.st_uid, st.st_gid);  // where allowed
    }
  } else {
    ::fchmod(fd_, creation_mode());
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty() && !committed_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t size) {
  QKV_CHECK(!finished_, what_ << ": '" << path_ << "' was already finished");
  const auto* p = static_cast<const char*>(data);
  digest_->update(p, size);
  bytes_ += size;
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    QKV_CHECK(n > 0, what_ << ": writing '" << path_ << "' failed: " << why(n < 0 ? errno : ENOSPC)
                           << (temp_.empty() ? "" : " (the file is unchanged)"));
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFile::finish() {
  if (finished_) return;
  // fsync of a pipe, a terminal or /dev/null is EINVAL (nothing to sync): not an error.
  if (::fsync(fd_) != 0 && !(temp_.empty() && (errno == EINVAL || errno == EROFS)))
    throw Error(what_ + ": writing '" + path_ + "' failed: " + why(errno) +
                (temp_.empty() ? "" : " (the file is unchanged)"));
  // A temporary file stays open (and so locked) until it is renamed: a complete one that
  // waits for its rename is not stale.
  if (temp_.empty()) {
    ::close(fd_);
    fd_ = -1;
  }
  sha256_ = digest_->hex();
  finished_ = true;
  if (!temp_.empty()) durable_step();
}

void AtomicFile::rename_into_place() {
  if (committed_) return;
  finish();
  if (temp_.empty()) {
    committed_ = true;
    return;
  }
  QKV_CHECK(::rename(temp_.c_str(), path_.c_str()) == 0,
            what_ << ": cannot rename '" << temp_ << "' to '" << path_ << "': " << why(errno)
                  << " (the file is unchanged)");
  committed_ = true;
  ::close(fd_);  // the file is synced: close reports nothing more
  fd_ = -1;
  durable_step();
}

void AtomicFile::commit() {
  const bool special = temp_.empty();
  rename_into_place();
  if (special) return;
  const fs::path target(path_);
  fsync_directory(target.has_parent_path() ? target.parent_path().string() : ".", what_);
}

FileRecord AtomicFile::record() const { return {bytes_, sha256_}; }

void write_file(const std::string& path, std::string_view text, const std::string& what) {
  AtomicFile f(path, what);
  f.write(text);
  f.commit();
}

ModelFiles::ModelFiles(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  QKV_CHECK(!ec, "model directory '" << dir_ << "': cannot create it: " << ec.message());
  QKV_CHECK(fs::is_directory(dir_, ec), "model directory '" << dir_ << "': not a directory");
}

ModelFiles::~ModelFiles() = default;

AtomicFile& ModelFiles::add(const std::string& name) {
  QKV_CHECK(name != "config.json", "ModelFiles: config.json is written by commit()");
  for (const auto& [n, f] : files_) QKV_CHECK(n != name, "ModelFiles: '" << name << "' added twice");
  files_.emplace_back(name, std::make_unique<AtomicFile>((fs::path(dir_) / name).string(), dir_ + "/" + name));
  return *files_.back().second;
}

void ModelFiles::add(const std::string& name, std::string_view text) { add(name).write(text); }

void ModelFiles::commit(std::string_view config_json) {
  nlohmann::ordered_json config = io::parse_json<nlohmann::ordered_json>(config_json, "ModelFiles: the config", false);
  QKV_CHECK(config.is_object(), "ModelFiles: the config is not a JSON object");
  // Every file complete and synced before any is renamed: a kill before the renames leaves
  // the directory as it was.
  for (auto& [name, f] : files_) f->finish();
  nlohmann::ordered_json records = nlohmann::ordered_json::object();
  for (auto& [name, f] : files_) {
    const FileRecord r = f->record();
    records[name] = {{"bytes", r.bytes}, {"sha256", r.sha256}};
  }
  config["files"] = records;
  AtomicFile config_file((fs::path(dir_) / "config.json").string(), dir_ + "/config.json");
  config_file.write(config.dump(2) + "\n");
  config_file.finish();
  {
    // One writer's group at a time: two writers of one directory at once (two trainings
    // into one --out) would otherwise interleave their renames and could leave one's
    // model.safetensors beside the other's config.json, which then refuses it.
    const DirectoryLock lock(dir_);
    for (auto& [name, f] : files_) f->rename_into_place();
    config_file.rename_into_place();
    fsync_directory(dir_, dir_);
  }
  files_.clear();
}

void check_model_files(const std::string& config_path) {
  // config.json is read again here (16 MiB at most, as JsonConfig reads it); the listed
  // files' sizes are compared first, so a mismatch is found without hashing.
  const std::string text = io::read_file(config_path, "config", std::uint64_t{16} << 20);
  const nlohmann::json config = io::parse_json(text, config_path, false);
  if (!config.is_object() || !config.contains("files")) return;
  const nlohmann::json& files = config["files"];
  QKV_CHECK(files.is_object(), config_path << ": \"files\" must be an object of file records");
  const fs::path dir = fs::path(config_path).parent_path();
  for (const auto& [name, record] : files.items()) {
    QKV_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
              config_path << ": \"files\" names '" << name.substr(0, 200) << "', not a file of the directory");
    QKV_CHECK(record.is_object() && record.contains("bytes") && record["bytes"].is_number_unsigned() &&
                  record.contains("sha256") && record["sha256"].is_string(),
              config_path << ": \"files\" record of '" << name << "' must have bytes and sha256");
    const std::string path = (dir / name).string();
    const auto expected = record["bytes"].get<std::uint64_t>();
    struct stat st{};
    const std::string hint =
        " (a write of the model was interrupted, or the file was changed after it was written; "
        "write the model again or restore its directory)";
    QKV_CHECK(::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode),
              path << ": missing, but " << config_path << " records it" << hint);
    QKV_CHECK(static_cast<std::uint64_t>(st.st_size) == expected,
              path << ": " << st.st_size << " bytes, but " << config_path << " records " << expected << hint);
    QKV_CHECK(file_sha256(path) == record["sha256"].get<std::string>(),
              path << ": its SHA-256 is not the one " << config_path << " records" << hint);
  }
}

std::string file_sha256(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  QKV_CHECK(fd >= 0, "cannot open '" << path << "': " << why(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("'" + path + "' is not a regular file (or does not exist)");
  }
  AtomicFile::Digest sha;
  std::vector<char> buffer(std::size_t{1} << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw Error("reading '" + path + "' failed: " + why(err));
    }
    if (n == 0) break;
    sha.update(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  return sha.hex();
}

std::string sha256_hex(std::string_view bytes) {
  AtomicFile::Digest sha;
  sha.update(bytes.data(), bytes.size());
  return sha.hex();
}

}  // namespace qkv
