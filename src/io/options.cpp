// Checking and parsing the options of one declaration (qkv/options.h). The messages state
// the allowed range the way --help does, and quote what was given.
#include "qkv/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace qkv::options {
namespace {

std::string shown(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", x);
  return buffer;
}

// What was given, quoted and clipped, as the CLI quotes values ('abc').
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 60)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return out + (text.size() > 60 ? "...'" : "'");
}

std::string number_range(const Spec& s) {
  if (std::isinf(s.high)) return (s.low_open ? "> " : ">= ") + shown(s.low);
  return (s.low_open ? "in (" : "in [") + shown(s.low) + ", " + shown(s.high) + (s.high_open ? ")" : "]");
}

std::string choice_list(const Spec& s) {
  std::string list;
  for (const auto& c : s.choices) list += (list.empty() ? "" : ", ") + c;
  return list;
}

// Whether a value is in the declared range: the one test of the CLI's text (parse) and of a
// front end's value (check).
bool in_range(const Spec& s, std::int64_t v) { return v >= s.min && v <= s.max; }
bool in_range(const Spec& s, double v) {
  return std::isfinite(v) && (s.low_open ? v > s.low : v >= s.low) && (s.high_open ? v < s.high : v <= s.high);
}

// Edit distance, for "did you mean": small names, so the plain table is fine.
std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string spelled(const std::string& name, bool cli) {
  if (!cli) return name;
  std::string out = "--" + name;
  for (char& c : out)
    if (c == '_') c = '-';
  return out;
}

}  // namespace

std::string integer_range(std::int64_t min, std::int64_t max) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict, wrongly) on the chain of +.
  std::string range = "[";
  range += std::to_string(min);
  range += ", ";
  if (max == std::numeric_limits<std::int64_t>::max()) range += "2^63)";
  else if (max == std::numeric_limits<int>::max()) range += "2^31)";
  else range += std::to_string(max) + "]";
  return range;
}

std::string Spec::cli_name() const { return spelled(name, true); }

std::string Spec::range_text() const {
  switch (type) {
    case Type::flag: return "a flag";
    case Type::integer: return "an integer in " + integer_range(min, max);
    case Type::seed: return "an integer in [0, 2^64)";
    case Type::number: return "a finite number " + number_range(*this);
    case Type::text: return "a text";
    case Type::path: return "a file or directory";
    case Type::choice: return "one of " + choice_list(*this);
  }
  return {};
}

std::string Spec::default_text() const {
  return std::visit(
      [](const auto& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<V, double>) return shown(v);
        else if constexpr (std::is_same_v<V, std::string>) return v;
        else return std::to_string(v);
      },
      default_value);
}

Value Spec::parse(const std::string& text) const {
  const auto refuse = [&](const std::string& what) -> OptionError {
    return OptionError(name, "must be " + what + ", got " + quoted(text));
  };
  switch (type) {
    case Type::flag:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      throw refuse("true or false");
    case Type::integer: {
      std::int64_t value = 0;
      const char* end = text.data() + text.size();
      const auto [ptr, ec] = std::from_chars(text.data(), end, value);
      if (ec != std::errc() || ptr != end || text.empty() || !in_range(*this, value)) throw refuse(range_text());
      return value;
    }
    case Type::seed: {
      std::uint64_t value = 0;
      const char* end = text.data() + text.size();
      const auto [ptr, ec] = std::from_chars(text.data(), end, value);
      if (ec != std::errc() || ptr != end || text.empty()) throw refuse(range_text());
      return value;
    }
    case Type::number: {
      std::string_view digits = text;
      if (digits.starts_with('+')) digits.remove_prefix(1);
      double value = 0;
      const char* end = digits.data() + digits.size();
      const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
      if (ec != std::errc() || ptr != end || digits.empty() || !in_range(*this, value)) throw refuse(range_text());
      return value;
    }
    case Type::text: return text;
    case Type::path:    // not empty
    case Type::choice:  // one of the choices
      check(Value(text));
      return text;
  }
  return text;
}

void Spec::check(const Value& value) const {
  const auto wrong_kind = [&](const char* expected) {
    return OptionError(name, std::string("must be ") + expected, ErrorKind::type);
  };
  switch (type) {
    case Type::flag:
      if (!std::holds_alternative<bool>(value)) throw wrong_kind("a bool");
      return;
    case Type::integer: {
      if (!std::holds_alternative<std::int64_t>(value)) throw wrong_kind("an int");
      const std::int64_t v = std::get<std::int64_t>(value);
      if (!in_range(*this, v)) throw OptionError(name, "must be " + range_text() + ", got " + std::to_string(v));
      return;
    }
    case Type::seed:
      if (!std::holds_alternative<std::uint64_t>(value)) throw wrong_kind("an int in [0, 2^64)");
      return;
    case Type::number: {
      if (!std::holds_alternative<double>(value)) throw wrong_kind("a number");
      const double v = std::get<double>(value);
      if (!in_range(*this, v)) throw OptionError(name, "must be " + range_text() + ", got " + shown(v));
      return;
    }
    case Type::text:
    case Type::path:
    case Type::choice: {
      if (!std::holds_alternative<std::string>(value)) throw wrong_kind("a str");
      const std::string& v = std::get<std::string>(value);
      if (type == Type::path && v.empty()) throw OptionError(name, "must name a file or directory, got ''");
      if (type == Type::choice && std::find(choices.begin(), choices.end(), v) == choices.end())
        throw OptionError(name, "must be one of " + choice_list(*this) + ", got " + quoted(v));
      return;
    }
  }
}

const Spec* find(const std::vector<Spec>& specs, const std::string& name) {
  for (const Spec& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

std::string unknown_option_message(const std::vector<Spec>& specs, const std::string& name, bool cli) {
  for (const Spec& s : specs)
    for (const std::string& old : s.old_names)
      if (old == name) return spelled(old, cli) + " is now " + spelled(s.name, cli);
  const Spec* nearest = nullptr;
  std::size_t best = 3;  // a typo of one or two letters
  std::string names;
  for (const Spec& s : specs) {
    if (!(s.fronts & (cli ? kCli : kPython))) continue;
    names += (names.empty() ? "" : ", ") + spelled(s.name, cli);
    if (const std::size_t d = distance(name, s.name); d < best) best = d, nearest = &s;
  }
  return "unknown option " + spelled(name, cli) +
         (nearest != nullptr ? " (did you mean " + spelled(nearest->name, cli) + "?)" : std::string()) +
         "; the options are " + names;
}

}  // namespace qkv::options
