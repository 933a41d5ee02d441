// RFC 4180 CSV reading and writing. See csv.h.

#include "recommender/csv.h"

#include <charconv>
#include <cmath>

#include "qkv/error.h"

namespace qkv::io {

std::vector<CsvRecord> parse_csv(std::string_view text, const std::string& label) {
  std::vector<CsvRecord> records;
  std::int64_t line = 1;
  std::size_t i = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;  // a UTF-8 byte order mark
  const std::size_t n = text.size();
  while (i < n) {
    if (text[i] == '\n' || (text[i] == '\r' && i + 1 < n && text[i + 1] == '\n')) {  // empty line
      i += text[i] == '\r' ? 2 : 1;
      ++line;
      continue;
    }
    CsvRecord record;
    record.line = line;
    while (true) {  // one field per pass
      std::string field;
      if (i < n && text[i] == '"') {
        const std::int64_t opened = line;
        ++i;
        while (true) {
          QKV_CHECK(i < n, label << " line " << opened << ": a quoted field is never closed");
          if (text[i] == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (text[i] == '\n') ++line;
          field += text[i++];
        }
        // A quote left open swallows the following lines until the next quote, which then
        // seems to close it: name the line where the field opened.
        QKV_CHECK(i >= n || text[i] == ',' || text[i] == '\n' || text[i] == '\r',
                  label << " line " << opened << ": text after the closing quote of field "
                        << record.fields.size() + 1
                        << (opened == line ? std::string()
                                           : " (the quoted field runs to line " + std::to_string(line) +
                                                 ": is its quote unclosed?)"));
      } else {
        while (i < n && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
          QKV_CHECK(text[i] != '"', label << " line " << line << ": a quote inside unquoted field "
                                          << record.fields.size() + 1);
          field += text[i++];
        }
      }
      record.fields.push_back(std::move(field));
      if (i < n && text[i] == ',') {
        ++i;
        continue;
      }
      if (i < n && text[i] == '\r') {
        QKV_CHECK(i + 1 >= n || text[i + 1] == '\n', label << " line " << line << ": a lone carriage return");
        ++i;
      }
      if (i < n && text[i] == '\n') ++i;
      ++line;
      break;
    }
    records.push_back(std::move(record));
  }
  return records;
}

std::int64_t csv_integer(const std::string& field, const std::string& where, const char* column) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  QKV_CHECK(ec == std::errc() && end == field.data() + field.size() && !field.empty(),
            where << ": " << column << " '" << field << "' is not an integer");
  return v;
}

double csv_number(const std::string& field, const std::string& where, const char* column) {
  double v = 0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  QKV_CHECK(ec == std::errc() && end == field.data() + field.size() && !field.empty() && std::isfinite(v),
            where << ": " << column << " '" << field << "' is not a number");
  return v;
}

std::string csv_field(std::string_view field) {
  // A leading byte order mark is quoted too: unquoted at the start of a text it would be
  // skipped as the text's own.
  if (field.find_first_of(",\"\r\n") == std::string_view::npos && !field.starts_with("\xEF\xBB\xBF"))
    return std::string(field);
  std::string out = "\"";
  for (const char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace qkv::io
