// The memory limit (qkv/memory.h, src/core/budget.h): sizes that follow from input are
// added up with overflow checks and compared with the limit before anything is allocated;
// over it is qkv::Error of ErrorKind::memory naming the bytes and what they were for.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/budget.h"
#include "qkv/error.h"
#include "qkv/memory.h"
#include "qkv/tensor.h"

namespace qkv {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct LimitGuard {
  ~LimitGuard() { reset_memory_limit(); }
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(MemoryLimit, SizesParseWithBinarySuffixes) {
  EXPECT_EQ(detail::parse_memory_size("1"), 1u);
  EXPECT_EQ(detail::parse_memory_size("4096"), 4096u);
  EXPECT_EQ(detail::parse_memory_size("8K"), 8u << 10);
  EXPECT_EQ(detail::parse_memory_size("512m"), 512u << 20);
  EXPECT_EQ(detail::parse_memory_size("6G"), std::size_t{6} << 30);
  EXPECT_EQ(detail::parse_memory_size("2T"), std::size_t{2} << 40);
  for (const char* bad : {"", "0", "0G", "-1", "1.5G", "G", "8GB", "8 G", " 8G", "8X", "1e9",
                          "99999999999999999999", "16777216T"})
    EXPECT_FALSE(detail::parse_memory_size(bad).has_value()) << "'" << bad << "'";
}

TEST(MemoryLimit, ProductsAreCheckedForOverflow) {
  EXPECT_EQ(detail::checked_product({2, 3, 4}), 24u);
  EXPECT_EQ(detail::checked_product({}), 1u);
  EXPECT_FALSE(detail::checked_product({std::int64_t{1} << 40, std::int64_t{1} << 40}).has_value());
  EXPECT_FALSE(detail::checked_product({4, -1}).has_value());
}

TEST(MemoryLimit, DefaultIsAFractionOfWhatTheMachineAllows) {
  const std::size_t limit = default_memory_limit();
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const auto physical = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
  EXPECT_GT(limit, 0u);
  EXPECT_LE(limit, physical);
  EXPECT_GE(limit, physical / 100);  // not absurdly small on an unconstrained test machine
  if (std::getenv("QKV_MEMORY_LIMIT") == nullptr) EXPECT_EQ(memory_limit(), limit);
}

// RLIMIT_AS counts: a process under `prlimit --as` gets at most 80% of it. In a child, as
// the limit cannot be raised again; not under AddressSanitizer, whose reserved shadow
// memory is already far beyond any such limit (its next mapping would fail).
TEST(MemoryLimit, AddressSpaceLimitCounts) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer maps more than the limit tested";
#else
  const std::size_t as_limit = std::size_t{3} << 30;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit as{as_limit, as_limit};
    if (setrlimit(RLIMIT_AS, &as) != 0) _exit(2);
    rlimit now{};
    if (getrlimit(RLIMIT_AS, &now) != 0 || now.rlim_cur != as_limit) _exit(3);  // QEMU's user mode ignores it
    const std::size_t limit = detail::read_default_memory_limit();
    _exit(limit <= as_limit * 8 / 10 && limit >= as_limit * 7 / 10 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "this process cannot limit its address space (an emulator?)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: setrlimit failed; 1: the default ignored RLIMIT_AS";
#endif
}

TEST(MemoryLimit, SetterOverridesAndResets) {
  LimitGuard guard;
  set_memory_limit(123 * kMiB);
  EXPECT_EQ(memory_limit(), 123 * kMiB);
  EXPECT_TRUE(contains(detail::describe_memory_limit(), "set by set_memory_limit"));
  reset_memory_limit();
  EXPECT_NE(memory_limit(), 123 * kMiB);
  try {
    set_memory_limit(0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "set_memory_limit: bytes must be >= 1, got 0")) << e.what();
  }
}

TEST(MemoryLimit, TensorsOverTheLimitAreMemoryErrors) {
  LimitGuard guard;
  set_memory_limit(64 * kMiB);
  try {
    Tensor::empty({1024, 1024, 32});  // 128 MiB of f32
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::memory);
    EXPECT_TRUE(contains(e.what(), "Tensor::empty: a tensor of 128 MiB (134217728 bytes) exceeds the memory limit of 64 MiB"))
        << e.what();
  }
  EXPECT_NO_THROW(Tensor::empty({1024, 1024, 8}));  // 32 MiB
}

TEST(MemoryLimit, PlansNameEveryPartAndTheLimit) {
  LimitGuard guard;
  set_memory_limit(100 * kMiB);
  detail::MemoryPlan plan("some_call");
  plan.add("the output", {1024, 1024, 4});
  plan.add("nothing", {0, 5});
  plan.add_per_thread("scratch", 2, 64 * kMiB);
  EXPECT_EQ(plan.bytes(), 132 * kMiB);
  try {
    plan.check();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::memory);
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "some_call: needs 132 MiB (138412032 bytes) (the output: 4 MiB (4194304 bytes); "
                            "scratch: 128 MiB (134217728 bytes), 2 threads × 64 MiB (67108864 bytes)), more than the memory limit of "
                            "100 MiB (104857600 bytes), set by set_memory_limit"))
        << m;
    EXPECT_FALSE(contains(m, "nothing")) << m;
  }
  detail::MemoryPlan huge("huge_call");
  huge.add("the output", {std::int64_t{1} << 40, std::int64_t{1} << 30});
  EXPECT_TRUE(huge.overflowed());
  try {
    huge.check();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "huge_call: needs more than 2^64 bytes (the output: more than 2^64 bytes)")) << e.what();
  }
  detail::MemoryPlan small("small_call");
  small.add("the output", {1024});
  EXPECT_NO_THROW(small.check());
}

}  // namespace
}  // namespace qkv
