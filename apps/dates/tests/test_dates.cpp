// qkv::dates: the calendar against independent formulas (Zeller's congruence, a day-by-day
// walk), every format's plain form exactly, and 200k sampled pairs parsed back by a parser
// written here from the format table alone — so a variation that changes the date, a
// weekday that disagrees, or a character outside the vocabulary fails.
#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "dates/dates.h"
#include "qkv/error.h"
#include "qkv/rng.h"

namespace {

using qkv::dates::Date;
using qkv::dates::Vocabulary;

// ---------------------------------------------------------------------------------------
// Independent references.

bool leap(int y) { return y % 400 == 0 || (y % 100 != 0 && y % 4 == 0); }

int month_length(int y, int m) {
  if (m == 2) return leap(y) ? 29 : 28;
  return (m == 4 || m == 6 || m == 9 || m == 11) ? 30 : 31;
}

Date next_day(Date d) {
  if (++d.day > month_length(d.year, d.month)) {
    d.day = 1;
    if (++d.month > 12) d.month = 1, ++d.year;
  }
  return d;
}

// Zeller's congruence (Gregorian): h = 0 is Saturday; returned with 0 = Monday.
int zeller_weekday(const Date& d) {
  int y = d.year, m = d.month;
  if (m < 3) m += 12, --y;
  const int K = y % 100, J = y / 100;
  const int h = (d.day + 13 * (m + 1) / 5 + K + K / 4 + J / 4 + 5 * J) % 7;
  return (h + 5) % 7;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The parser: any format's output back to (date, weekday or -1). Knows only the table in
// dates.h; nullopt for anything it does not recognise (a test failure).
struct Parsed {
  Date date{0, 0, 0};
  int weekday = -1;
};

const std::array<std::string, 12> kMonthNames = {"january", "february", "march",     "april",
                                                 "may",     "june",     "july",      "august",
                                                 "september", "october", "november", "december"};
const std::array<std::string, 7> kDayNames = {"monday", "tuesday",  "wednesday", "thursday",
                                              "friday", "saturday", "sunday"};
const std::array<std::string, 10> kHanDigits = {"〇", "一", "二", "三", "四",
                                                "五", "六", "七", "八", "九"};

std::optional<int> parse_int(std::string_view s) {
  if (s.empty() || s.size() > 4) return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::string expected_suffix(int n) {
  if (n % 100 >= 11 && n % 100 <= 13) return "th";
  return n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
}

// Han digits (〇..九, 3 bytes each) read positionally, or with 十 as a Chinese number.
std::optional<int> parse_han(std::string_view s, bool positional) {
  int value = 0, pending = -1;
  bool ten = false;
  for (std::size_t i = 0; i < s.size(); i += 3) {
    const std::string_view ch = s.substr(i, 3);
    if (ch == "十" && !positional && !ten) {
      value = (pending < 0 ? 1 : pending) * 10, pending = -1, ten = true;
      continue;
    }
    int digit = -1;
    for (int k = 0; k < 10; ++k) if (ch == kHanDigits[static_cast<std::size_t>(k)]) digit = k;
    if (digit < 0) return std::nullopt;
    if (positional) value = value * 10 + digit;
    else if (pending >= 0) return std::nullopt;
    else pending = digit;
  }
  if (s.empty()) return std::nullopt;
  return value + (pending < 0 ? 0 : pending);
}

std::optional<Parsed> parse_chinese(std::string_view s) {
  const auto y_end = s.find("年"), m_end = s.find("月"), d_end = s.find("日");
  if (y_end == s.npos || m_end == s.npos || d_end == s.npos || !(y_end < m_end && m_end < d_end)) {
    return std::nullopt;
  }
  const std::string_view ys = s.substr(0, y_end), ms = s.substr(y_end + 3, m_end - y_end - 3),
                         ds = s.substr(m_end + 3, d_end - m_end - 3), rest = s.substr(d_end + 3);
  Parsed p;
  const bool han = !parse_int(ys);
  const auto y = han ? parse_han(ys, true) : parse_int(ys);
  const auto m = han ? parse_han(ms, false) : parse_int(ms);
  const auto d = han ? parse_han(ds, false) : parse_int(ds);
  if (!y || !m || !d || (han && ys.size() != 12)) return std::nullopt;
  // Arabic Chinese dates are written without zero padding.
  if (!han && ((ms.size() == 2 && ms[0] == '0') || (ds.size() == 2 && ds[0] == '0'))) {
    return std::nullopt;
  }
  p.date = {*y, *m, *d};
  if (!rest.empty()) {
    if (han) return std::nullopt;
    const std::array<std::string, 7> names = {"星期一", "星期二", "星期三", "星期四",
                                              "星期五", "星期六", "星期日"};
    for (int k = 0; k < 7; ++k) if (rest == names[static_cast<std::size_t>(k)]) p.weekday = k;
    if (p.weekday < 0) return std::nullopt;
  }
  return p;
}

std::optional<Parsed> parse_numeric(std::string_view s) {
  const char sep = s.find('.') != s.npos ? '.' : s.find('/') != s.npos ? '/' : '-';
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) parts.push_back(s.substr(start, i - start)), start = i + 1;
  }
  if (parts.size() != 3) return std::nullopt;
  const auto a = parse_int(parts[0]), b = parse_int(parts[1]), c = parse_int(parts[2]);
  if (!a || !b || !c) return std::nullopt;
  if (sep == '.' && parts[2].size() == 4) return Parsed{{*c, *b, *a}, -1};
  if (sep != '.' && parts[0].size() == 4) {
    if (sep == '-' && (parts[1].size() != 2 || parts[2].size() != 2)) return std::nullopt;
    return Parsed{{*a, *b, *c}, -1};
  }
  return std::nullopt;
}

std::optional<Parsed> parse_english(std::string_view s) {
  Parsed p;
  std::string word;
  std::vector<std::string> words;
  for (char c : std::string(s) + " ") {
    if (c == ' ' || c == ',') {
      if (!word.empty()) words.push_back(lower(word));
      word.clear();
    } else {
      word += c;
    }
  }
  for (const std::string& w : words) {
    if (w == "the" || w == "of") continue;
    bool named = false;
    for (int k = 0; k < 12; ++k) {
      const std::string& name = kMonthNames[static_cast<std::size_t>(k)];
      if (w == name || w == name.substr(0, 3)) {
        if (p.date.month != 0) return std::nullopt;
        p.date.month = k + 1, named = true;
      }
    }
    for (int k = 0; k < 7; ++k) {
      const std::string& name = kDayNames[static_cast<std::size_t>(k)];
      if (w == name || w == name.substr(0, 3)) {
        if (p.weekday >= 0) return std::nullopt;
        p.weekday = k, named = true;
      }
    }
    if (named) continue;
    std::size_t digits = 0;
    while (digits < w.size() && std::isdigit(static_cast<unsigned char>(w[digits]))) ++digits;
    const auto n = parse_int(w.substr(0, digits));
    if (!n) return std::nullopt;
    if (digits == 4 && w.size() == 4) {
      if (p.date.year != 0) return std::nullopt;
      p.date.year = *n;
    } else {
      const std::string suffix = w.substr(digits);
      if (digits > 2 || p.date.day != 0 || (!suffix.empty() && suffix != expected_suffix(*n))) {
        return std::nullopt;
      }
      p.date.day = *n;
    }
  }
  return p;
}

std::optional<Parsed> parse_input(std::string_view s) {
  if (s.find("年") != s.npos) return parse_chinese(s);
  if (!s.empty() && std::isdigit(static_cast<unsigned char>(s[0])) &&
      s.find_first_of("./-") != s.npos && s.find(' ') == s.npos) {
    return parse_numeric(s);
  }
  return parse_english(s);
}

std::size_t code_points(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Only unk-free, ≤ kMaxInputLength, parses back to `expected`, weekday (if named) agrees.
void expect_consistent(const std::string& input, const Date& expected) {
  const auto parsed = parse_input(input);
  ASSERT_TRUE(parsed.has_value()) << "unparseable input '" << input << "'";
  EXPECT_EQ(parsed->date, expected) << "input '" << input << "' means "
                                    << parsed->date.year << "-" << parsed->date.month << "-"
                                    << parsed->date.day << ", expected "
                                    << qkv::dates::to_iso(expected);
  if (parsed->weekday >= 0) {
    EXPECT_EQ(parsed->weekday, zeller_weekday(expected)) << "wrong weekday in '" << input << "'";
  }
  EXPECT_LE(code_points(input), static_cast<std::size_t>(qkv::dates::kMaxInputLength)) << input;
}

Date from_iso(const std::string& s) {
  EXPECT_EQ(s.size(), 10u) << s;
  const auto p = parse_numeric(s);
  EXPECT_TRUE(p.has_value()) << s;
  return p ? p->date : Date{0, 0, 0};
}

// ---------------------------------------------------------------------------------------
// Calendar.

TEST(Dates, DayIndexRoundTripsOverEveryDay) {
  ASSERT_EQ(qkv::dates::num_days(), 73049);  // 200·365 + 49 leap days (1904..2096)
  Date walked = qkv::dates::kFirstDate;
  for (std::int64_t i = 0; i < qkv::dates::num_days(); ++i) {
    const Date d = qkv::dates::date_at(i);
    ASSERT_EQ(d, walked) << "date_at(" << i << ")";
    ASSERT_EQ(qkv::dates::day_index(d), i);
    walked = next_day(walked);
  }
  EXPECT_EQ(qkv::dates::date_at(qkv::dates::num_days() - 1), qkv::dates::kLastDate);
  EXPECT_EQ(walked, (Date{2100, 1, 1}));
}

TEST(Dates, InvalidDatesThrow) {
  for (const Date& d : {Date{1899, 12, 31}, Date{2100, 1, 1}, Date{2023, 2, 29}, Date{1900, 2, 29},
                        Date{2024, 2, 30}, Date{2024, 4, 31}, Date{2024, 0, 1}, Date{2024, 13, 1},
                        Date{2024, 1, 0}, Date{2024, 1, 32}}) {
    EXPECT_THROW(qkv::dates::day_index(d), qkv::Error) << qkv::dates::is_leap_year(d.year);
    EXPECT_THROW(qkv::dates::format_date(d, 0), qkv::Error);
  }
  EXPECT_THROW(qkv::dates::date_at(-1), qkv::Error);
  EXPECT_THROW(qkv::dates::date_at(qkv::dates::num_days()), qkv::Error);
  EXPECT_THROW(qkv::dates::format_date(Date{2026, 11, 21}, -1), qkv::Error);
  EXPECT_THROW(qkv::dates::format_date(Date{2026, 11, 21}, qkv::dates::kNumFormats), qkv::Error);
}

TEST(Dates, LeapYears) {
  EXPECT_FALSE(qkv::dates::is_leap_year(1900));
  EXPECT_TRUE(qkv::dates::is_leap_year(2000));
  EXPECT_TRUE(qkv::dates::is_leap_year(2024));
  EXPECT_FALSE(qkv::dates::is_leap_year(2023));
  EXPECT_FALSE(qkv::dates::is_leap_year(2100));
  EXPECT_EQ(qkv::dates::days_in_month(1900, 2), 28);
  EXPECT_EQ(qkv::dates::days_in_month(2000, 2), 29);
  const std::int64_t feb28 = qkv::dates::day_index({2000, 2, 28});
  EXPECT_EQ(qkv::dates::date_at(feb28 + 1), (Date{2000, 2, 29}));
  EXPECT_EQ(qkv::dates::date_at(qkv::dates::day_index({1900, 2, 28}) + 1), (Date{1900, 3, 1}));
  int leap_days = 0;
  for (int y = 1900; y <= 2099; ++y) leap_days += qkv::dates::days_in_month(y, 2) == 29;
  EXPECT_EQ(leap_days, 49);
}

TEST(Dates, WeekdayKnownAndZellerOverEveryDay) {
  EXPECT_EQ(qkv::dates::weekday({2026, 11, 21}), 5);  // Saturday
  EXPECT_EQ(qkv::dates::weekday({1900, 1, 1}), 0);    // Monday
  EXPECT_EQ(qkv::dates::weekday({2000, 2, 29}), 1);   // Tuesday
  EXPECT_EQ(qkv::dates::weekday({1969, 7, 20}), 6);   // Sunday (Apollo 11 landing)
  for (std::int64_t i = 0; i < qkv::dates::num_days(); ++i) {
    const Date d = qkv::dates::date_at(i);
    ASSERT_EQ(qkv::dates::weekday(d), zeller_weekday(d)) << qkv::dates::to_iso(d);
  }
}

TEST(Dates, Iso) {
  EXPECT_EQ(qkv::dates::to_iso({2026, 11, 21}), "2026-11-21");
  EXPECT_EQ(qkv::dates::to_iso({1900, 1, 1}), "1900-01-01");
  EXPECT_EQ(qkv::dates::to_iso({2099, 12, 31}), "2099-12-31");
}

// ---------------------------------------------------------------------------------------
// Formats.

std::vector<std::string> plain_formats(const Date& d) {
  std::vector<std::string> out;
  for (int f = 0; f < qkv::dates::kNumFormats; ++f) out.push_back(qkv::dates::format_date(d, f));
  return out;
}

TEST(Dates, PlainFormatsExactly) {
  const std::vector<std::string> nov21 = {
      "21 November 2026", "November 21, 2026", "Nov 21, 2026", "21 Nov 2026",
      "November 21st 2026", "the 21st of November, 2026", "Saturday, November 21, 2026",
      "Sat 21 Nov 2026", "21.11.2026", "2026/11/21", "2026-11-21", "2026年11月21日",
      "2026年11月21日星期六", "二〇二六年十一月二十一日"};
  EXPECT_EQ(plain_formats({2026, 11, 21}), nov21);
  const std::vector<std::string> jan1 = {
      "1 January 1900", "January 1, 1900", "Jan 1, 1900", "1 Jan 1900", "January 1st 1900",
      "the 1st of January, 1900", "Monday, January 1, 1900", "Mon 1 Jan 1900", "01.01.1900",
      "1900/01/01", "1900-01-01", "1900年1月1日", "1900年1月1日星期一", "一九〇〇年一月一日"};
  EXPECT_EQ(plain_formats({1900, 1, 1}), jan1);
  const std::vector<std::string> feb29 = {
      "29 February 2000", "February 29, 2000", "Feb 29, 2000", "29 Feb 2000",
      "February 29th 2000", "the 29th of February, 2000", "Tuesday, February 29, 2000",
      "Tue 29 Feb 2000", "29.02.2000", "2000/02/29", "2000-02-29", "2000年2月29日",
      "2000年2月29日星期二", "二〇〇〇年二月二十九日"};
  EXPECT_EQ(plain_formats({2000, 2, 29}), feb29);
  const std::vector<std::string> dec31 = {
      "31 December 2099", "December 31, 2099", "Dec 31, 2099", "31 Dec 2099",
      "December 31st 2099", "the 31st of December, 2099", "Thursday, December 31, 2099",
      "Thu 31 Dec 2099", "31.12.2099", "2099/12/31", "2099-12-31", "2099年12月31日",
      "2099年12月31日星期四", "二〇九九年十二月三十一日"};
  EXPECT_EQ(plain_formats({2099, 12, 31}), dec31);
  // Sunday is 星期日, not 星期七.
  EXPECT_EQ(qkv::dates::format_date({2026, 11, 22}, 12), "2026年11月22日星期日");
  EXPECT_EQ(qkv::dates::format_date({2026, 11, 22}, 7), "Sun 22 Nov 2026");
}

TEST(Dates, OrdinalSuffixes) {
  const std::vector<std::pair<int, std::string>> cases = {
      {1, "1st"},   {2, "2nd"},   {3, "3rd"},   {4, "4th"},   {10, "10th"}, {11, "11th"},
      {12, "12th"}, {13, "13th"}, {14, "14th"}, {20, "20th"}, {21, "21st"}, {22, "22nd"},
      {23, "23rd"}, {24, "24th"}, {30, "30th"}, {31, "31st"}};
  for (const auto& [day, ordinal] : cases) {
    EXPECT_EQ(qkv::dates::format_date({2026, 1, day}, 4), "January " + ordinal + " 2026");
    EXPECT_EQ(qkv::dates::format_date({2026, 1, day}, 5), "the " + ordinal + " of January, 2026");
  }
}

TEST(Dates, ChineseNumerals) {
  const std::vector<std::pair<int, std::string>> days = {
      {1, "一"}, {9, "九"}, {10, "十"}, {11, "十一"}, {19, "十九"}, {20, "二十"},
      {21, "二十一"}, {30, "三十"}, {31, "三十一"}};
  for (const auto& [day, han] : days) {
    EXPECT_EQ(qkv::dates::format_date({2026, 1, day}, 13), "二〇二六年一月" + han + "日");
  }
  EXPECT_EQ(qkv::dates::format_date({2026, 10, 5}, 13), "二〇二六年十月五日");
  EXPECT_EQ(qkv::dates::format_date({2026, 11, 5}, 13), "二〇二六年十一月五日");
  EXPECT_EQ(qkv::dates::format_date({2026, 12, 5}, 13), "二〇二六年十二月五日");
  EXPECT_EQ(qkv::dates::format_date({1900, 3, 1}, 13), "一九〇〇年三月一日");
  EXPECT_EQ(qkv::dates::format_date({2006, 3, 1}, 13), "二〇〇六年三月一日");
  EXPECT_EQ(qkv::dates::format_date({2099, 3, 1}, 13), "二〇九九年三月一日");
}

// Every format of every day, plain, parses back to that day.
TEST(Dates, PlainFormatsParseBackOverEveryDay) {
  for (std::int64_t i = 0; i < qkv::dates::num_days(); ++i) {
    const Date d = qkv::dates::date_at(i);
    for (int f = 0; f < qkv::dates::kNumFormats; ++f) {
      expect_consistent(qkv::dates::format_date(d, f), d);
      if (testing::Test::HasFailure()) FAIL() << "format " << f;
    }
  }
}

// Random casing never changes which weekday formats 6, 7 and 12 name: every day, parsed.
TEST(Dates, WeekdayAgreesAfterVariation) {
  qkv::Rng rng(7);
  int named = 0;
  for (std::int64_t i = 0; i < qkv::dates::num_days(); ++i) {
    const Date d = qkv::dates::date_at(i);
    for (int f : {6, 7, 12}) {
      const std::string s = qkv::dates::format_date(d, f, rng);
      const auto parsed = parse_input(s);
      ASSERT_TRUE(parsed.has_value()) << s;
      ASSERT_EQ(parsed->weekday, zeller_weekday(d)) << "'" << s << "' for " << qkv::dates::to_iso(d);
      named += parsed->weekday >= 0;
    }
  }
  EXPECT_EQ(named, 3 * qkv::dates::num_days());
}

// Variation is present but moderate: per format, the share of draws equal to the plain
// form over 20000 draws (binomial σ ≤ 0.0036, so the bounds are ≥ 10σ from the design).
TEST(Dates, VariationIsModerate) {
  qkv::Rng rng(11);
  constexpr int kDraws = 20000;
  for (int f = 0; f < qkv::dates::kNumFormats; ++f) {
    int plain = 0;
    for (int k = 0; k < kDraws; ++k) {
      const Date d = qkv::dates::date_at(static_cast<std::int64_t>(rng.next_u64() % 73049));
      const std::string s = qkv::dates::format_date(d, f, rng);
      plain += s == qkv::dates::format_date(d, f);
    }
    const double share = static_cast<double>(plain) / kDraws;
    if (f < 8) {
      // By design 0.41 (format 5: four spaces, "the"/"of" not Title) to 0.65 (format 3).
      EXPECT_GT(share, 0.35) << "format " << f;
      EXPECT_LT(share, 0.75) << "format " << f;
    } else if (f < 10) {
      EXPECT_NEAR(share, 0.8, 0.04) << "format " << f;
    } else {
      EXPECT_EQ(plain, kDraws) << "format " << f;
    }
  }
  // The upper-case and unpadded forms occur (fixed seeds, so this is deterministic).
  bool upper = false, unpadded = false, no_comma_space = false, doubled = false, edge = false;
  for (int k = 0; k < 2000; ++k) {
    const std::string s = qkv::dates::format_date({2026, 1, 5}, k % 10, rng);
    upper |= s.find("JANUARY") != s.npos;
    unpadded |= s == "2026/1/5" || s == "5.1.2026";
    no_comma_space |= s.find(",2026") != s.npos;
    doubled |= s.find("  ") != s.npos;
    edge |= s.front() == ' ' || s.back() == ' ';
  }
  EXPECT_TRUE(upper && unpadded && no_comma_space && doubled && edge)
      << upper << unpadded << no_comma_space << doubled << edge;
}

// ---------------------------------------------------------------------------------------
// Splits.

TEST(Dates, HeldOutSplitIsAboutAFifthAndStable) {
  std::int64_t held = 0;
  for (std::int64_t i = 0; i < qkv::dates::num_days(); ++i) {
    const Date d = qkv::dates::date_at(i);
    const bool h = qkv::dates::is_held_out(d);
    ASSERT_EQ(h, qkv::dates::is_held_out(Date{d.year, d.month, d.day}));
    held += h;
  }
  EXPECT_EQ(held, qkv::dates::num_held_out());
  // The split is part of the task: a changed hash would move dates between the splits and
  // void the held-out scores of saved models. 14556 is this hash's count.
  EXPECT_EQ(held, 14556);
  // Binomial: σ = sqrt(0.2·0.8/73049) = 0.0015; 5σ.
  EXPECT_NEAR(static_cast<double>(held) / static_cast<double>(qkv::dates::num_days()), 0.2, 0.0075);
}

// 200k sampled pairs, half per split: each in its split, each input consistent with its
// output, every character in the vocabulary; every format (by its marks) occurs.
TEST(Dates, SampledPairsAreConsistentAndInVocabulary) {
  const Vocabulary& vocab = Vocabulary::dates();
  qkv::Rng rng(2026);
  std::set<std::string> held_dates, train_dates;
  for (int k = 0; k < 200000; ++k) {
    const bool held_out = k % 2 == 1;
    const qkv::dates::Pair pair = qkv::dates::sample_pair(rng, held_out);
    const Date d = from_iso(pair.output);
    ASSERT_EQ(qkv::dates::to_iso(d), pair.output);
    ASSERT_EQ(qkv::dates::is_held_out(d), held_out) << pair.output;
    (held_out ? held_dates : train_dates).insert(pair.output);
    expect_consistent(pair.input, d);
    for (const std::string* s : {&pair.input, &pair.output}) {
      for (std::int64_t id : vocab.encode(*s)) {
        ASSERT_NE(id, Vocabulary::unk) << "'" << *s << "' has a character outside the vocabulary";
      }
    }
    if (testing::Test::HasFailure()) FAIL() << "pair " << k << ": '" << pair.input << "'";
  }
  for (const std::string& s : held_dates) ASSERT_EQ(train_dates.count(s), 0u) << s;
  // 100k draws over ~14.6k held-out dates leave almost none unseen (e^-6.8 ≈ 0.1%).
  EXPECT_GT(static_cast<double>(held_dates.size()), 0.99 * static_cast<double>(qkv::dates::num_held_out()));
}

TEST(Dates, HeldOutSetDistinctDeterministicHeldOut) {
  const auto a = qkv::dates::held_out_set(2000, 5);
  const auto b = qkv::dates::held_out_set(2000, 5);
  const auto c = qkv::dates::held_out_set(2000, 6);
  ASSERT_EQ(a.size(), 2000u);
  std::set<std::string> outputs;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].input, b[i].input);
    EXPECT_EQ(a[i].output, b[i].output);
    const Date d = from_iso(a[i].output);
    EXPECT_TRUE(qkv::dates::is_held_out(d)) << a[i].output;
    expect_consistent(a[i].input, d);
    outputs.insert(a[i].output);
  }
  EXPECT_EQ(outputs.size(), a.size());
  int same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i].output == c[i].output;
  EXPECT_LT(same, 10);
  // All of them: every held-out date once.
  const auto all = qkv::dates::held_out_set(qkv::dates::num_held_out(), 1);
  std::set<std::string> every;
  for (const auto& p : all) every.insert(p.output);
  EXPECT_EQ(static_cast<std::int64_t>(every.size()), qkv::dates::num_held_out());
  EXPECT_TRUE(qkv::dates::held_out_set(0, 1).empty());
  EXPECT_THROW(qkv::dates::held_out_set(qkv::dates::num_held_out() + 1, 1), qkv::Error);
  EXPECT_THROW(qkv::dates::held_out_set(-1, 1), qkv::Error);
}

// ---------------------------------------------------------------------------------------
// Vocabulary.

TEST(Dates, VocabularySpecialsAndOrder) {
  const Vocabulary& v = Vocabulary::dates();
  EXPECT_EQ(v.token(Vocabulary::pad), "<pad>");
  EXPECT_EQ(v.token(Vocabulary::bos), "<s>");
  EXPECT_EQ(v.token(Vocabulary::eos), "</s>");
  EXPECT_EQ(v.token(Vocabulary::unk), "<unk>");
  EXPECT_EQ(v.token(4), " ");  // the lowest code point, kept as a plain space
  // One id per character, ascending by code point after the specials.
  for (std::int64_t id = 4; id < v.size(); ++id) {
    // UTF-8 byte order is code point order; char_traits<char> compares as unsigned char.
    if (id > 4) EXPECT_LT(v.token(id - 1), v.token(id));
    const std::vector<std::int64_t> ids = v.encode(v.token(id));
    ASSERT_EQ(ids, std::vector<std::int64_t>{id}) << "token " << id << " '" << v.token(id) << "'";
  }
  // Both cases of every English letter used; nothing else ASCII-alphabetic beyond them.
  for (const char* s : {"abcdefghijlmnoprstuvwy", "ABCDEFGHIJLMNOPRSTUVWY", "0123456789 ,-./",
                        "〇一二三四五六七八九十年月日星期"}) {
    for (std::int64_t id : v.encode(s)) EXPECT_NE(id, Vocabulary::unk) << s;
  }
  for (const char* s : {"k", "q", "x", "z", "K", "@", "é", "\t", "零"}) {
    EXPECT_EQ(v.encode(s), std::vector<std::int64_t>{Vocabulary::unk}) << s;
  }
  EXPECT_EQ(v.size(), 4 + 44 + 15 + 16);
  EXPECT_THROW(v.token(v.size()), qkv::Error);
  EXPECT_THROW(v.token(-1), qkv::Error);
}

TEST(Dates, VocabularyRoundTrip) {
  const Vocabulary& v = Vocabulary::dates();
  for (const std::string s : {"saturday, NOVEMBER 21, 2026", " the 1st of March,1999 ",
                              "二〇二六年十一月二十一日", "2026年11月21日星期六", "21.11.2026", ""}) {
    const auto ids = v.encode(s);
    EXPECT_EQ(ids.size(), code_points(s)) << s;
    EXPECT_EQ(v.decode(ids), s);
  }
  std::vector<std::int64_t> ids = {Vocabulary::bos};
  for (std::int64_t id : v.encode("Nov 5")) ids.push_back(id);
  ids.insert(ids.end(), {Vocabulary::unk, Vocabulary::eos, Vocabulary::pad, Vocabulary::pad});
  EXPECT_EQ(v.decode(ids), "Nov 5?");
  EXPECT_EQ(v.decode(v.encode("Nov@5")), "Nov?5");
  const std::vector<std::int64_t> bad = {5, v.size()};
  EXPECT_THROW(v.decode(bad), qkv::Error);
}

TEST(Dates, InvalidUtf8Throws) {
  const Vocabulary& v = Vocabulary::dates();
  for (const std::string s : {std::string("\xff"), std::string("Nov \xc3"), std::string("\xc0\xaf"),
                              std::string("\xed\xa0\x80"), std::string("\xe5\xb9"),
                              std::string("2026\x80")}) {
    EXPECT_THROW(v.encode(s), qkv::Error) << "bytes of length " << s.size();
  }
}


// ---------------------------------------------------------------------------------------
// Checking answers: parse_iso and disagreement.

TEST(Dates, ParseIso) {
  using qkv::dates::parse_iso;
  EXPECT_EQ(parse_iso("2026-11-21"), (Date{2026, 11, 21}));
  EXPECT_EQ(parse_iso("1900-01-01"), (Date{1900, 1, 1}));
  EXPECT_EQ(parse_iso("2000-02-29"), (Date{2000, 2, 29}));
  // Row 5 of the hostile-input issue: answers the model gave that are not dates.
  for (const char* bad : {"0000-07-00", "131-03-231", "2023-02-31", "2023-13-4", "2023-13-45",
                          "1899-12-31", "2100-01-01", "1900-02-29", "2026-11-21 ", " 2026-11-21",
                          "2026/11/21", "2026-1-21", "20261121", "", "2026-11-2x", "2026-00-10"})
    EXPECT_FALSE(parse_iso(bad).has_value()) << bad;
}

// Every format of every day, plain and with its variations, names that day; the same text
// does not name the next day, nor the same day a month or a year on.
TEST(Dates, DisagreementAcceptsEveryFormatOfEveryDayAndOnlyThatDay) {
  using qkv::dates::disagreement;
  qkv::Rng rng(3);
  for (std::int64_t i = 0; i < qkv::dates::num_days(); ++i) {
    const Date d = qkv::dates::date_at(i);
    for (int f = 0; f < qkv::dates::kNumFormats; ++f) {
      const std::string plain = qkv::dates::format_date(d, f);
      const std::string varied = qkv::dates::format_date(d, f, rng);
      ASSERT_EQ(disagreement(plain, d), "") << plain;
      ASSERT_EQ(disagreement(varied, d), "") << "'" << varied << "'";
      if (i % 11 != 0) continue;  // the refusals on a sample of days: 1/11 of the calendar
      std::vector<Date> others;
      if (i + 1 < qkv::dates::num_days()) others.push_back(qkv::dates::date_at(i + 1));
      if (d.month < 12 && d.day <= 28) others.push_back(Date{d.year, d.month + 1, d.day});
      if (d.year < 2099 && !(d.month == 2 && d.day == 29))
        others.push_back(Date{d.year + 1, d.month, d.day});
      for (const Date& other : others)
        ASSERT_NE(disagreement(varied, other), "")
            << "'" << varied << "' accepted for " << qkv::dates::to_iso(other);
    }
  }
}

TEST(Dates, DisagreementRefusesWhatItCannotRead) {
  using qkv::dates::disagreement;
  const Date nov21{2026, 11, 21};  // a Saturday
  struct Case {
    const char* input;
    Date date;
    const char* because;  // a part of the reason
  };
  const Case cases[] = {
      {"hello", nov21, "'hello' is not a word of a date"},
      {"", nov21, "empty"},
      {"   ", nov21, "empty"},
      {"13/13/2013", Date{2013, 3, 13}, "not a numeric date in a form"},
      {"21/11/2026", nov21, "not a numeric date in a form"},  // DD/MM or MM/DD: ambiguous
      {"11.21.2026", nov21, "month 21"},
      {"2023-13-45", Date{2023, 12, 4}, "month 13, day 45"},
      {"31 February 2023", Date{2023, 2, 28}, "input's day 31"},
      {"31 February 2023", Date{2023, 3, 3}, "input's day 31"},
      {"Monday, 21 November 2026", nov21, "the input says Monday, but 2026-11-21 is a Saturday"},
      {"21 March 2026", nov21, "the month March"},
      {"21 November 2025", nov21, "input's year 2025"},
      {"21 November 26", nov21, "input's day 26"},
      {"21 November", nov21, "no year"},
      {"November 2026", nov21, "no day"},
      {"21 2026", nov21, "no month"},
      {"21 21 November 2026", nov21, "more than one day"},
      {"21th November 2026", nov21, "'21th' is not an ordinal"},
      {"21 Nov. 2026", nov21, "'Nov.' is not a word"},
      {"21 November 2026 at noon", nov21, "'at' is not a word"},
      {"21 November 02026", nov21, "'02026' is neither"},
      {"2026年11月22日", nov21, "does not name 2026-11-21"},
      {"2026年11月21日星期一", nov21, "does not name"},
      {"二〇二六年十一月二十日", nov21, "does not name"},
  };
  for (const Case& c : cases) {
    const std::string why = disagreement(c.input, c.date);
    EXPECT_NE(why.find(c.because), std::string::npos)
        << "'" << c.input << "' for " << qkv::dates::to_iso(c.date) << ": got '" << why << "'";
  }
  // Forms beyond the plain formats that still name one date, read in their family.
  for (const char* input :
       {"Saturday, 21 November 2026", " saturday,21 NOV 2026 ", "21st November 2026",
        "2026 November 21", "2026年11月21日", "2026年11月21日星期六", "2026年11月21日 ",
        "二〇二六年十一月二十一日星期六", "21.11.2026", "2026/11/21", "2026-11-21",
        "the 21st of november, 2026"})
    EXPECT_EQ(disagreement(input, nov21), "") << input;
  EXPECT_EQ(disagreement("2026年1月5日", Date{2026, 1, 5}), "");
  EXPECT_EQ(disagreement("2026年01月05日", Date{2026, 1, 5}), "");
  EXPECT_EQ(disagreement("5.1.2026", Date{2026, 1, 5}), "");
  EXPECT_EQ(disagreement("2026年11月22日星期天", Date{2026, 11, 22}), "");  // a Sunday
}

}  // namespace
