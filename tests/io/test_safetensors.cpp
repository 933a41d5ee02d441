// safetensors: round trips, the writer's exact bytes, zero-copy and copy paths, dtype
// rules, every validation error, and sharded model directories.
#include "qkv/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "qkv/error.h"

namespace fs = std::filesystem;

namespace {

using qkv::DType;
using qkv::Error;
using qkv::ErrorKind;
using qkv::SafeTensors;
using qkv::Shape;
using qkv::Tensor;
using Bytes = std::vector<std::byte>;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("qkv_io_" + std::string(test->test_suite_name()) + "_" + test->name() + "_" +
             std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

void append_u64(Bytes* out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

void append(Bytes* out, const std::string& s) {
  for (char c : s) out->push_back(static_cast<std::byte>(c));
}

// A file per the spec: the size field, the header exactly as given, then `data`.
Bytes image(const std::string& header, const Bytes& data = {}) {
  Bytes out;
  append_u64(&out, header.size());
  append(&out, header);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes zeros(std::size_t n) { return Bytes(n, std::byte{0}); }

template <class T>
void append_value(Bytes* out, T v) {
  std::byte b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->insert(out->end(), b, b + sizeof(T));
}

// Runs `f`, which must throw qkv::Error of `kind` whose message contains each of `parts`.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts,
                  ErrorKind kind = ErrorKind::value) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos)
          << "message \"" << message << "\" lacks \"" << part << "\"";
    EXPECT_EQ(e.kind(), kind) << message;
    return;
  }
  ADD_FAILURE() << "no qkv::Error thrown (expected one mentioning \"" << parts.front() << "\")";
}

// parse() of a hand-built image must fail naming the label and every part.
void expect_parse_error(const Bytes& bytes, std::vector<std::string> parts,
                        ErrorKind kind = ErrorKind::value) {
  parts.insert(parts.begin(), "bad.st");
  expect_error([&] { SafeTensors::parse(bytes, "bad.st"); }, parts, kind);
}

std::vector<float> iota_values(std::int64_t n, float scale = 0.5f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = (static_cast<float>(i) - 3.0f) * scale;
  return v;
}

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

// ---------------------------------------------------------------- round trips

TEST(SafeTensorsRoundTrip, EveryDTypeAndShape) {
  TempDir dir;
  const std::vector<Shape> shapes = {{}, {0}, {1}, {3}, {2, 3}, {2, 0, 4}, {1, 1, 5}, {3, 1, 2, 2}};
  const std::vector<DType> dtypes = {DType::f32, DType::bf16, DType::f16, DType::boolean};
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (DType dtype : dtypes)
    for (std::size_t s = 0; s < shapes.size(); ++s) {
      std::vector<float> values = iota_values(numel(shapes[s]));
      if (dtype == DType::boolean)
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = (i % 3 == 1) ? 0.0f : 1.0f;
      tensors.emplace_back(std::string(qkv::dtype_name(dtype)) + "_" + std::to_string(s),
                           Tensor::from_vector(shapes[s], values, dtype));
    }
  const std::string path = dir.file("all.safetensors");
  qkv::save_safetensors(path, tensors);
  // No temporary file is left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

  const SafeTensors st = SafeTensors::open(path);
  EXPECT_EQ(st.size(), tensors.size());
  const SafeTensors in_memory = SafeTensors::parse(read_file(path));
  for (const auto& [name, expected] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(st.contains(name));
    for (const SafeTensors* source : {&st, &in_memory}) {
      const Tensor t = source->get(name);
      EXPECT_EQ(t.dtype(), expected.dtype());
      EXPECT_EQ(t.shape(), expected.shape());
      EXPECT_TRUE(t.is_contiguous());
      EXPECT_EQ(t.to_vector(), expected.to_vector());
    }
    EXPECT_EQ(st.info(name).shape, expected.shape());
    EXPECT_EQ(st.info(name).end - st.info(name).begin, expected.nbytes());
  }
  // Names come back sorted.
  std::vector<std::string> names = st.names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

TEST(SafeTensorsRoundTrip, BitExactSpecialValues) {
  // NaN, ±inf, -0, subnormals survive bit for bit in every float dtype.
  const std::vector<float> values = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                                     -std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN(),
                                     std::numeric_limits<float>::denorm_min(), 65504.0f, -1e-7f};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor t = Tensor::from_vector({static_cast<std::int64_t>(values.size())}, values, dtype);
    const SafeTensors st = SafeTensors::parse(qkv::serialize_safetensors({{"x", t}}));
    const Tensor back = st.get("x");
    ASSERT_EQ(back.nbytes(), t.nbytes());
    EXPECT_EQ(std::memcmp(back.data(), t.data(), t.nbytes()), 0) << qkv::dtype_name(dtype);
  }
}

TEST(SafeTensorsRoundTrip, StridedInputIsWrittenContiguous) {
  TempDir dir;
  const Tensor base = Tensor::from_vector({2, 3, 4}, iota_values(24));  // (2, 3, 4)
  const Tensor permuted = base.permute({2, 0, 1});                     // (4, 2, 3), strided
  const Tensor stepped = base.slice(2, 0, 4, 2);                       // (2, 3, 2), step 2
  const Tensor broadcast = Tensor::from_vector({1, 3}, iota_values(3)).expand({4, 3});  // stride 0
  ASSERT_FALSE(permuted.is_contiguous());
  ASSERT_FALSE(stepped.is_contiguous());
  const std::string path = dir.file("strided.safetensors");
  qkv::save_safetensors(path, {{"p", permuted}, {"s", stepped}, {"b", broadcast.to(DType::bf16)}});
  const SafeTensors st = SafeTensors::open(path);
  EXPECT_EQ(st.get("p").shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(st.get("p").to_vector(), permuted.to_vector());
  EXPECT_EQ(st.get("s").to_vector(), stepped.to_vector());
  EXPECT_EQ(st.get("b").to_vector(), broadcast.to_vector());
  EXPECT_EQ(st.info("p").end - st.info("p").begin, 24u * 4);
  EXPECT_EQ(st.info("b").end - st.info("b").begin, 12u * 2);
}

TEST(SafeTensorsRoundTrip, Metadata) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"quote\"back\\slash", "line\nbreak\ttab"}, {"utf8", "größe ✓"},
      {"", "empty key"}, {"empty value", ""}};
  const Bytes bytes = qkv::serialize_safetensors({{"w", Tensor::zeros({2})}}, metadata);
  const SafeTensors st = SafeTensors::parse(bytes);
  EXPECT_EQ(st.metadata(), metadata);
  // No metadata: no "__metadata__" entry at all, and an empty map back.
  const Bytes plain = qkv::serialize_safetensors({{"w", Tensor::zeros({2})}});
  const std::string text(reinterpret_cast<const char*>(plain.data()), plain.size());
  EXPECT_EQ(text.find("__metadata__"), std::string::npos);
  EXPECT_TRUE(SafeTensors::parse(plain).metadata().empty());
}

TEST(SafeTensorsRoundTrip, NoTensors) {
  const Bytes bytes = qkv::serialize_safetensors({}, {{"k", "v"}});
  const SafeTensors st = SafeTensors::parse(bytes);
  EXPECT_EQ(st.size(), 0u);
  EXPECT_TRUE(st.names().empty());
  EXPECT_EQ(st.metadata().at("k"), "v");
  // "{}" padded to 8 bytes is the smallest valid file.
  const Bytes empty = qkv::serialize_safetensors({});
  EXPECT_EQ(empty, image("{}      "));
}

// A device is written, never replaced: save_safetensors renames its temporary file into
// place only over a regular file (or none). Renaming over /dev/full would turn it into a regular file
// and report success; writing it directly reports the full device.
TEST(SafeTensorsRoundTrip, DevicesAreWrittenNotReplaced) {
  struct stat st{};
  const std::vector<float> ones(1024, 1.0f);
  const Tensor t = Tensor::from_vector({1024}, ones);
  if (::stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode)) {
    qkv::save_safetensors("/dev/null", {{"x", t}});
    ASSERT_EQ(::stat("/dev/null", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
  }
  if (::stat("/dev/full", &st) != 0 || !S_ISCHR(st.st_mode)) GTEST_SKIP() << "no /dev/full device here";
  try {
    qkv::save_safetensors("/dev/full", {{"x", t}});
    ADD_FAILURE() << "writing /dev/full reported success";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
  }
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/full was replaced by a regular file";
}

// ---------------------------------------------------------------- exact bytes

TEST(SafeTensorsWriter, BytesMatchTheReferenceLayout) {
  // The reference (safetensors.torch.save_file → Rust `serialize`) writes compact JSON,
  // "__metadata__" first, tensors sorted by dtype descending (F32, BF16, F16, BOOL) then
  // name, fields dtype/shape/data_offsets, the header padded with spaces to 8 bytes.
  const Tensor a = Tensor::from_vector({3}, std::vector<float>{1, 0, 1}, DType::boolean);
  const Tensor b = Tensor::from_vector({2}, std::vector<float>{1.0f, -2.0f});
  const Tensor c = Tensor::from_vector({1, 2}, std::vector<float>{1.0f, 0.5f}, DType::bf16);
  const Tensor h = Tensor::from_vector({}, std::vector<float>{1.0f}, DType::f16);
  const Bytes bytes =
      qkv::serialize_safetensors({{"h", h}, {"a", a}, {"c", c}, {"b", b}}, {{"format", "pt"}});

  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"c\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[8,12]},"
      "\"h\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[12,14]},"
      "\"a\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[14,17]}}";
  ASSERT_EQ(header.size(), 252u);  // padded with 4 spaces to 256
  Bytes data;
  append_value<float>(&data, 1.0f);
  append_value<float>(&data, -2.0f);
  append_value<std::uint16_t>(&data, 0x3f80);  // bf16 1.0
  append_value<std::uint16_t>(&data, 0x3f00);  // bf16 0.5
  append_value<std::uint16_t>(&data, 0x3c00);  // f16 1.0
  for (std::uint8_t v : {1, 0, 1}) append_value<std::uint8_t>(&data, v);
  const Bytes expected = image(header + "    ", data);
  ASSERT_EQ(bytes.size(), expected.size());
  EXPECT_TRUE(bytes == expected) << std::string(reinterpret_cast<const char*>(bytes.data()) + 8,
                                                bytes.size() - 8);
}

// An f64 tensor is written as F64, first (its enum value is the reference's largest of
// these), so the F32 after it stays aligned; reading it back gives f32 (F64 loads as f32).
TEST(SafeTensorsWriter, F64IsWrittenAsF64First) {
  const Tensor d = Tensor::from_vector_f64({2}, std::vector<double>{0.1, -1e300});
  const Tensor b = Tensor::from_vector({1}, std::vector<float>{3.0f});
  const Bytes bytes = qkv::serialize_safetensors({{"b", b}, {"d", d}});
  const std::string header =
      "{\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}";
  Bytes data;
  append_value<double>(&data, 0.1);
  append_value<double>(&data, -1e300);
  append_value<float>(&data, 3.0f);
  const Bytes expected = image(header + std::string((8 - header.size() % 8) % 8, ' '), data);
  EXPECT_TRUE(bytes == expected) << std::string(reinterpret_cast<const char*>(bytes.data()) + 8,
                                                bytes.size() - 8);
  const SafeTensors st = SafeTensors::parse(bytes);
  EXPECT_EQ(st.info("d").dtype, "F64");
  EXPECT_EQ(st.get("d").dtype(), DType::f32);
  EXPECT_EQ(st.get("d").to_vector(), (std::vector<float>{0.1f, -std::numeric_limits<float>::infinity()}));
}

// Raw tensors (I32, U8, ... as bytes) take their place in the reference's dtype order
// (U64, I64, F64, F32, U32, I32, BF16, F16, U16, I16, F8, I8, U8, BOOL), and bytes() reads
// any tensor back as written.
TEST(SafeTensorsWriter, RawTensorsAreWrittenInTheReferenceOrder) {
  const Tensor f = Tensor::from_vector({1}, std::vector<float>{2.0f});
  const Tensor h = Tensor::from_vector({1}, std::vector<float>{1.0f}, DType::f16);
  const Tensor a = Tensor::from_vector({1}, std::vector<float>{1}, DType::boolean);
  Bytes i32;
  append_value<std::int32_t>(&i32, -7);
  append_value<std::int32_t>(&i32, 70000);
  const Bytes u8 = {std::byte{'h'}, std::byte{'i'}, std::byte{'\n'}};
  const Bytes bytes = qkv::serialize_safetensors(
      {{"h", h}, {"a", a}, {"f", f}}, {},
      {{"u", qkv::RawTensor{"U8", {3}, u8}}, {"i", qkv::RawTensor{"I32", {2}, i32}}});
  const std::string header =
      "{\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[4,12]},"
      "\"h\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[12,14]},"
      "\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[14,17]},"
      "\"a\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[17,18]}}";
  Bytes data;
  append_value<float>(&data, 2.0f);
  data.insert(data.end(), i32.begin(), i32.end());
  append_value<std::uint16_t>(&data, 0x3c00);  // f16 1.0
  data.insert(data.end(), u8.begin(), u8.end());
  append_value<std::uint8_t>(&data, 1);
  const Bytes expected = image(header + std::string((8 - header.size() % 8) % 8, ' '), data);
  EXPECT_TRUE(bytes == expected) << std::string(reinterpret_cast<const char*>(bytes.data()) + 8,
                                                bytes.size() - 8);
  const SafeTensors st = SafeTensors::parse(bytes);
  const auto back = st.bytes("i");
  EXPECT_TRUE(Bytes(back.begin(), back.end()) == i32);
  EXPECT_EQ(st.bytes("u").size(), 3u);
  EXPECT_EQ(st.bytes("f").size(), 4u);
  expect_error([&] { st.bytes("none"); }, {"'none'"});
  expect_error([&] { qkv::serialize_safetensors({}, {}, {{"x", qkv::RawTensor{"I32", {3}, i32}}}); },
               {"'x'", "8 bytes", "not 12"});
  expect_error([&] { qkv::serialize_safetensors({}, {}, {{"x", qkv::RawTensor{"Q7", {0}, {}}}}); },
               {"'x'", "'Q7'"});
  expect_error([&] { qkv::serialize_safetensors({{"x", f}}, {}, {{"x", qkv::RawTensor{"U8", {3}, u8}}}); },
               {"'x'", "twice"});
}

TEST(SafeTensorsWriter, HeaderIsPaddedToEightBytesForEveryLength) {
  // Names of length 1..16 move the header length through every residue mod 8.
  for (int len = 1; len <= 16; ++len) {
    const Bytes bytes = qkv::serialize_safetensors({{std::string(len, 'n'), Tensor::zeros({1})}});
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u) << len;
    EXPECT_EQ(bytes.size(), 8 + n + 4) << len;
    EXPECT_NE(static_cast<char>(bytes[8 + n - 1]), '\0');
    EXPECT_NO_THROW(SafeTensors::parse(bytes));
  }
}

TEST(SafeTensorsWriter, SaveFileMatchesSerialize) {
  TempDir dir;
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"x", Tensor::from_vector({2, 2}, iota_values(4), DType::f16)}, {"y", Tensor::full({3}, 2.0f)}};
  const std::string path = dir.file("m.safetensors");
  qkv::save_safetensors(path, tensors, {{"a", "b"}});
  EXPECT_EQ(read_file(path), qkv::serialize_safetensors(tensors, {{"a", "b"}}));
  // Overwrites an existing file in place.
  qkv::save_safetensors(path, {{"z", Tensor::zeros({1})}});
  EXPECT_EQ(SafeTensors::open(path).names(), std::vector<std::string>{"z"});
}

TEST(SafeTensorsWriter, Errors) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  expect_error([&] { qkv::save_safetensors(path, {{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({2})}}); },
               {"'a'", "twice"});
  expect_error([&] { qkv::save_safetensors(path, {{"__metadata__", Tensor::zeros({1})}}); },
               {"__metadata__", "reserved"});
  expect_error([&] { qkv::save_safetensors(path, {{"u", Tensor()}}); }, {"'u'", "undefined"});
  expect_error([&] { qkv::save_safetensors(path, {{"bad\xff", Tensor::zeros({1})}}); },
               {"tensor name", "UTF-8"});
  expect_error([&] { qkv::save_safetensors(path, {}, {{"k", "\xc3"}}); }, {"metadata 'k'", "UTF-8"});
  expect_error([&] { qkv::save_safetensors(dir.file("no/such/dir/x.safetensors"), {}); },
               {"no/such/dir/x.safetensors"});
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir.path()));  // nor a temporary file
}

// ---------------------------------------------------------------- views and copies

TEST(SafeTensorsRead, AlignedTensorsAreZeroCopyViewsThatOutliveTheFile) {
  TempDir dir;
  const std::string path = dir.file("v.safetensors");
  const std::vector<float> values = iota_values(6);
  qkv::save_safetensors(path, {{"w", Tensor::from_vector({2, 3}, values)},
                               {"m", Tensor::from_vector({5}, std::vector<float>{1, 0, 0, 1, 1}, DType::boolean)}});
  Tensor w, again;
  {
    const SafeTensors st = SafeTensors::open(path);
    w = st.get("w");
    again = st.get("w");
    // Both are views of the same mapped bytes: no copy was made.
    EXPECT_EQ(w.data(), again.data());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(w.data()) % alignof(float), 0u);
    // Views point into the one mapping at their offsets (a copy would land elsewhere).
    const Tensor m = st.get("m");
    EXPECT_EQ(static_cast<const std::byte*>(m.data()) - static_cast<const std::byte*>(w.data()),
              static_cast<std::ptrdiff_t>(st.info("m").begin - st.info("w").begin));
  }
  // The SafeTensors is gone; the views keep the mapping alive.
  EXPECT_EQ(w.to_vector(), values);
  EXPECT_EQ(again.to_vector(), values);
}

TEST(SafeTensorsRead, MisalignedTensorsAreCopied) {
  // A 2-byte BOOL first puts the F32 at data offset 2 and the F16 at offset 10: neither
  // aligned (the header is padded to 8, the mapping is page aligned).
  const std::string header =
      "{\"a\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[2,10]},"
      "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[10,11]},"
      "\"d\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[11,15]}}";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  Bytes data;
  append_value<std::uint8_t>(&data, 1);
  append_value<std::uint8_t>(&data, 0);
  append_value<float>(&data, 1.5f);
  append_value<float>(&data, -3.25f);
  append_value<std::uint8_t>(&data, 7);
  append_value<std::uint16_t>(&data, 0x3c00);  // 1.0
  append_value<std::uint16_t>(&data, 0xc000);  // -2.0
  const Bytes bytes = image(padded, data);

  TempDir dir;
  const std::string path = dir.file("unaligned.safetensors");
  write_file(path, bytes);
  for (const SafeTensors& st : {SafeTensors::open(path), SafeTensors::parse(bytes)}) {
    const Tensor b = st.get("b");
    EXPECT_EQ(b.to_vector(), (std::vector<float>{1.5f, -3.25f}));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % alignof(float), 0u);
    EXPECT_NE(b.data(), st.get("b").data());  // a fresh copy each time
    const Tensor d = st.get("d");
    EXPECT_EQ(d.dtype(), DType::f16);
    EXPECT_EQ(d.to_vector(), (std::vector<float>{1.0f, -2.0f}));
    EXPECT_EQ(st.get("a").to_vector(), (std::vector<float>{1.0f, 0.0f}));
    EXPECT_EQ(st.info("c").dtype, "U8");
  }
}

TEST(SafeTensorsRead, F64IsConvertedToF32) {
  const double big = 1e300;
  const std::vector<double> values = {0.1, -2.5, big, -big, 1e-320, std::nan("")};
  Bytes data;
  for (double v : values) append_value<double>(&data, v);
  // With a BOOL [1] first the F64 sits at offset 1: the conversion reads unaligned too.
  for (bool misalign : {false, true}) {
    std::string header;
    Bytes d = data;
    if (misalign) {
      header = "{\"pad\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"x\":{\"dtype\":\"F64\",\"shape\":[2,3],\"data_offsets\":[1,49]}}";
      d.insert(d.begin(), std::byte{1});
    } else {
      header = "{\"x\":{\"dtype\":\"F64\",\"shape\":[2,3],\"data_offsets\":[0,48]}}";
    }
    const SafeTensors st = SafeTensors::parse(image(header, d));
    const Tensor x = st.get("x");
    EXPECT_EQ(x.dtype(), DType::f32);
    EXPECT_EQ(x.shape(), (Shape{2, 3}));
    const std::vector<float> got = x.to_vector();
    EXPECT_EQ(got[0], 0.1f);
    EXPECT_EQ(got[1], -2.5f);
    EXPECT_EQ(got[2], std::numeric_limits<float>::infinity());
    EXPECT_EQ(got[3], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(got[4], 0.0f);
    EXPECT_TRUE(std::isnan(got[5]));
  }
}

TEST(SafeTensorsRead, OtherDTypesAreListedButGetThrowsTypeError) {
  const std::vector<std::pair<std::string, int>> others = {
      {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2},
      {"U16", 2}, {"I8", 1},  {"U8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [dtype, size] : others) {
    SCOPED_TRACE(dtype);
    const std::string header = "{\"position_ids\":{\"dtype\":\"" + dtype +
                               "\",\"shape\":[1,3],\"data_offsets\":[0," + std::to_string(3 * size) + "]}}";
    const SafeTensors st = SafeTensors::parse(image(header, zeros(3 * size)), "bert.st");
    EXPECT_EQ(st.names(), std::vector<std::string>{"position_ids"});
    EXPECT_EQ(st.info("position_ids").dtype, dtype);
    EXPECT_EQ(st.info("position_ids").shape, (Shape{1, 3}));
    expect_error([&] { st.get("position_ids"); }, {"bert.st", "'position_ids'", dtype},
                 ErrorKind::type);
  }
}

TEST(SafeTensorsRead, MissingTensorIsNamed) {
  const SafeTensors st = SafeTensors::parse(qkv::serialize_safetensors({{"w", Tensor::zeros({1})}}));
  EXPECT_FALSE(st.contains("v"));
  expect_error([&] { st.get("encoder.layer.0.weight"); }, {"'encoder.layer.0.weight'"});
  expect_error([&] { st.info("nope"); }, {"'nope'"});
}

TEST(SafeTensorsRead, ZeroSizeTensorsMayShareAnOffset) {
  const std::string header =
      "{\"e1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
      "\"e2\":{\"dtype\":\"F16\",\"shape\":[4,0],\"data_offsets\":[0,0]},"
      "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
      "\"e3\":{\"dtype\":\"BOOL\",\"shape\":[0,3],\"data_offsets\":[4,4]}}";
  Bytes data;
  append_value<float>(&data, 42.0f);
  const SafeTensors st = SafeTensors::parse(image(header, data));
  EXPECT_EQ(st.get("s").shape(), Shape{});
  EXPECT_EQ(st.get("s").to_vector(), std::vector<float>{42.0f});
  EXPECT_EQ(st.get("e2").shape(), (Shape{4, 0}));
  EXPECT_EQ(st.get("e2").numel(), 0);
  EXPECT_EQ(st.get("e3").numel(), 0);
}

TEST(SafeTensorsRead, HeaderWhitespaceAndUnknownFieldsAreAccepted) {
  const std::string header =
      " \n{ \"w\" : {\"shape\":[1], \"extra\": [1,2], \"data_offsets\":[0,4], \"dtype\":\"F32\"} }\t ";
  Bytes data;
  append_value<float>(&data, 3.0f);
  EXPECT_EQ(SafeTensors::parse(image(header, data)).get("w").to_vector(), std::vector<float>{3.0f});
}

// ---------------------------------------------------------------- validation

const std::string kOne = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

TEST(SafeTensorsValidation, TooShortForTheSizeField) {
  for (std::size_t n : {0, 1, 7}) expect_parse_error(zeros(n), {"shorter than the 8-byte"});
  TempDir dir;
  for (std::size_t n : {0, 3}) {
    const std::string path = dir.file("short" + std::to_string(n));
    write_file(path, zeros(n));
    expect_error([&] { SafeTensors::open(path); }, {path, std::to_string(n) + " bytes", "shorter"});
  }
}

TEST(SafeTensorsValidation, FileProblems) {
  TempDir dir;
  expect_error([&] { SafeTensors::open(dir.file("missing.safetensors")); },
               {"missing.safetensors", "cannot open"});
  expect_error([&] { SafeTensors::open(dir.path().string()); }, {"not a regular file"});
}

TEST(SafeTensorsValidation, HeaderSizeBeyondTheFile) {
  Bytes bytes;
  append_u64(&bytes, 100);
  append(&bytes, "{}        ");
  expect_parse_error(bytes, {"header size 100", "10 bytes"});
  // One byte short of a valid file.
  Bytes valid = image(kOne, zeros(8));
  Bytes cut(valid.begin(), valid.begin() + 8 + static_cast<std::ptrdiff_t>(kOne.size()) - 1);
  expect_parse_error(cut, {"header size", "exceeds"});
}

TEST(SafeTensorsValidation, HeaderSizeOverTheLimit) {
  for (std::uint64_t n : {std::uint64_t{100'000'001}, std::numeric_limits<std::uint64_t>::max()}) {
    Bytes bytes;
    append_u64(&bytes, n);
    append(&bytes, "{}");
    expect_parse_error(bytes, {std::to_string(n), "limit of 100000000"});
  }
}

TEST(SafeTensorsValidation, HeaderNotJsonOrNotAnObject) {
  expect_parse_error(image("{\"w\":"), {"not valid JSON"});
  expect_parse_error(image(""), {"not valid JSON"});
  expect_parse_error(image("{} trailing"), {"not valid JSON"});
  expect_parse_error(image("{\"\xff\":1}"), {"not valid JSON"});
  expect_parse_error(image(std::string("{\"a\0\":1}", 8)), {"not valid JSON"});
  expect_parse_error(image("[1, 2]"), {"must be a JSON object", "array"});
  expect_parse_error(image("42"), {"must be a JSON object"});
}

// Issue 48 row 1: a nested value in the header (here in __metadata__, where a string
// belongs) crashed the reader quoting it; nesting over 64 levels is refused before parsing.
TEST(SafeTensorsValidation, DeeplyNestedHeaderIsRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_parse_error(image("{\"__metadata__\":{\"a\":" + deep + "}}"),
                     {"bad.st': header", "JSON nested more than 64 levels deep"});
  expect_parse_error(image("{\"w\":" + deep + "}"), {"bad.st': header", "more than 64 levels"});
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(100000, '}');
  expect_parse_error(image("{\"w\":" + objects + "}"), {"bad.st': header", "more than 64 levels"});
  // Within the limit, a wrong value is quoted by a bounded prefix.
  std::string wide = "[0";
  for (int i = 0; i < 100000; ++i) wide += ",0";
  wide += "]";
  try {
    SafeTensors::parse(image("{\"__metadata__\":{\"a\":" + wide + "}}"), "bad.st");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
  }
}

TEST(SafeTensorsValidation, EntryFields) {
  expect_parse_error(image("{\"w\":3}"), {"'w'", "must be an object", "number"});
  expect_parse_error(image("{\"w\":{\"shape\":[],\"data_offsets\":[0,0]}}"), {"'w'", "\"dtype\""});
  expect_parse_error(image("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,0]}}"), {"'w'", "\"shape\""});
  expect_parse_error(image("{\"w\":{\"dtype\":\"F32\",\"shape\":[]}}"), {"'w'", "\"data_offsets\""});
  expect_parse_error(image("{\"w\":{\"dtype\":5,\"shape\":[],\"data_offsets\":[0,4]}}", zeros(4)),
                     {"'w'", "\"dtype\" must be a string"});
  expect_parse_error(image("{\"w\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", zeros(8)),
                     {"'w'", "\"shape\" must be an array"});
  for (const char* offsets : {"[0]", "[0,4,4]", "\"0,4\"", "{}"})
    expect_parse_error(image(std::string("{\"w\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":") +
                             offsets + "}}", zeros(4)),
                       {"'w'", "\"data_offsets\" must be an array [begin, end]"});
  expect_parse_error(image("{\"w\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,\"4\"]}}", zeros(4)),
                     {"'w'", "data_offsets end", "non-negative integer"});
  expect_parse_error(image("{\"w\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[-1,4]}}", zeros(4)),
                     {"'w'", "data_offsets begin", "non-negative"});
  expect_parse_error(
      image("{\"w\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,18446744073709551615]}}", zeros(4)),
      {"'w'", "too large"});
}

TEST(SafeTensorsValidation, UnknownDType) {
  for (const char* dtype : {"F128", "f32", "", "C64"})
    expect_parse_error(
        image(std::string("{\"w\":{\"dtype\":\"") + dtype + "\",\"shape\":[1],\"data_offsets\":[0,4]}}", zeros(4)),
        {"'w'", std::string("unknown dtype \"") + dtype + "\"", "F32, F64"}, ErrorKind::type);
}

TEST(SafeTensorsValidation, ShapeEntries) {
  const auto with_shape = [](const std::string& shape) {
    return image("{\"w\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,8]}}", zeros(8));
  };
  expect_parse_error(with_shape("[-2]"), {"'w'", "shape entry", "non-negative, got -2"});
  expect_parse_error(with_shape("[2.0]"), {"'w'", "shape entry", "non-negative integer"});
  expect_parse_error(with_shape("[1.5]"), {"'w'", "shape entry"});
  expect_parse_error(with_shape("[\"2\"]"), {"'w'", "shape entry"});
  expect_parse_error(with_shape("[null]"), {"'w'", "shape entry"});
  expect_parse_error(with_shape("[9223372036854775808]"), {"'w'", "too large"});
  // The product overflows 64 bits: caught before any multiplication wraps.
  expect_parse_error(with_shape("[4294967296,4294967296,4294967296]"), {"'w'", "2^40 elements"});
  expect_parse_error(with_shape("[0,4294967296,4294967296,4294967296]"), {"'w'", "2^40 elements"});
}

TEST(SafeTensorsValidation, ShapeDisagreesWithOffsets) {
  expect_parse_error(image("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", zeros(8)),
                     {"'w'", "shape (3,) of F32", "needs 12 bytes", "hold 8"});
  expect_parse_error(image("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,4]}}", zeros(4)),
                     {"'w'", "needs 8 bytes", "hold 4"});
  expect_parse_error(image("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,4]}}", zeros(4)),
                     {"'w'", "needs 0 bytes"});
}

TEST(SafeTensorsValidation, BeginAfterEnd) {
  expect_parse_error(image("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", zeros(8)),
                     {"'w'", "begin 8 is after end 0"});
}

TEST(SafeTensorsValidation, OffsetsBeyondTheData) {
  expect_parse_error(image("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", zeros(8)),
                     {"'w'", "[0, 16)", "beyond the data buffer of 8 bytes"});
  expect_parse_error(image(kOne), {"'w'", "beyond the data buffer of 0 bytes"});
}

TEST(SafeTensorsValidation, Overlap) {
  expect_parse_error(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                           zeros(12)),
                     {"'b' [4, 12) overlaps tensor 'a' [0, 8)"});
  // Two tensors over the same bytes.
  expect_parse_error(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                           zeros(8)),
                     {"overlaps"});
  // A zero-size tensor inside another one also overlaps it.
  expect_parse_error(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                           zeros(8)),
                     {"'e'", "overlaps tensor 'a'"});
}

TEST(SafeTensorsValidation, GapsAndTrailingBytes) {
  expect_parse_error(image("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                           zeros(12)),
                     {"gap of 4 bytes at [4, 8) before tensor 'b'"});
  expect_parse_error(image("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", zeros(8)),
                     {"gap of 4 bytes at [0, 4)", "'b'"});
  expect_parse_error(image(kOne, zeros(9)), {"1 bytes at [8, 9)", "belong to no tensor"});
  expect_parse_error(image("{}", zeros(3)), {"3 bytes", "the header lists none"});
  // Trailing bytes after a file written by the writer.
  Bytes bytes = qkv::serialize_safetensors({{"w", Tensor::zeros({2})}});
  bytes.push_back(std::byte{0});
  expect_parse_error(bytes, {"belong to no tensor"});
  // And one byte missing.
  bytes.pop_back();
  bytes.pop_back();
  expect_parse_error(bytes, {"'w'", "beyond the data buffer of 7 bytes"});
}

TEST(SafeTensorsValidation, Metadata) {
  expect_parse_error(image("{\"__metadata__\":[\"a\"]}"), {"__metadata__ must be an object"});
  expect_parse_error(image("{\"__metadata__\":{\"total_size\":12}}"),
                     {"__metadata__ value of 'total_size' must be a string", "number"});
  EXPECT_TRUE(SafeTensors::parse(image("{\"__metadata__\":{}}")).metadata().empty());
}

TEST(SafeTensorsValidation, OpenNamesTheFile) {
  TempDir dir;
  const std::string path = dir.file("corrupt.safetensors");
  write_file(path, image("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", zeros(8)));
  expect_error([&] { SafeTensors::open(path); }, {path, "'w'", "needs 12 bytes"});
}

TEST(SafeTensorsValidation, EveryTruncationOfAValidFileFails) {
  const Bytes valid = qkv::serialize_safetensors(
      {{"a", Tensor::from_vector({3}, iota_values(3))}, {"b", Tensor::zeros({2}, DType::f16)}},
      {{"k", "v"}});
  ASSERT_NO_THROW(SafeTensors::parse(valid));
  for (std::size_t n = 0; n < valid.size(); ++n) {
    const Bytes cut(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(SafeTensors::parse(cut), Error) << n;
  }
}

// ---------------------------------------------------------------- model directories

class SafeTensorsModel : public ::testing::Test {
 protected:
  void write_shards() {
    qkv::save_safetensors(dir_.file("model-00001-of-00002.safetensors"),
                          {{"a", Tensor::full({2}, 1.0f)}, {"b", Tensor::full({3}, 2.0f, DType::bf16)}},
                          {{"format", "pt"}, {"shard", "1"}});
    qkv::save_safetensors(dir_.file("model-00002-of-00002.safetensors"),
                          {{"c", Tensor::full({1, 2}, 3.0f)}, {"extra", Tensor::zeros({1})}},
                          {{"shard", "2"}});
  }
  void write_index(const std::string& text) {
    std::ofstream(dir_.file("model.safetensors.index.json")) << text;
  }
  const std::string kIndex =
      "{\"metadata\":{\"total_size\":24},\"weight_map\":{"
      "\"a\":\"model-00001-of-00002.safetensors\",\"b\":\"model-00001-of-00002.safetensors\","
      "\"c\":\"model-00002-of-00002.safetensors\"}}";
  TempDir dir_;
};

TEST_F(SafeTensorsModel, SingleFile) {
  qkv::save_safetensors(dir_.file("model.safetensors"), {{"w", Tensor::full({2}, 5.0f)}});
  const SafeTensors st = SafeTensors::open_model(dir_.path().string());
  EXPECT_EQ(st.get("w").to_vector(), (std::vector<float>{5.0f, 5.0f}));
}

TEST_F(SafeTensorsModel, TwoShards) {
  write_shards();
  write_index(kIndex);
  Tensor c;
  {
    const SafeTensors st = SafeTensors::open_model(dir_.path().string());
    EXPECT_EQ(st.names(), (std::vector<std::string>{"a", "b", "c"}));  // only the index's tensors
    EXPECT_EQ(st.get("a").to_vector(), (std::vector<float>{1.0f, 1.0f}));
    EXPECT_EQ(st.get("b").dtype(), DType::bf16);
    EXPECT_EQ(st.get("b").to_vector(), (std::vector<float>{2.0f, 2.0f, 2.0f}));
    c = st.get("c");
    EXPECT_EQ(st.metadata().at("format"), "pt");
    EXPECT_EQ(st.metadata().at("shard"), "1");  // the first shard in name order wins
    EXPECT_FALSE(st.contains("extra"));
  }
  EXPECT_EQ(c.to_vector(), (std::vector<float>{3.0f, 3.0f}));  // the shard mapping outlives it
}

// A directory without safetensors weights names what it holds and how to convert it.
TEST_F(SafeTensorsModel, OtherFormatsAreNamedWithHowToConvert) {
  const std::string d = dir_.path().string();
  expect_error([&] { SafeTensors::open_model(d); },
               {"no model.safetensors", "qkv reads Hugging Face safetensors checkpoints"});
  write_file(dir_.file("pytorch_model.bin"), zeros(16));
  expect_error([&] { SafeTensors::open_model(d); },
               {"PyTorch weights (pytorch_model.bin)", "save_pretrained", "torch.load",
                "safetensors.torch import save_file"});
  write_file(dir_.file("tf_model.h5"), zeros(16));
  write_file(dir_.file("flax_model.msgpack"), zeros(16));
  write_file(dir_.file("model-q4.gguf"), zeros(16));
  expect_error([&] { SafeTensors::open_model(d); },
               {"PyTorch weights (pytorch_model.bin)", "TensorFlow weights (tf_model.h5)",
                "from_tf=True", "Flax weights (flax_model.msgpack)", "from_flax=True",
                "GGUF weights (model-q4.gguf"});
}

// A file that is not safetensors is recognised by its magic number when it fails as one.
TEST(SafeTensorsValidation, OtherFormatsAreRecognised) {
  const auto bytes = [](const std::string& s) {
    Bytes b;
    append(&b, s);
    append(&b, std::string(64, 'x'));
    return b;
  };
  expect_parse_error(bytes("version https://git-lfs.github.com/spec/v1\noid sha256:00\n"),
                     {"not a safetensors file", "Git LFS pointer", "git lfs pull"});
  expect_parse_error(bytes(std::string("PK\x03\x04", 4)), {"ZIP archive", "torch.save"});
  expect_parse_error(bytes("\x80\x02\x8a\x0alz"), {"Python pickle", "save_file"});
  expect_parse_error(bytes("GGUF\x03"), {"GGUF file", "gguf_file"});
  expect_parse_error(bytes("\x89HDF\r\n\x1a\n"), {"HDF5 file", "from_tf=True"});
  // Unrecognised garbage keeps the plain message.
  expect_parse_error(bytes("\xff\xff\xff\xff\xff\xff\xff\xff"), {"exceeds the limit"});
}

// The index is read bounded: a directory or a device in its place is refused, not read.
TEST_F(SafeTensorsModel, IndexThatIsNotAFile) {
  fs::create_directories(dir_.path() / "model.safetensors.index.json");
  expect_error([&] { SafeTensors::open_model(dir_.path().string()); },
               {"model.safetensors.index.json", "not a regular file (a directory)"});
  fs::remove(dir_.path() / "model.safetensors.index.json");
  fs::create_symlink("/dev/zero", dir_.path() / "model.safetensors.index.json");
  expect_error([&] { SafeTensors::open_model(dir_.path().string()); },
               {"not a regular file (a character device)"});
}

TEST_F(SafeTensorsModel, Errors) {
  const std::string d = dir_.path().string();
  expect_error([&] { SafeTensors::open_model(d); }, {"model.safetensors", "model.safetensors.index.json"});
  write_index(kIndex);
  expect_error([&] { SafeTensors::open_model(d); },
               {"model-00001-of-00002.safetensors", "does not exist", "'a'"});
  write_shards();
  write_index("{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
              "\"z\":\"model-00002-of-00002.safetensors\"}}");
  expect_error([&] { SafeTensors::open_model(d); },
               {"'z'", "model-00002-of-00002.safetensors", "does not contain it"});
  write_index("{\"weight_map\":{\"a\":\"../model-00001-of-00002.safetensors\"}}");
  expect_error([&] { SafeTensors::open_model(d); }, {"'../model-00001-of-00002.safetensors'", "relative path"});
  write_index("{\"weight_map\":{\"a\":\"/etc/passwd\"}}");
  expect_error([&] { SafeTensors::open_model(d); }, {"/etc/passwd", "relative path"});
  write_index("{\"weight_map\":{\"a\":7}}");
  expect_error([&] { SafeTensors::open_model(d); }, {"'a'", "must be a file name"});
  write_index("{\"weight_map\":[]}");
  expect_error([&] { SafeTensors::open_model(d); }, {"index.json", "weight_map"});
  write_index("{\"metadata\":{}}");
  expect_error([&] { SafeTensors::open_model(d); }, {"index.json", "weight_map"});
  write_index("{\"weight_map\":");
  expect_error([&] { SafeTensors::open_model(d); }, {"index.json", "not valid JSON"});
  write_index("{\"weight_map\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  expect_error([&] { SafeTensors::open_model(d); }, {"index.json", "more than 64 levels"});
  // A corrupt shard: its own error, naming the shard file.
  write_index(kIndex);
  write_file(dir_.file("model-00002-of-00002.safetensors"), zeros(4));
  expect_error([&] { SafeTensors::open_model(d); }, {"model-00002-of-00002.safetensors", "shorter"});
}

}  // namespace

namespace {

// The fuzz seeds were written by an independent Python writer (struct + json, per the
// spec; the script is quoted in tests/fuzz/seeds/safetensors/README). Read them back.
const fs::path kSeeds = fs::path(__FILE__).parent_path() / ".." / "fuzz" / "seeds" / "safetensors";

TEST(SafeTensorsPython, ReadsFilesWrittenByAnIndependentWriter) {
  const SafeTensors a = SafeTensors::open((kSeeds / "f32_metadata.safetensors").string());
  EXPECT_EQ(a.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(a.get("w").shape(), (Shape{2, 2}));
  EXPECT_EQ(a.get("w").to_vector(), (std::vector<float>{1, -2, 0.5f, 3}));

  const SafeTensors b = SafeTensors::open((kSeeds / "mixed.safetensors").string());
  EXPECT_EQ(b.names(), (std::vector<std::string>{"a", "b", "c", "e", "m"}));
  EXPECT_EQ(b.get("a").shape(), Shape{});
  EXPECT_EQ(b.get("a").to_vector(), std::vector<float>{7});
  EXPECT_EQ(b.get("b").dtype(), DType::bf16);
  EXPECT_EQ(b.get("b").to_vector(), (std::vector<float>{1, -1, 0}));
  EXPECT_EQ(b.get("c").to_vector(), (std::vector<float>{1, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(b.get("e").shape(), (Shape{0, 4}));
  EXPECT_EQ(b.get("m").dtype(), DType::boolean);
  EXPECT_EQ(b.get("m").to_vector(), (std::vector<float>{1, 0, 1}));

  // Unpadded header, a BOOL first: F64, I64 and F16 all at odd offsets.
  const SafeTensors c = SafeTensors::open((kSeeds / "unaligned_i64_f64.safetensors").string());
  EXPECT_EQ(c.get("x").to_vector(), (std::vector<float>{0.1f, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(c.get("h").to_vector(), std::vector<float>{1});
  EXPECT_EQ(c.info("position_ids").dtype, "I64");
  EXPECT_THROW(c.get("position_ids"), Error);
}

TEST(SafeTensorsPython, WriterOutputReadsBackThroughTheSeedLayout) {
  // The writer's bytes for the first seed's content equal the seed except for the padding
  // the Python script also adds: byte for byte.
  const Bytes ours = qkv::serialize_safetensors(
      {{"w", Tensor::from_vector({2, 2}, std::vector<float>{1, -2, 0.5f, 3})}}, {{"format", "pt"}});
  EXPECT_TRUE(ours == read_file((kSeeds / "f32_metadata.safetensors").string()));
}

}  // namespace
