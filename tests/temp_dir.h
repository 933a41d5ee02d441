// A scratch directory for one test, under the system temp dir, made empty at the start
// and removed when the test ends. Named qkv_test_<name>_<pid>_<n>: tests running in
// parallel processes, or twice in one, never share one.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace qkv::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name = "dir") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("qkv_test_" + name + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }  // path/name
  // Writes `content` to path/name (binary) -> its path.
  std::filesystem::path write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return path / name;
  }
};

}  // namespace qkv::testing
