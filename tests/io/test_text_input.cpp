// LineReader (src/io/text_input.h, internal): bounded reading of lines from the files a
// user names, and the messages that say which input, which line and what was wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "io/text_input.h"
#include "attention/expect_error.h"
#include "qkv/error.h"

namespace {

namespace fs = std::filesystem;
using qkv::io::LineReader;
using qkv::io::LineReaderOptions;

using qkv::testing::expect_error_mentioning;

class TextInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("qkv_text_input_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

  static std::vector<std::string> lines(const std::string& path, LineReaderOptions o = {}) {
    LineReader reader(path, "--file", o);
    std::vector<std::string> out;
    std::string line;
    while (reader.next(line)) {
      out.push_back(line);
      EXPECT_EQ(reader.line_number(), static_cast<std::int64_t>(out.size()));
    }
    return out;
  }

  fs::path dir_;
};

TEST_F(TextInput, LinesWithoutTheirBreaks) {
  EXPECT_EQ(lines(write("a.txt", "one\r\ntwo\n\nthree")),
            (std::vector<std::string>{"one", "two", "", "three"}));
  EXPECT_EQ(lines(write("b.txt", "only\n")), (std::vector<std::string>{"only"}));
  EXPECT_EQ(lines(write("c.txt", "\n")), (std::vector<std::string>{""}));
}

TEST_F(TextInput, ManyLinesAcrossChunks) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += std::to_string(i) + "\n";
  const auto got = lines(write("many.txt", text));
  ASSERT_EQ(got.size(), 100000u);
  EXPECT_EQ(got[0], "0");
  EXPECT_EQ(got[65535], "65535");
  EXPECT_EQ(got.back(), "99999");
}

// Line numbers count lines, whatever the bytes of the lines before hold.
TEST_F(TextInput, LineNumbersCountLinesAfterNonAscii) {
  const std::string path = write("u.txt", "二〇二六年十一月二十一日\nSaturday, 21 Nov\nx\xff y\n");
  expect_error_mentioning([&] { lines(path); }, {"--file '" + path + "' line 3: ", "not UTF-8",
                                      "byte 0xff at character 2"});
  LineReader reader(path, "--file");
  std::string line;
  ASSERT_TRUE(reader.next(line));
  ASSERT_TRUE(reader.next(line));
  EXPECT_EQ(reader.where(), "--file '" + path + "' line 2");
}

TEST_F(TextInput, RefusesWhatIsNotText) {
  const std::string missing = (dir_ / "missing.txt").string();
  expect_error_mentioning([&] { lines(missing); }, {"--file '" + missing + "'", "cannot open"});
  expect_error_mentioning([&] { lines(dir_.string()); }, {dir_.string(), "is a directory"});
  const std::string empty = write("empty.txt", "");
  expect_error_mentioning([&] { lines(empty); }, {empty, "is empty"});
  LineReaderOptions allow;
  allow.allow_empty = true;
  EXPECT_TRUE(lines(empty, allow).empty());
  const std::string nul = write("nul.bin", std::string("ok\nab\0cd\n", 9));
  expect_error_mentioning([&] { lines(nul); }, {nul + "' line 2: binary data (a NUL byte)"});
  expect_error_mentioning([&] { lines(""); }, {"the path is empty"});
}

TEST_F(TextInput, LineLengthLimit) {
  LineReaderOptions o;
  o.max_line_bytes = 8;
  EXPECT_EQ(lines(write("ok.txt", "12345678\r\n12345678"), o),
            (std::vector<std::string>{"12345678", "12345678"}));
  expect_error_mentioning([&] { lines(write("long.txt", "short\n123456789\n"), o); },
               {"line 2: longer than the limit of 8 bytes"});
  expect_error_mentioning([&] { lines(write("last.txt", "short\n123456789"), o); },
               {"line 2: longer than the limit of 8 bytes"});
  // An endless line stops at the limit, not at the end of memory.
  o.max_line_bytes = 1000;
  std::string many_a(200000, 'a');
  expect_error_mentioning([&] { lines(write("aaa.txt", many_a), o); }, {"line 1: longer than the limit"});
}

TEST_F(TextInput, TotalLimitCheckedBeforeReading) {
  LineReaderOptions o;
  o.max_total_bytes = 10;
  const std::string big = write("big.txt", "0123456789\n");
  expect_error_mentioning([&] { LineReader r(big, "merges", o); },
               {"merges '" + big + "': is 11 bytes, more than the limit of 10 bytes"});
  EXPECT_EQ(lines(write("fits.txt", "012345678\n"), o), (std::vector<std::string>{"012345678"}));
}

TEST_F(TextInput, EndlessDevicesEndWithAnError) {
  if (!fs::exists("/dev/zero")) GTEST_SKIP() << "no /dev/zero";
  expect_error_mentioning([&] { lines("/dev/zero"); }, {"'/dev/zero' line 1: binary data"});
}

TEST_F(TextInput, FifoWithoutWriterReadsAsEmpty) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error_mentioning([&] { lines(fifo); }, {fifo, "is empty"});
}

TEST(TextInputBytes, Text) {
  EXPECT_EQ(qkv::io::bytes_text(5), "5 bytes");
  EXPECT_EQ(qkv::io::bytes_text(1 << 20), "1048576 bytes (1 MiB)");
  EXPECT_EQ(qkv::io::bytes_text(3 << 19), "1572864 bytes (1.5 MiB)");
}

}  // namespace
