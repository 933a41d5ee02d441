#include "dates/dates.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <optional>
#include <set>

#include "qkv/error.h"
#include "text/unicode.h"

namespace qkv::dates {
namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant, "chrono-Compatible
// Low-Level Date Algorithms", days_from_civil): eras of 400 years = 146097 days, years
// counted from March so the leap day ends the year.
constexpr std::int64_t days_from_civil(std::int64_t y, int m, int d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const std::int64_t yoe = y - era * 400;                                   // [0, 399]
  const std::int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;  // [0, 365]
  const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;            // [0, 146096]
  return era * 146097 + doe - 719468;
}

// Its inverse (civil_from_days, same source).
Date civil_from_days(std::int64_t z) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const std::int64_t doe = z - era * 146097;
  const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const std::int64_t mp = (5 * doy + 2) / 153;
  const int d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
  const int m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
  return Date{static_cast<int>(yoe + era * 400 + (m <= 2)), m, d};
}

constexpr std::int64_t kEpoch = days_from_civil(kFirstDate.year, kFirstDate.month, kFirstDate.day);

// Salt of the split hash; changing it reshuffles which dates are held out.
constexpr std::uint64_t kSplitSalt = 0x64617465735f7631ull;  // "dates_v1"

const std::array<const char*, 12> kMonths = {"January", "February", "March",     "April",
                                             "May",     "June",     "July",      "August",
                                             "September", "October", "November", "December"};
const std::array<const char*, 12> kMonthAbbr = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
const std::array<const char*, 7> kWeekdays = {"Monday", "Tuesday",  "Wednesday", "Thursday",
                                              "Friday", "Saturday", "Sunday"};
const std::array<const char*, 7> kWeekdayAbbr = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
// 〇一二三四五六七八九: the digits as written in a Chinese year ("二〇二六年").
const std::array<const char*, 10> kChineseDigits = {"〇", "一", "二", "三", "四",
                                                    "五", "六", "七", "八", "九"};
// 星期一 .. 星期六, 星期日 (Monday first, as weekday()).
const std::array<const char*, 7> kChineseWeekdays = {"星期一", "星期二", "星期三", "星期四",
                                                     "星期五", "星期六", "星期日"};

std::string ordinal_suffix(int n) {
  if (n % 100 >= 11 && n % 100 <= 13) return "th";
  switch (n % 10) {
    case 1: return "st";
    case 2: return "nd";
    case 3: return "rd";
    default: return "th";
  }
}

// 1..99 as a Chinese number: 5 五, 10 十, 11 十一, 20 二十, 21 二十一.
std::string chinese_number(int n) {
  const int tens = n / 10, ones = n % 10;
  std::string s;
  if (tens > 1) s += kChineseDigits[static_cast<std::size_t>(tens)];
  if (tens > 0) s += "十";
  if (ones > 0 || tens == 0) s += kChineseDigits[static_cast<std::size_t>(ones)];
  return s;
}

std::string padded(int value, int width, bool pad) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*d", pad ? width : 1, value);
  return buf;
}

// An English date as tokens, each followed by its separator: "" (end), " " or ", ".
struct Token {
  std::string word;
  std::string separator;
};

std::vector<Token> english_tokens(const Date& d, int format) {
  const std::string day = std::to_string(d.day), year = std::to_string(d.year);
  const std::string month = kMonths[static_cast<std::size_t>(d.month - 1)];
  const std::string abbr = kMonthAbbr[static_cast<std::size_t>(d.month - 1)];
  const std::size_t wd = static_cast<std::size_t>(weekday(d));
  switch (format) {
    case 0: return {{day, " "}, {month, " "}, {year, ""}};
    case 1: return {{month, " "}, {day, ", "}, {year, ""}};
    case 2: return {{abbr, " "}, {day, ", "}, {year, ""}};
    case 3: return {{day, " "}, {abbr, " "}, {year, ""}};
    case 4: return {{month, " "}, {day + ordinal_suffix(d.day), " "}, {year, ""}};
    case 5:
      return {{"the", " "}, {day + ordinal_suffix(d.day), " "}, {"of", " "}, {month, ", "},
              {year, ""}};
    case 6: return {{kWeekdays[wd], ", "}, {month, " "}, {day, ", "}, {year, ""}};
    case 7: return {{kWeekdayAbbr[wd], " "}, {day, " "}, {abbr, " "}, {year, ""}};
    default: throw Error("format_date: no English format " + std::to_string(format));
  }
}

enum class Casing { natural, lower, upper, title };

std::string recase(std::string word, Casing casing) {
  bool first = true;
  for (char& c : word) {
    const auto u = static_cast<unsigned char>(c);
    switch (casing) {
      case Casing::natural: break;
      case Casing::lower: c = static_cast<char>(std::tolower(u)); break;
      case Casing::upper: c = static_cast<char>(std::toupper(u)); break;
      // Python's str.title() on one word: the first character upper, the rest lower, so
      // "21st" stays "21st".
      case Casing::title:
        c = static_cast<char>(first ? std::toupper(u) : std::tolower(u));
        break;
    }
    first = false;
  }
  return word;
}

// Probabilities of the English variations; most outputs stay plain.
constexpr double kRecaseAll = 0.3;       // one casing for every word (lower/UPPER/Title)
constexpr double kRecaseEach = 0.1;      // a casing drawn per word
constexpr double kDoubleSpace = 0.04;    // per space
constexpr double kNoSpaceComma = 0.1;    // per output: ", " -> ","
constexpr double kPadSpace = 0.05;       // leading, and independently trailing, space
constexpr double kNumericUnpadded = 0.2; // formats 8 and 9: "2026/1/5"

std::string join_english(const std::vector<Token>& tokens, Rng* rng) {
  std::string out;
  if (rng == nullptr) {
    for (const Token& t : tokens) out += t.word + t.separator;
    return out;
  }
  const double r = rng->uniform();
  const bool each = r >= kRecaseAll && r < kRecaseAll + kRecaseEach;
  const Casing all = r < kRecaseAll ? static_cast<Casing>(1 + rng->uniform_int(3)) : Casing::natural;
  const bool comma_space = rng->uniform() >= kNoSpaceComma;
  if (rng->uniform() < kPadSpace) out += ' ';
  for (const Token& t : tokens) {
    out += recase(t.word, each ? static_cast<Casing>(1 + rng->uniform_int(3)) : all);
    std::string sep = t.separator;
    if (sep == ", " && !comma_space) sep = ",";
    if (!sep.empty() && sep.back() == ' ' && rng->uniform() < kDoubleSpace) sep += ' ';
    out += sep;
  }
  if (rng->uniform() < kPadSpace) out += ' ';
  return out;
}

std::string format_impl(const Date& d, int format, Rng* rng) {
  QKV_CHECK(format >= 0 && format < kNumFormats,
            "format_date: format must be in [0, " << kNumFormats << "), got " << format);
  day_index(d);  // validates d
  if (format < 8) return join_english(english_tokens(d, format), rng);
  const std::string year = std::to_string(d.year);
  switch (format) {
    case 8: case 9: {
      const bool pad = rng == nullptr || rng->uniform() >= kNumericUnpadded;
      const std::string m = padded(d.month, 2, pad), day = padded(d.day, 2, pad);
      return format == 8 ? day + "." + m + "." + year : year + "/" + m + "/" + day;
    }
    case 10: return to_iso(d);
    case 11: case 12: {
      std::string s = year + "年" + std::to_string(d.month) + "月" + std::to_string(d.day) + "日";
      if (format == 12) s += kChineseWeekdays[static_cast<std::size_t>(weekday(d))];
      return s;
    }
    default: {  // 13
      std::string s;
      for (char c : year) s += kChineseDigits[static_cast<std::size_t>(c - '0')];
      return s + "年" + chinese_number(d.month) + "月" + chinese_number(d.day) + "日";
    }
  }
}

// Day indices of each split, ascending; built once.
const std::vector<std::int64_t>& split_indices(bool held_out) {
  static const std::array<std::vector<std::int64_t>, 2> splits = [] {
    std::array<std::vector<std::int64_t>, 2> s;
    for (std::int64_t i = 0; i < num_days(); ++i) s[is_held_out(date_at(i)) ? 1 : 0].push_back(i);
    return s;
  }();
  return splits[held_out ? 1 : 0];
}

Pair pair_of(const Date& d, Rng& rng) {
  const int format = static_cast<int>(rng.uniform_int(kNumFormats));
  return Pair{format_date(d, format, rng), to_iso(d)};
}

}  // namespace

bool is_leap_year(int year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

int days_in_month(int year, int month) {
  QKV_CHECK(month >= 1 && month <= 12, "days_in_month: month must be in [1, 12], got " << month);
  static constexpr std::array<int, 12> kDays = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return kDays[static_cast<std::size_t>(month - 1)] + (month == 2 && is_leap_year(year) ? 1 : 0);
}

std::int64_t num_days() { return day_index(kLastDate) + 1; }

std::int64_t day_index(const Date& d) {
  QKV_CHECK(d.year >= kFirstDate.year && d.year <= kLastDate.year,
            "day_index: year must be in [" << kFirstDate.year << ", " << kLastDate.year
                                           << "], got " << d.year);
  QKV_CHECK(d.month >= 1 && d.month <= 12, "day_index: month must be in [1, 12], got " << d.month);
  QKV_CHECK(d.day >= 1 && d.day <= days_in_month(d.year, d.month),
            "day_index: day must be in [1, " << days_in_month(d.year, d.month) << "] for "
                                             << d.year << "-" << d.month << ", got " << d.day);
  return days_from_civil(d.year, d.month, d.day) - kEpoch;
}

Date date_at(std::int64_t index) {
  QKV_CHECK(index >= 0 && index < num_days(),
            "date_at: index must be in [0, " << num_days() << "), got " << index);
  return civil_from_days(index + kEpoch);
}

int weekday(const Date& d) { return static_cast<int>(day_index(d) % 7); }

std::string to_iso(const Date& d) {
  day_index(d);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", d.year, d.month, d.day);
  return buf;
}

bool is_held_out(const Date& d) {
  return mix64(static_cast<std::uint64_t>(day_index(d)) ^ kSplitSalt) % 5 == 0;
}

std::int64_t num_held_out() { return static_cast<std::int64_t>(split_indices(true).size()); }

std::string format_date(const Date& d, int format) { return format_impl(d, format, nullptr); }

std::string format_date(const Date& d, int format, Rng& rng) {
  return format_impl(d, format, &rng);
}

Pair sample_pair(Rng& rng, bool held_out) {
  const auto& indices = split_indices(held_out);
  const std::int64_t i = rng.uniform_int(static_cast<std::int64_t>(indices.size()));
  return pair_of(date_at(indices[static_cast<std::size_t>(i)]), rng);
}

std::vector<Pair> held_out_set(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> indices = split_indices(true);
  const auto count = static_cast<std::int64_t>(indices.size());
  QKV_CHECK(n >= 0 && n <= count,
            "held_out_set: n must be in [0, " << count << "] (the held-out dates), got " << n);
  Rng rng(seed);
  std::vector<Pair> pairs;
  pairs.reserve(static_cast<std::size_t>(n));
  // The first n steps of a Fisher–Yates shuffle: n distinct dates, uniformly drawn.
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t j = i + rng.uniform_int(count - i);
    std::swap(indices[static_cast<std::size_t>(i)], indices[static_cast<std::size_t>(j)]);
    pairs.push_back(pair_of(date_at(indices[static_cast<std::size_t>(i)]), rng));
  }
  return pairs;
}

// ---------------------------------------------------------------------------------------
// Checking an answer against its input

std::optional<Date> parse_iso(std::string_view text) {
  if (text.size() != 10 || text[4] != '-' || text[7] != '-') return std::nullopt;
  int fields[3] = {0, 0, 0};
  const std::size_t starts[3] = {0, 5, 8}, lengths[3] = {4, 2, 2};
  for (int f = 0; f < 3; ++f)
    for (std::size_t i = starts[f]; i < starts[f] + lengths[f]; ++i) {
      if (text[i] < '0' || text[i] > '9') return std::nullopt;
      fields[f] = fields[f] * 10 + (text[i] - '0');
    }
  const Date d{fields[0], fields[1], fields[2]};
  if (d.year < kFirstDate.year || d.year > kLastDate.year || d.month < 1 || d.month > 12 ||
      d.day < 1 || d.day > days_in_month(d.year, d.month))
    return std::nullopt;
  return d;
}

namespace {

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A number of 1 to 4 ASCII digits (leading zeros allowed), else -1.
int small_number(std::string_view s) {
  if (!all_digits(s) || s.size() > 4) return -1;
  int v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return v;
}

std::string trim_spaces(std::string_view s) {
  const std::size_t first = s.find_first_not_of(' ');
  if (first == std::string_view::npos) return {};
  return std::string(s.substr(first, s.find_last_not_of(' ') - first + 1));
}

// Formats 11-13: the date written the Chinese ways, month and day with or without a
// leading zero in 11 and 12, each optionally followed by its weekday (星期日 or 星期天
// for Sunday).
std::string chinese_disagreement(const std::string& input, const Date& d) {
  const std::size_t wd = static_cast<std::size_t>(weekday(d));
  std::vector<std::string> weekdays = {"", kChineseWeekdays[wd]};
  if (wd == 6) weekdays.emplace_back("星期天");
  std::vector<std::string> dates;
  for (bool pad_month : {false, true})
    for (bool pad_day : {false, true})
      dates.push_back(std::to_string(d.year) + "年" + padded(d.month, 2, pad_month) + "月" +
                      padded(d.day, 2, pad_day) + "日");
  dates.push_back(format_date(d, 13));
  for (const std::string& date : dates)
    for (const std::string& w : weekdays)
      if (input == date + w) return {};
  return "the input does not name " + to_iso(d) + " (written " + format_date(d, 11) + " or " +
         format_date(d, 13) + ")";
}

// Formats 8-10: DD.MM.YYYY, YYYY/MM/DD, YYYY-MM-DD, month and day with or without a
// leading zero. The separator says which order the numbers are in; other orders
// (MM/DD/YYYY, DD/MM/YYYY) are ambiguous and not read.
std::string numeric_disagreement(const std::string& input, const Date& d) {
  const std::string kForms = "numeric dates are read as DD.MM.YYYY, YYYY/MM/DD or YYYY-MM-DD";
  const char separator = input[input.find_first_of("./-")];
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = input.find(separator, start);
    parts.push_back(input.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (parts.size() != 3 || !std::all_of(parts.begin(), parts.end(), all_digits))
    return "the input is not a numeric date in a form the translator reads (" + kForms + ")";
  const bool day_first = separator == '.';
  const std::string& y = day_first ? parts[2] : parts[0];
  const std::string& m = parts[1];
  const std::string& dd = day_first ? parts[0] : parts[2];
  if (y.size() != 4 || m.size() > 2 || dd.size() > 2)
    return "the input is not a numeric date in a form the translator reads (" + kForms + ")";
  if (small_number(y) != d.year || small_number(m) != d.month || small_number(dd) != d.day)
    return "the input names year " + y + ", month " + m + ", day " + dd + ", not " + to_iso(d);
  return {};
}

// Formats 0-7 and the like: words and numbers in any order, separated by spaces and
// commas, any letter case. Each must agree with the date: one year (4 digits), one day
// (1 or 2 digits, optionally with its own ordinal suffix), one month name or
// abbreviation, at most one weekday name or abbreviation, at most one "the" and one "of".
std::string english_disagreement(const std::string& input, const Date& d) {
  const std::size_t month = static_cast<std::size_t>(d.month - 1);
  const std::size_t wd = static_cast<std::size_t>(weekday(d));
  int years = 0, days = 0, months = 0, weekdays = 0, thes = 0, ofs = 0;
  std::size_t start = 0;
  while (start < input.size()) {
    const std::size_t end = std::min(input.find_first_of(" ,", start), input.size());
    const std::string token = input.substr(start, end - start);
    start = end + 1;
    if (token.empty()) continue;
    const std::string word = lower_ascii(token);
    std::size_t digits = 0;
    while (digits < word.size() && word[digits] >= '0' && word[digits] <= '9') ++digits;
    if (digits == 4 && word.size() == 4) {
      if (small_number(word) != d.year)
        return "the input's year " + token + " is not " + to_iso(d) + "'s";
      ++years;
    } else if (digits >= 1 && digits <= 2) {
      const std::string suffix = word.substr(digits);
      if (small_number(word.substr(0, digits)) != d.day)
        return "the input's day " + token + " is not " + to_iso(d) + "'s";
      if (!suffix.empty() && suffix != ordinal_suffix(d.day))
        return "'" + token + "' is not an ordinal number";
      ++days;
    } else if (digits > 0) {
      return "'" + token + "' is neither a day nor a year";
    } else if (word == lower_ascii(kMonths[month]) || word == lower_ascii(kMonthAbbr[month])) {
      ++months;
    } else if (word == lower_ascii(kWeekdays[wd]) || word == lower_ascii(kWeekdayAbbr[wd])) {
      ++weekdays;
    } else if (word == "the") {
      ++thes;
    } else if (word == "of") {
      ++ofs;
    } else {
      for (std::size_t i = 0; i < 12; ++i)
        if (word == lower_ascii(kMonths[i]) || word == lower_ascii(kMonthAbbr[i]))
          return "the input names the month " + std::string(kMonths[i]) + ", not " + to_iso(d) +
                 "'s";
      for (std::size_t i = 0; i < 7; ++i)
        if (word == lower_ascii(kWeekdays[i]) || word == lower_ascii(kWeekdayAbbr[i]))
          return "the input says " + std::string(kWeekdays[i]) + ", but " + to_iso(d) + " is a " +
                 kWeekdays[wd];
      return "'" + token + "' is not a word of a date the translator reads";
    }
  }
  if (years != 1)
    return years == 0 ? "the input has no year (4 digits)" : "the input has more than one year";
  if (days != 1) return days == 0 ? "the input has no day" : "the input has more than one day";
  if (months != 1)
    return months == 0 ? "the input has no month name" : "the input names the month twice";
  if (weekdays > 1 || thes > 1 || ofs > 1) return "the input repeats a word";
  return {};
}

}  // namespace

std::string disagreement(std::string_view input, const Date& d) {
  day_index(d);  // validates d
  const std::string text = trim_spaces(input);
  if (text.empty()) return "the input is empty";
  if (text.find("年") != std::string::npos) return chinese_disagreement(text, d);
  if (text.find_first_not_of("0123456789./-") == std::string::npos &&
      text.find_first_of("./-") != std::string::npos)
    return numeric_disagreement(text, d);
  return english_disagreement(text, d);
}

// ---------------------------------------------------------------------------------------
// Vocabulary

Vocabulary::Vocabulary(const std::vector<char32_t>& chars) {
  tokens_ = {"<pad>", "<s>", "</s>", "<unk>"};
  for (char32_t cp : chars) {
    ids_.emplace(cp, static_cast<std::int64_t>(tokens_.size()));
    std::string s;
    text::append_utf8(s, cp);
    tokens_.push_back(s);
  }
}

const Vocabulary& Vocabulary::dates() {
  static const Vocabulary vocabulary = [] {
    // Everything the formatter writes: the English words in both cases, digits and
    // separators (ISO targets included), the Chinese characters.
    std::string all = " ,-./0123456789thestndrdof";
    for (const char* w : kMonths) all += w;
    for (const char* w : kMonthAbbr) all += w;
    for (const char* w : kWeekdays) all += w;
    for (const char* w : kWeekdayAbbr) all += w;
    all += recase(all, Casing::lower) + recase(all, Casing::upper);
    for (const char* w : kChineseDigits) all += w;
    for (const char* w : kChineseWeekdays) all += w;
    all += "十年月日";
    const std::vector<char32_t> cps = text::decode_utf8(all, "Vocabulary::dates");
    const std::set<char32_t> unique(cps.begin(), cps.end());
    return Vocabulary(std::vector<char32_t>(unique.begin(), unique.end()));
  }();
  return vocabulary;
}

std::vector<std::int64_t> Vocabulary::encode(std::string_view utf8) const {
  const std::vector<char32_t> cps = text::decode_utf8(utf8, "Vocabulary::encode");
  std::vector<std::int64_t> ids;
  ids.reserve(cps.size());
  for (char32_t cp : cps) {
    const auto it = ids_.find(cp);
    ids.push_back(it == ids_.end() ? unk : it->second);
  }
  return ids;
}

std::string Vocabulary::decode(std::span<const std::int64_t> ids) const {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t id = ids[i];
    QKV_CHECK(id >= 0 && id < size(), "Vocabulary::decode: ids[" << i << "] must be in [0, "
                                                                 << size() << "), got " << id);
    if (id == pad || id == bos || id == eos) continue;
    out += id == unk ? "?" : tokens_[static_cast<std::size_t>(id)];
  }
  return out;
}

std::string Vocabulary::token(std::int64_t id) const {
  QKV_CHECK(id >= 0 && id < size(),
            "Vocabulary::token: id must be in [0, " << size() << "), got " << id);
  return tokens_[static_cast<std::size_t>(id)];
}

}  // namespace qkv::dates
