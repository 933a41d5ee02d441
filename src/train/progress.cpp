// The one progress printer of training (qkv/trainer.h): a bar with the rate and the time left.
#include <cstdio>
#include <ostream>
#include <string>

#include "qkv/trainer.h"

namespace qkv::train {

namespace {

std::string clock_time(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

template <class... Args>
std::string format(const char* f, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

}  // namespace

std::string progress_line(const Progress& p) {
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * p.step / std::max<std::int64_t>(p.total, 1));
  std::string bar;
  for (int i = 0; i < kWidth; ++i) bar += i < filled ? "█" : "·";
  const double eta = p.step > 0 ? p.elapsed_s / static_cast<double>(p.step) * static_cast<double>(p.total - p.step) : 0.0;
  std::string line = format("step %lld/%lld ", static_cast<long long>(p.step), static_cast<long long>(p.total)) + bar +
                     format(" loss %.4f", p.loss);
  if (p.accuracy >= 0) line += format("  acc %5.1f%%", 100.0 * p.accuracy);
  if (p.epochs > 0) line += format("  epoch %lld/%lld", static_cast<long long>(p.epoch), static_cast<long long>(p.epochs));
  line += format("  lr %.2e  %.0f %s/s  ", p.lr, p.items_per_s, p.unit.c_str()) + clock_time(p.elapsed_s) +
          " elapsed, ETA " + clock_time(eta);
  if (p.evaluated) line += "  " + p.metric + format(" %.4f", p.score) + (p.best ? " (best)" : "");
  return line;
}

ProgressCallback progress_printer(std::ostream& out, bool tty, std::int64_t every) {
  return [&out, tty, every](const Progress& p) {
    const std::int64_t n = every > 0 ? every : std::max<std::int64_t>(1, p.total / 20);
    const bool keep = p.evaluated || p.step == p.total;
    if (tty) {
      out << "\r\033[K" << progress_line(p) << (keep ? "\n" : "") << std::flush;
    } else if (p.step % n == 0 || keep) {
      out << progress_line(p) << '\n' << std::flush;
    }
  };
}

}  // namespace qkv::train
