// libFuzzer harness for the RFC 4180 reader (apps/recommender/csv.h): parse_csv must either accept
// the bytes or throw qkv::Error, and what it accepts must survive a round trip: the records
// written back field by field with csv_field and parsed again are the same records. Any
// other exception, a crash, a sanitizer report or a changed record is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "recommender/csv.h"
#include "qkv/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<qkv::io::CsvRecord> records;
  try {
    records = qkv::io::parse_csv(text, "fuzz");
  } catch (const qkv::Error&) {
    return 0;
  }
  std::string written;
  for (const qkv::io::CsvRecord& r : records) {
    if (r.fields.empty()) __builtin_trap();  // every record has at least one field
    std::string line;
    for (std::size_t i = 0; i < r.fields.size(); ++i) line += (i ? "," : "") + qkv::io::csv_field(r.fields[i]);
    written += (line.empty() ? std::string("\"\"") : line) + "\n";  // an empty line would be skipped
  }
  std::vector<qkv::io::CsvRecord> again;
  try {
    again = qkv::io::parse_csv(written, "round trip");
  } catch (const qkv::Error&) {
    __builtin_trap();  // what csv_field writes must parse
  }
  if (again.size() != records.size()) __builtin_trap();
  for (std::size_t i = 0; i < records.size(); ++i)
    if (again[i].fields != records[i].fields) __builtin_trap();
  return 0;
}
