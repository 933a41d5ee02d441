// check_output_path (commands.h): an output file is checked before the work that fills it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "commands.h"
#include "print.h"
#include "qkv/error.h"

namespace qkv::cli {

void check_output_path(const std::string& option, const std::string& path) {
  struct stat st{};
  const bool existed = ::stat(path.c_str(), &st) == 0;
  if (existed && S_ISDIR(st.st_mode))
    throw Error(option + " " + quote_value(path) + ": is a directory, not a file");
  // O_NONBLOCK: a FIFO without a reader is refused (ENXIO) instead of waited for.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd < 0) {
    const int e = errno;
    throw Error(option + " " + quote_value(path) + ": cannot write: " + std::strerror(e));
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
}

}  // namespace qkv::cli
