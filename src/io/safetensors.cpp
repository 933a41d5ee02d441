// safetensors reading (mmap, validation, zero-copy views) and writing.
// Format and checks follow the reference implementation, huggingface/safetensors
// (safetensors/src/tensor.rs: `read_metadata`, `validate`, `prepare`, `serialize`).
#include "qkv/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <tuple>
#include <vector>

#include "io/json_bounded.h"
#include "io/read_file.h"
#include "qkv/error.h"
#include "qkv/files.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace qkv {

struct SafeTensors::Source {
  std::shared_ptr<void> keeper;  // the mapping or buffer holding the whole file
  const std::byte* data;         // start of the data buffer (after the header)
  std::uint64_t size;            // bytes in the data buffer
  std::string label;             // the file name, for messages
};

namespace {

using json = nlohmann::json;

// The reference's limit (safetensors::tensor::MAX_HEADER_SIZE): a corrupt size field must
// not make a reader allocate or scan gigabytes.
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;
// Tensor's own element limit (checked_numel in src/core/tensor.cpp); applied to the
// nonzero sizes so that strides of zero-size tensors cannot overflow either.
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 40;

struct DTypeEntry {
  const char* name;
  std::uint64_t size;
};
// Every dtype of the format (safetensors::tensor::Dtype) that this reader accepts.
constexpr DTypeEntry kDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

const DTypeEntry* find_dtype(std::string_view name) {
  for (const DTypeEntry& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string accepted_dtypes() {
  std::string s;
  for (const DTypeEntry& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// Which qkv dtype a file dtype loads as directly (no conversion), if any.
bool native_dtype(std::string_view name, DType* out) {
  if (name == "F32") *out = DType::f32;
  else if (name == "BF16") *out = DType::bf16;
  else if (name == "F16") *out = DType::f16;
  else if (name == "BOOL") *out = DType::boolean;
  else return false;
  return true;
}

const char* file_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::boolean: return "BOOL";
    case DType::f64: return "F64";
  }
  return "?";
}

// A short rendering of a JSON value for messages (io::json_brief: a bounded prefix).
std::string brief(const json& value) { return std::string(value.type_name()) + " " + io::json_brief(value); }

// A non-negative integer that fits in int64, or an error naming `what`.
std::uint64_t read_size(const json& value, const std::string& where, const char* what) {
  QKV_CHECK(value.is_number_integer(),
            where << ": " << what << " must be a non-negative integer, got " << brief(value));
  QKV_CHECK(value.is_number_unsigned(),
            where << ": " << what << " must be non-negative, got " << value.get<std::int64_t>());
  const std::uint64_t v = value.get<std::uint64_t>();
  QKV_CHECK(v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
            where << ": " << what << " " << v << " is too large");
  return v;
}

Strides row_major(const Shape& shape) {
  Strides strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];  // bounded by kMaxElements (validated), no overflow
  }
  return strides;
}

std::string shape_text(const Shape& shape) { return shape_to_string(shape); }

// How to turn a checkpoint qkv does not read into model.safetensors. transformers'
// save_pretrained writes safetensors by default (safe_serialization=True), tied weights
// included; the plain torch route needs no transformers but save_file refuses tensors that
// share memory, as tied embeddings do.
constexpr const char* kConvertPytorch =
    "convert it with Python, either with transformers: "
    "`from transformers import AutoModel; AutoModel.from_pretrained(DIR).save_pretrained(DIR)` "
    "(model.safetensors is its default format), or with torch and safetensors alone: "
    "`import torch; from safetensors.torch import save_file; "
    "sd = torch.load(FILE, map_location='cpu', weights_only=True); "
    "save_file({k: v.contiguous() for k, v in sd.items()}, DIR + '/model.safetensors')`";

// A format other than safetensors, recognised by its first bytes; nullptr if none is.
// Only consulted once the file has failed as safetensors, so a valid file is never
// second-guessed.
std::string foreign_format(const std::byte* image, std::uint64_t size) {
  const auto starts = [&](std::string_view magic) {
    return size >= magic.size() && std::memcmp(image, magic.data(), magic.size()) == 0;
  };
  if (starts("version https://git-lfs.github.com/spec/"))
    return "a Git LFS pointer file, not the weights themselves: the repository was cloned "
           "without Git LFS; fetch the file with `git lfs pull` (or download it directly)";
  if (starts("PK\x03\x04"))
    return "a ZIP archive (the format of PyTorch's torch.save, pytorch_model.bin); qkv reads "
           "safetensors only: " + std::string(kConvertPytorch);
  if (size >= 2 && static_cast<unsigned char>(image[0]) == 0x80 &&
      static_cast<unsigned char>(image[1]) >= 2 && static_cast<unsigned char>(image[1]) <= 5)
    return "a Python pickle (the legacy torch.save format); qkv reads safetensors only: " +
           std::string(kConvertPytorch);
  if (starts("GGUF"))
    return "a GGUF file (llama.cpp's format); qkv reads Hugging Face safetensors only: use the "
           "model's safetensors release, or load the GGUF with transformers "
           "(`from_pretrained(DIR, gguf_file=NAME)`) and `save_pretrained` it";
  if (starts("\x89HDF\r\n\x1a\n"))
    return "an HDF5 file (TensorFlow/Keras, tf_model.h5); qkv reads safetensors only: convert "
           "it with transformers: `AutoModel.from_pretrained(DIR, from_tf=True)"
           ".save_pretrained(DIR)`";
  return {};
}

// The error for a model directory without safetensors weights: what it holds instead
// (checkpoint formats by their usual names, as Hugging Face saves them) and how to convert.
std::string no_safetensors_message(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string message = "model directory '" + dir + "': no model.safetensors (nor " +
                        "model.safetensors.index.json for sharded weights)";
  if (!fs::is_directory(dir, ec)) return message + "; '" + dir + "' is not a directory";
  std::vector<std::string> pytorch, tensorflow, flax, gguf, other;
  std::size_t seen = 0;
  // A directory of any size: look at a bounded number of entries.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end && seen < 4096;
       it.increment(ec), ++seen) {
    const std::string name = it->path().filename().string();
    const std::string ext = it->path().extension().string();
    if (ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt" ||
        name == "pytorch_model.bin.index.json")
      pytorch.push_back(name);
    else if (ext == ".h5" || name == "tf_model.h5.index.json" || name.starts_with("model.ckpt"))
      tensorflow.push_back(name);
    else if (ext == ".msgpack" || name == "flax_model.msgpack.index.json")
      flax.push_back(name);
    else if (ext == ".gguf")
      gguf.push_back(name);
    else if (ext == ".onnx")
      other.push_back(name);
  }
  const auto list = [](std::vector<std::string> names) {
    std::sort(names.begin(), names.end());
    std::string s;
    for (std::size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
    if (names.size() > 5) s += ", ... (" + std::to_string(names.size()) + " files)";
    return s;
  };
  if (pytorch.empty() && tensorflow.empty() && flax.empty() && gguf.empty() && other.empty())
    return message + "; qkv reads Hugging Face safetensors checkpoints (config.json + "
                     "model.safetensors)";
  message += "; qkv reads only the safetensors format, and this directory holds";
  std::string sep = " ";
  if (!pytorch.empty()) {
    message += sep + "PyTorch weights (" + list(pytorch) + "): " + kConvertPytorch;
    sep = "; and ";
  }
  if (!tensorflow.empty()) {
    message += sep + "TensorFlow weights (" + list(tensorflow) +
               "): convert them with transformers: `AutoModel.from_pretrained(DIR, "
               "from_tf=True).save_pretrained(DIR)`";
    sep = "; and ";
  }
  if (!flax.empty()) {
    message += sep + "Flax weights (" + list(flax) +
               "): convert them with transformers: `AutoModel.from_pretrained(DIR, "
               "from_flax=True).save_pretrained(DIR)`";
    sep = "; and ";
  }
  if (!gguf.empty()) {
    message += sep + "GGUF weights (" + list(gguf) +
               ", llama.cpp's format): use the model's safetensors release, or load the GGUF "
               "with transformers (`from_pretrained(DIR, gguf_file=NAME)`) and "
               "`save_pretrained` it";
    sep = "; and ";
  }
  if (!other.empty()) message += sep + "ONNX graphs (" + list(other) + "), which qkv does not read";
  return message;
}

}  // namespace

SafeTensors SafeTensors::from_image(const std::byte* image, std::uint64_t size,
                                    std::shared_ptr<void> keeper, const std::string& label) {
  const std::string file = "safetensors file '" + label + "'";
  QKV_CHECK(size >= 8, file << ": " << size
                            << " bytes is shorter than the 8-byte header size field");
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, image, 8);  // little-endian (static_assert above)
  if (header_size > kMaxHeaderSize || header_size > size - 8) {
    const std::string other = foreign_format(image, size);
    QKV_CHECK(other.empty(), file << ": not a safetensors file: this is " << other);
  }
  QKV_CHECK(header_size <= kMaxHeaderSize, file << ": header size " << header_size
                                                << " exceeds the limit of " << kMaxHeaderSize
                                                << " bytes (corrupt size field?)");
  QKV_CHECK(header_size <= size - 8, file << ": header size " << header_size
                                          << " exceeds the " << size - 8
                                          << " bytes that follow the size field");
  const char* text = reinterpret_cast<const char*>(image + 8);
  json header;
  try {
    header = io::parse_json(std::string_view(text, header_size), file + ": header");
  } catch (const json::exception& e) {
    throw Error(file + ": header is not valid JSON: " + e.what());
  }
  QKV_CHECK(header.is_object(), file << ": header must be a JSON object, got "
                                     << header.type_name());

  auto source = std::make_shared<Source>();
  source->keeper = std::move(keeper);
  source->data = image + 8 + header_size;
  source->size = size - 8 - header_size;
  source->label = label;

  SafeTensors result;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      QKV_CHECK(entry.is_object(), file << ": __metadata__ must be an object of strings, got "
                                        << brief(entry));
      for (const auto& [key, value] : entry.items()) {
        QKV_CHECK(value.is_string(), file << ": __metadata__ value of '" << key
                                          << "' must be a string, got " << brief(value));
        result.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = file + ": tensor '" + name + "'";
    QKV_CHECK(entry.is_object(), where << ": entry must be an object, got " << brief(entry));
    for (const char* field : {"dtype", "shape", "data_offsets"})
      QKV_CHECK(entry.contains(field), where << ": missing field \"" << field << "\"");
    const json& dtype = entry["dtype"];
    const json& shape = entry["shape"];
    const json& offsets = entry["data_offsets"];
    QKV_CHECK(dtype.is_string(), where << ": \"dtype\" must be a string, got " << brief(dtype));
    const std::string dtype_name = dtype.get<std::string>();
    const DTypeEntry* dt = find_dtype(dtype_name);
    QKV_CHECK_TYPE(dt != nullptr, where << ": unknown dtype \"" << dtype_name
                                        << "\" (accepted: " << accepted_dtypes() << ")");
    QKV_CHECK(shape.is_array(), where << ": \"shape\" must be an array, got " << brief(shape));
    QKV_CHECK(offsets.is_array() && offsets.size() == 2,
              where << ": \"data_offsets\" must be an array [begin, end], got " << brief(offsets));

    TensorInfo info;
    info.name = name;
    info.dtype = dtype_name;
    std::uint64_t elements = 1;  // product of the nonzero sizes
    bool empty = false;
    for (const json& s : shape) {
      const std::uint64_t n = read_size(s, where, "shape entry");
      info.shape.push_back(static_cast<std::int64_t>(n));
      if (n == 0) {
        empty = true;
        continue;
      }
      QKV_CHECK(elements <= kMaxElements / n,
                where << ": shape " << shape.dump() << " has more than 2^40 elements");
      elements *= n;
    }
    info.begin = read_size(offsets[0], where, "data_offsets begin");
    info.end = read_size(offsets[1], where, "data_offsets end");
    QKV_CHECK(info.begin <= info.end, where << ": data_offsets begin " << info.begin
                                            << " is after end " << info.end);
    QKV_CHECK(info.end <= source->size,
              where << ": data_offsets [" << info.begin << ", " << info.end
                    << ") go beyond the data buffer of " << source->size << " bytes");
    const std::uint64_t bytes = empty ? 0 : elements * dt->size;  // <= 2^43, no overflow
    QKV_CHECK(bytes == info.end - info.begin,
              where << ": shape " << shape_text(info.shape) << " of " << dtype_name << " needs "
                    << bytes << " bytes but data_offsets [" << info.begin << ", " << info.end
                    << ") hold " << info.end - info.begin);
    result.entries_[name] = Entry{std::move(info), source};
  }

  // Sorted by offset, the tensors must tile the data buffer exactly (reference: `validate`).
  std::vector<const TensorInfo*> order;
  order.reserve(result.entries_.size());
  for (const auto& [name, e] : result.entries_) order.push_back(&e.info);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  std::uint64_t cursor = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* t : order) {
    QKV_CHECK(t->begin >= cursor,
              file << ": tensor '" << t->name << "' [" << t->begin << ", " << t->end
                   << ") overlaps tensor '" << previous->name << "' [" << previous->begin << ", "
                   << previous->end << ")");
    QKV_CHECK(t->begin == cursor, file << ": gap of " << t->begin - cursor << " bytes at [" << cursor
                                       << ", " << t->begin << ") before tensor '" << t->name
                                       << "'");
    cursor = t->end;
    previous = t;
  }
  QKV_CHECK(cursor == source->size,
            file << ": " << source->size - cursor << " bytes at [" << cursor << ", "
                 << source->size << ") of the data buffer belong to no tensor"
                 << (order.empty() ? " (the header lists none)" : ""));
  return result;
}

SafeTensors SafeTensors::open(const std::string& path) {
  const std::string file = "safetensors file '" + path + "'";
  // O_NONBLOCK: a FIFO is refused below (not a regular file) instead of waited on for a
  // writer that may never come; for a regular file the flag changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  QKV_CHECK(fd >= 0, file << ": cannot open: " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    QKV_CHECK(false, file << ": cannot stat: " << std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    QKV_CHECK(false, file << ": not a regular file");
  }
  const auto length = static_cast<std::uint64_t>(st.st_size);
  if (length < 8) {
    ::close(fd);
    QKV_CHECK(false, file << ": " << length
                          << " bytes is shorter than the 8-byte header size field");
  }
  // The file is read into memory, not mapped: a mapping faults (SIGBUS) when the file is
  // truncated under it, and reads another file's bytes when it is rewritten in place, so a
  // model in use could crash its process or silently change. A copy costs one read of the
  // file at load time (page cache to memory) and makes every tensor the process's own.
  const std::size_t capacity =
      std::max<std::size_t>((length + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment, kTensorAlignment);
  void* memory = std::aligned_alloc(kTensorAlignment, capacity);
  if (memory == nullptr) {
    ::close(fd);
    throw Error(file + ": out of memory reading its " + io::byte_size(length), ErrorKind::memory);
  }
  std::shared_ptr<void> buffer(memory, [](void* p) { std::free(p); });
  auto* bytes = static_cast<char*>(memory);
  std::uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, bytes + done, static_cast<std::size_t>(std::min<std::uint64_t>(length - done, 1u << 30)),
                              static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      QKV_CHECK(false, file << ": reading failed at byte " << done << " of " << length << ": "
                            << (err != 0 ? std::strerror(err) : "the file was truncated while it was read"));
    }
    done += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  return from_image(static_cast<const std::byte*>(memory), length, std::move(buffer), path);
}

SafeTensors SafeTensors::parse(std::span<const std::byte> bytes, std::string label) {
  // A 64-byte-aligned copy (at least one line, so aligned_alloc's size rule holds): the
  // data lands at the same alignment as in a page-aligned mapping.
  const std::size_t capacity =
      std::max<std::size_t>((bytes.size() + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment,
                            kTensorAlignment);
  void* memory = std::aligned_alloc(kTensorAlignment, capacity);
  if (memory == nullptr) throw Error(label + ": out of memory copying " +
                                     std::to_string(bytes.size()) + " bytes");
  std::shared_ptr<void> buffer(memory, [](void* p) { std::free(p); });
  if (!bytes.empty()) std::memcpy(memory, bytes.data(), bytes.size());
  return from_image(static_cast<const std::byte*>(memory), bytes.size(), std::move(buffer), label);
}

SafeTensors SafeTensors::open_model(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(single, ec)) return open(single.string());
  if (!fs::exists(index_path, ec)) throw Error(no_safetensors_message(dir));
  const std::string where = "safetensors index '" + index_path.string() + "'";
  const std::string text = io::read_file(index_path.string(), "safetensors index", kMaxHeaderSize);
  json index;
  try {
    index = io::parse_json(text, where);
  } catch (const json::exception& e) {
    throw Error(where + ": not valid JSON: " + e.what());
  }
  QKV_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
            where << ": expected an object with a \"weight_map\" object of {tensor: shard file}");

  std::map<std::string, SafeTensors> shards;  // by file name; each opened once
  SafeTensors result;
  for (const auto& [name, shard_value] : index["weight_map"].items()) {
    QKV_CHECK(shard_value.is_string(), where << ": weight_map entry of tensor '" << name
                                             << "' must be a file name, got " << brief(shard_value));
    const std::string shard = shard_value.get<std::string>();
    const fs::path rel(shard);
    bool plain = !shard.empty() && rel.is_relative();
    for (const fs::path& part : rel) plain = plain && part != "..";
    QKV_CHECK(plain, where << ": shard '" << shard << "' of tensor '" << name
                           << "' must be a relative path inside the model directory");
    auto it = shards.find(shard);
    if (it == shards.end()) {
      const fs::path shard_path = fs::path(dir) / rel;
      QKV_CHECK(fs::is_regular_file(shard_path, ec),
                where << ": shard file " << shard_path.string() << " (holding tensor '" << name
                      << "') does not exist");
      it = shards.emplace(shard, open(shard_path.string())).first;
    }
    const auto entry = it->second.entries_.find(name);
    QKV_CHECK(entry != it->second.entries_.end(),
              where << ": tensor '" << name << "' is mapped to shard '" << shard
                    << "', which does not contain it");
    result.entries_[name] = entry->second;
  }
  for (const auto& [file, shard] : shards)
    for (const auto& [key, value] : shard.metadata_) result.metadata_.emplace(key, value);
  return result;
}

std::vector<std::string> SafeTensors::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

bool SafeTensors::contains(const std::string& name) const { return entries_.count(name) != 0; }

const TensorInfo& SafeTensors::info(const std::string& name) const {
  const auto it = entries_.find(name);
  QKV_CHECK(it != entries_.end(), "safetensors: no tensor named '" << name << "' (" << entries_.size()
                                                                   << " tensors present)");
  return it->second.info;
}

Tensor SafeTensors::get(const std::string& name) const {
  const auto it = entries_.find(name);
  QKV_CHECK(it != entries_.end(), "safetensors: no tensor named '" << name << "' (" << entries_.size()
                                                                   << " tensors present)");
  const TensorInfo& info = it->second.info;
  const Source& source = *it->second.source;
  const std::byte* data = source.data + info.begin;
  DType dtype;
  if (native_dtype(info.dtype, &dtype)) {
    // Zero copy when the element type's alignment holds; a view shares the mapping.
    if (reinterpret_cast<std::uintptr_t>(data) % dtype_size(dtype) == 0)
      return Tensor::from_blob(const_cast<std::byte*>(data), info.shape, row_major(info.shape),
                               dtype, source.keeper);
    Tensor t = Tensor::empty(info.shape, dtype);
    if (t.nbytes() > 0) std::memcpy(t.data(), data, t.nbytes());
    return t;
  }
  if (info.dtype == "F64") {
    Tensor t = Tensor::empty(info.shape, DType::f32);
    float* out = t.data_as<float>();
    for (std::int64_t i = 0, n = t.numel(); i < n; ++i) {
      double value;
      std::memcpy(&value, data + 8 * i, 8);  // may be unaligned
      out[i] = static_cast<float>(value);    // IEEE: nearest, beyond range to ±inf
    }
    return t;
  }
  QKV_CHECK_TYPE(false, "safetensors file '" << source.label << "': tensor '" << name
                                             << "' has dtype " << info.dtype
                                             << ", which qkv cannot load (F32, BF16, F16 and BOOL "
                                                "load as they are, F64 as f32)");
  return {};
}

std::span<const std::byte> SafeTensors::bytes(const std::string& name) const {
  const auto it = entries_.find(name);
  QKV_CHECK(it != entries_.end(), "safetensors: no tensor named '" << name << "' (" << entries_.size()
                                                                   << " tensors present)");
  const TensorInfo& info = it->second.info;
  return {it->second.source->data + info.begin, static_cast<std::size_t>(info.end - info.begin)};
}

namespace {

// The header and the tensors' bytes in data order, as the reference `prepare` lays them out.
struct Plan {
  std::string header;                // padded with spaces to a multiple of 8
  std::vector<Tensor> keep;          // contiguous copies of the Tensors, which `data` points into
  std::vector<std::span<const std::byte>> data;  // every tensor's bytes, in data order
};

std::string quoted(const std::string& s, const char* what) {
  try {
    return json(s).dump();  // compact, UTF-8 kept as is (serde_json does the same)
  } catch (const json::exception&) {
    throw Error(std::string("save_safetensors: ") + what + " is not valid UTF-8");
  }
}

Plan plan(const std::vector<std::pair<std::string, Tensor>>& tensors,
          const std::map<std::string, std::string>& metadata,
          const std::vector<std::pair<std::string, RawTensor>>& raw) {
  struct Item {
    const std::string* name;
    std::string_view dtype;
    Shape shape;
    std::span<const std::byte> data;
  };
  Plan p;
  p.keep.reserve(tensors.size());
  std::vector<Item> items;
  std::set<std::string> seen;
  const auto check_name = [&](const std::string& name) {
    QKV_CHECK(name != "__metadata__",
              "save_safetensors: the name \"__metadata__\" is reserved for the metadata");
    QKV_CHECK(seen.insert(name).second, "save_safetensors: tensor name '" << name
                                                                          << "' appears twice");
  };
  for (const auto& [name, t] : tensors) {
    QKV_CHECK(t.defined(), "save_safetensors: tensor '" << name << "' is undefined");
    check_name(name);
    p.keep.push_back(t.contiguous());
    const Tensor& c = p.keep.back();
    items.push_back({&name, file_dtype(t.dtype()), t.shape(),
                     {static_cast<const std::byte*>(c.data()), static_cast<std::size_t>(c.nbytes())}});
  }
  for (const auto& [name, r] : raw) {
    check_name(name);
    const DTypeEntry* d = find_dtype(r.dtype);
    QKV_CHECK(d != nullptr, "save_safetensors: tensor '" << name << "' has dtype '" << r.dtype
                                                         << "', not one of " << accepted_dtypes());
    std::uint64_t n = 1;
    for (const std::int64_t s : r.shape) {
      QKV_CHECK(s >= 0, "save_safetensors: tensor '" << name << "' has a negative size");
      n *= static_cast<std::uint64_t>(s);
    }
    QKV_CHECK(r.data.size() == n * d->size,
              "save_safetensors: tensor '" << name << "' (" << r.dtype << ", " << n << " elements) holds "
                                           << r.data.size() << " bytes, not " << n * d->size);
    items.push_back({&name, d->name, r.shape, r.data});
  }
  // As the reference `prepare`: by dtype, descending in its enum order (kDTypes: U64, I64,
  // F64, F32, U32, I32, BF16, ... BOOL), then by name. Largest elements first, so every
  // tensor starts aligned.
  const auto rank = [](const Item& i) { return find_dtype(i.dtype) - kDTypes; };
  std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    if (rank(a) != rank(b)) return rank(a) > rank(b);
    return *a.name < *b.name;
  });

  std::string& h = p.header;
  h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) h += ',';
      first = false;
      h += quoted(key, "a metadata key");
      h += ':';
      h += quoted(value, ("metadata '" + key + "'").c_str());
    }
    h += "}";
  }
  std::uint64_t offset = 0;
  for (const Item& item : items) {
    if (h.size() > 1) h += ',';
    h += quoted(*item.name, "a tensor name");
    h += ":{\"dtype\":\"";
    h += item.dtype;
    h += "\",\"shape\":[";
    for (std::size_t d = 0; d < item.shape.size(); ++d) {
      if (d > 0) h += ',';
      h += std::to_string(item.shape[d]);
    }
    const std::uint64_t bytes = item.data.size();
    h += "],\"data_offsets\":[";
    h += std::to_string(offset);
    h += ',';
    h += std::to_string(offset + bytes);
    h += "]}";
    offset += bytes;
    p.data.push_back(item.data);
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return p;
}

void append_u64(std::string* out, std::uint64_t v) {
  char bytes[8];
  std::memcpy(bytes, &v, 8);  // little-endian host
  out->append(bytes, 8);
}

}  // namespace

std::vector<std::byte> serialize_safetensors(
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata,
    const std::vector<std::pair<std::string, RawTensor>>& raw) {
  const Plan p = plan(tensors, metadata, raw);
  std::string prefix;
  append_u64(&prefix, p.header.size());
  prefix += p.header;
  std::vector<std::byte> out(reinterpret_cast<const std::byte*>(prefix.data()),
                             reinterpret_cast<const std::byte*>(prefix.data()) + prefix.size());
  for (const std::span<const std::byte> data : p.data) out.insert(out.end(), data.begin(), data.end());
  return out;
}

namespace {

void write_plan(AtomicFile& file, const Plan& p) {
  std::string prefix;
  append_u64(&prefix, p.header.size());
  prefix += p.header;
  file.write(prefix);
  for (const std::span<const std::byte> data : p.data)
    if (!data.empty()) file.write(data.data(), data.size());
}

}  // namespace

void save_safetensors(AtomicFile& file,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata,
                      const std::vector<std::pair<std::string, RawTensor>>& raw) {
  write_plan(file, plan(tensors, metadata, raw));
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata,
                      const std::vector<std::pair<std::string, RawTensor>>& raw) {
  const Plan p = plan(tensors, metadata, raw);  // bad names or tensors: refused before any file
  AtomicFile file(path, "save_safetensors");
  write_plan(file, p);
  file.commit();
}

}  // namespace qkv
