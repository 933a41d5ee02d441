// RFC 4180 comma-separated values: records of fields, a field quoted when it holds a comma,
// a quote (doubled inside) or a line break. Internal to the library (the recommender's
// ratings, `qkv recommend --predict`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::io {

struct CsvRecord {
  std::int64_t line = 0;            // where the record starts, from 1
  std::vector<std::string> fields;  // unquoted
};

// Every record of `text` ("\n" or "\r\n" line ends; a final line break is optional; empty
// lines are skipped; a leading UTF-8 byte order mark, as spreadsheets write, is skipped). Throws qkv::Error "<label> line N: <what>" for an unclosed quote, a
// quote inside an unquoted field, or text after a closing quote (named at the line where its
// field opened: usually a quote left open there).
std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& label);

// A field as an integer (std::from_chars: no sign but '-', no spaces) or a finite number;
// else qkv::Error "<where>: <column> '<field>' is not an integer" (or "a number").
std::int64_t csv_integer(const std::string& field, const std::string& where, const char* column);
double csv_number(const std::string& field, const std::string& where, const char* column);

// A field as RFC 4180 writes it: quoted (quotes doubled) when it holds a comma, a quote or
// a line break or starts with a byte order mark, else as is.
std::string csv_field(std::string_view field);

}  // namespace qkv::io
