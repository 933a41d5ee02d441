// Checking a call's memory against the limit (qkv/memory.h) before anything is allocated.
// Internal (docs/CONTRIBUTING.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <optional>
#include <string>

#include "qkv/error.h"

namespace qkv::detail {

// a · b · ... as bytes, or nullopt when a factor is negative or the product exceeds
// SIZE_MAX: sizes that follow from input are multiplied only through this.
std::optional<std::size_t> checked_product(std::initializer_list<std::int64_t> factors);

// "1.50 GiB (1610612736 bytes)": a size for messages.
std::string describe_bytes(std::size_t bytes);

// The limit and where it comes from, for messages: "19.6 GiB (80% of physical memory ...)".
std::string describe_memory_limit();

// The default limit read afresh (default_memory_limit() reads it once per process).
std::size_t read_default_memory_limit();

// QKV_MEMORY_LIMIT's syntax: digits, then optionally K, M, G or T (either case; 2^10 ...
// 2^40). nullopt when `text` is not of that form, is 0, or exceeds SIZE_MAX.
std::optional<std::size_t> parse_memory_size(const char* text);

// What one call will allocate, part by part, added up before it allocates any of it:
//   MemoryPlan plan("scaled_dot_product_attention");
//   plan.add("the output (B, Hq, Lq, Dv)", {B, Hq, Lq, Dv, 4});
//   plan.add_per_thread("kernel scratch", threads, scratch_bytes);
//   plan.check();  // qkv::Error of ErrorKind::memory over the limit, naming every part
//   (or plan.run([&] { ...allocate and compute... }), which checks first)
// `what` must outlive the plan (a string literal). No allocation unless a check fails.
class MemoryPlan {
 public:
  explicit MemoryPlan(const char* who) noexcept : who_(who) {}

  // The product of `factors` bytes (elements times their size) for `what`.
  void add(const char* what, std::initializer_list<std::int64_t> factors) noexcept;
  // `threads` times `bytes_each` for `what` (messages say both).
  void add_per_thread(const char* what, int threads, std::int64_t bytes_each) noexcept;

  std::size_t bytes() const noexcept { return total_; }  // SIZE_MAX after an overflow
  bool overflowed() const noexcept { return overflow_; }

  // Throws qkv::Error of ErrorKind::memory when the total exceeds memory_limit() (or
  // overflowed), naming each part, the total and the limit.
  void check() const;

  // For an allocation that failed although the plan was within the limit: a qkv::Error of
  // ErrorKind::memory naming the plan (`cause`: what failed, e.g. "std::bad_alloc").
  [[noreturn]] void throw_allocation_failed(const std::string& cause) const;

  // check(), then body(): an allocation inside it that fails anyway (std::bad_alloc, or a
  // qkv::Error of ErrorKind::memory from a parallel region) becomes throw_allocation_failed,
  // so the message names the whole plan; other errors pass through unchanged.
  template <class Body>
  auto run(Body&& body) const -> decltype(body()) {
    check();
    try {
      return body();
    } catch (const std::bad_alloc&) {
      throw_allocation_failed("std::bad_alloc");
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::memory) throw;
      throw_allocation_failed(e.what());
    }
  }

 private:
  std::string parts_text() const;

  struct Part {
    const char* what;
    std::size_t bytes;
    bool overflow;
    int threads;  // > 0: bytes is that many threads' shares
  };
  static constexpr std::size_t kMaxParts = 12;
  const char* who_;
  std::array<Part, kMaxParts> parts_{};
  std::size_t count_ = 0;
  std::size_t total_ = 0;
  bool overflow_ = false;
};

}  // namespace qkv::detail
