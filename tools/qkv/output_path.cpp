// check_output_path (commands.h): an output file is checked before the work that fills it,
// and refused when it is one of the command's inputs.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "print.h"
#include "qkv/error.h"

namespace qkv::cli {

namespace {

// How a message names an input: "--images 'x.png'", or "config.json of --model 'DIR'".
std::string describe(const InputFile& in) {
  if (in.dir.empty()) return in.option + " " + quote_path(in.path);
  const std::string name = in.path.size() > in.dir.size() + 1 ? in.path.substr(in.dir.size() + 1) : in.path;
  return quote_path(name) + " of " + in.option + " " + quote_path(in.dir);
}

// The input `path` is (the same device and inode, symlinks followed: also a hard link), or
// nullptr. Only a regular file can be destroyed by writing it: a device or a FIFO (/dev/null,
// /dev/stdout) given both as an input and an output is not refused.
const InputFile* same_file_as(const std::string& path, const Inputs& inputs) {
  struct stat out{};
  if (::stat(path.c_str(), &out) != 0 || !S_ISREG(out.st_mode)) return nullptr;
  for (const InputFile& in : inputs) {
    struct stat st{};
    if (::stat(in.path.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino)
      return &in;
  }
  return nullptr;
}

}  // namespace

void add_input(Inputs& inputs, const std::string& option, const std::string& path) {
  if (path.empty() || path == "-") return;  // standard input is no file to overwrite
  inputs.push_back({option, path, ""});
}

void add_directory_inputs(Inputs& inputs, const std::string& option, const std::string& dir) {
  if (dir.empty()) return;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;  // the command names a missing or unreadable directory itself
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  const std::string prefix = dir.back() == '/' ? dir : dir + "/";
  for (const std::string& name : names) {
    struct stat st{};
    const std::string path = prefix + name;
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      inputs.push_back({option, path, prefix.substr(0, prefix.size() - 1)});
  }
}

void check_output_path(const std::string& option, const std::string& path, const Inputs& inputs) {
  struct stat st{};
  const bool existed = ::stat(path.c_str(), &st) == 0;
  if (existed && S_ISDIR(st.st_mode))
    throw Error(option + " " + quote_path(path) + ": is a directory, not a file");
  if (const InputFile* in = same_file_as(path, inputs))
    throw Error(option + " " + quote_path(path) + " is the same file as " + describe(*in) +
                ": an output never overwrites an input; name another file");
  // O_NONBLOCK: a FIFO without a reader is refused (ENXIO) instead of waited for.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd < 0) {
    const int e = errno;
    throw Error(option + " " + quote_path(path) + ": cannot write: " + std::strerror(e));
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
}

void check_output_dir(const std::string& option, const std::string& dir,
                      const std::vector<std::string>& names, const Inputs& inputs) {
  if (dir.empty()) return;
  const std::string prefix = dir.back() == '/' ? dir : dir + "/";
  for (const std::string& name : names)
    if (const InputFile* in = same_file_as(prefix + name, inputs))
      throw Error(option + " " + quote_path(dir) + ": the " + name +
                  " written there would overwrite " + describe(*in) +
                  " (the same file): an output never overwrites an input; name another --out");
}

}  // namespace qkv::cli
