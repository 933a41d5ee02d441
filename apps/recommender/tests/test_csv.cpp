// RFC 4180 CSV (apps/recommender/csv.h): quoting, doubled quotes, line breaks inside quotes, CRLF, and
// malformed input named by its line.
#include <gtest/gtest.h>

#include "attention/expect_error.h"
#include "recommender/csv.h"

namespace {

using qkv::io::CsvRecord;
using qkv::io::csv_field;
using qkv::io::parse_csv;
using qkv::testing::expect_error;

TEST(Csv, FieldsQuotesAndLines) {
  const auto r = parse_csv("a,b,c\n1,\"x, y\",\"say \"\"hi\"\"\"\r\n\n2,,\"two\nlines\"\n3,last", "t");
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].fields, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(r[1].fields, (std::vector<std::string>{"1", "x, y", "say \"hi\""}));
  EXPECT_EQ(r[1].line, 2);
  EXPECT_EQ(r[2].fields, (std::vector<std::string>{"2", "", "two\nlines"}));
  EXPECT_EQ(r[2].line, 4);  // the empty line 3 is skipped, and counted
  EXPECT_EQ(r[3].fields, (std::vector<std::string>{"3", "last"}));
  EXPECT_EQ(r[3].line, 6);  // the quoted line break counted too
  EXPECT_TRUE(parse_csv("", "t").empty());
  EXPECT_EQ(parse_csv("x,", "t")[0].fields, (std::vector<std::string>{"x", ""}));
  EXPECT_EQ(parse_csv("\xEF\xBB\xBFuserId,b\n", "t")[0].fields, (std::vector<std::string>{"userId", "b"}));
}

TEST(Csv, MalformedInputNamesTheLine) {
  expect_error([] { parse_csv("a,b\n1,\"open\n2,3\n", "f.csv"); }, "f.csv line 2: a quoted field is never closed");
  expect_error([] { parse_csv("a,b\n1,b\"ad\n", "f.csv"); }, "f.csv line 2: a quote inside unquoted field 2");
  expect_error([] { parse_csv("a\n\n\"x\"y\n", "f.csv"); }, "f.csv line 3: text after the closing quote of field 1");
  expect_error([] { parse_csv("a\rb\n", "f.csv"); }, "f.csv line 1: a lone carriage return");
  // An unclosed quote on line 2 meets the next quote on line 4.
  expect_error([] { parse_csv("a,b\n1,\"open\n2,3\n4,\"x, y\"\n", "f.csv"); },
               "f.csv line 2: text after the closing quote of field 2 (the quoted field runs to line 4");
}

TEST(Csv, WrittenFieldsReadBack) {
  for (const std::string s : {"plain", "", "a,b", "\xEF\xBB\xBF" "bom", "\"Great Performances\" Cats", "two\nlines", "x\"", "é, ü"}) {
    const auto r = parse_csv(csv_field(s) + "," + csv_field(s) + "\n", "t");
    ASSERT_EQ(r.size(), 1u) << s;
    EXPECT_EQ(r[0].fields, (std::vector<std::string>{s, s})) << s;
  }
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a\"b"), "\"a\"\"b\"");
}

}  // namespace
