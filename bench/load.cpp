// qkv_bench_load — what loading weights by copy costs against mapping them.
//
// Usage: qkv_bench_load FILE.safetensors [ROUNDS]
//
// qkv::SafeTensors::open reads the file into memory (a copy) instead of mapping it: a
// mapping faults with SIGBUS when the file is truncated under a running model, and changes
// when the file is rewritten in place. This program measures what that choice costs, on one
// file, the two ways interleaved round by round, with the file in the page cache (a first
// untimed read warms it):
//
//   copy   SafeTensors::open(FILE) (read into one aligned allocation, header validated)
//          and get() of every tensor: the shipped load.
//   mmap   mmap(PROT_READ, MAP_PRIVATE) of the file and one read per 4 KiB page: the
//          page faults a mapped model pays at its first forward instead of at load.
//
// For each: the median and minimum milliseconds over ROUNDS (default 9), and the resident
// memory the first load adds (VmRSS after minus before, in MiB; later rounds reuse the heap
// the earlier ones freed, so only the first says what a process pays). Mapped pages of the
// page cache are counted in VmRSS too (as RssFile), so both figures are what `top` shows;
// the difference is that the copy's pages are the process's own (RssAnon: two processes
// loading one model hold it twice) and stay when the file changes, while the mapping's are
// shared with the page cache and every process that maps the file.
//
// Prints one JSON line. A benchmark, not a test: nothing here asserts a time.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/error.h"
#include "qkv/safetensors.h"

namespace {

// This process's resident set (VmRSS of /proc/self/status), in bytes.
std::int64_t resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

volatile std::size_t sink = 0;  // what the loops read goes here, so they are kept

struct Sample {
  double ms = 0;
  std::int64_t added = 0;  // bytes of VmRSS the loaded weights add
};

Sample load_by_copy(const std::string& path) {
  const std::int64_t before = resident_bytes();
  const auto t = std::chrono::steady_clock::now();
  const qkv::SafeTensors st = qkv::SafeTensors::open(path);
  std::size_t elements = 0;
  for (const std::string& name : st.names()) {
    try {
      elements += static_cast<std::size_t>(st.get(name).numel());
    } catch (const qkv::Error&) {  // a dtype get() does not convert (I64 ids): skipped, as models do
    }
  }
  sink = elements;  // the loop is not optimised away
  return {ms_since(t), resident_bytes() - before};
}

Sample load_by_mapping(const std::string& path) {
  const std::int64_t before = resident_bytes();
  const auto t = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path);
  struct stat st{};
  ::fstat(fd, &st);
  const auto length = static_cast<std::size_t>(st.st_size);
  void* map = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw std::runtime_error("cannot map " + path);
  const volatile unsigned char* bytes = static_cast<const unsigned char*>(map);
  std::size_t sum = 0;
  for (std::size_t i = 0; i < length; i += 4096) sum += bytes[i];  // one fault per page
  const Sample s{ms_since(t), resident_bytes() - before};
  ::munmap(map, length);
  sink = sum;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: qkv_bench_load FILE.safetensors [ROUNDS]\n";
    return 2;
  }
  const std::string path = argv[1];
  const int rounds = argc == 3 ? std::max(1, std::atoi(argv[2])) : 9;
  try {
    load_by_mapping(path);  // warms the page cache; not counted
    std::vector<double> copy_ms, map_ms;
    double copy_mib = 0, map_mib = 0;  // the first round's
    for (int r = 0; r < rounds; ++r) {  // interleaved, so drift of the machine hits both
      const Sample c = load_by_copy(path);
      const Sample m = load_by_mapping(path);
      copy_ms.push_back(c.ms);
      map_ms.push_back(m.ms);
      if (r == 0) {
        copy_mib = static_cast<double>(c.added) / (1 << 20);
        map_mib = static_cast<double>(m.added) / (1 << 20);
      }
    }
    struct stat st{};
    ::stat(path.c_str(), &st);
    nlohmann::json out = {
        {"file", path},
        {"mib", static_cast<double>(st.st_size) / (1 << 20)},
        {"rounds", rounds},
        {"copy_ms", median(copy_ms)},
        {"copy_min_ms", *std::min_element(copy_ms.begin(), copy_ms.end())},
        {"mmap_ms", median(map_ms)},
        {"mmap_min_ms", *std::min_element(map_ms.begin(), map_ms.end())},
        {"copy_first_rss_mib", copy_mib},
        {"mmap_first_rss_mib", map_mib},
    };
    std::cout << out.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "qkv_bench_load: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
