// Checkpoints: the Hugging Face safetensors format.
//
// safetensors (https://github.com/huggingface/safetensors, "Format"):
//   8 bytes   N, little-endian u64: the size of the header
//   N bytes   a JSON object {name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
//             "__metadata__": {string: string} (optional)}
//   the rest  the data buffer; [b, e) are byte offsets into it, row-major, little-endian.
//
// Reading copies the file into one 64-byte-aligned allocation (it is not memory-mapped: a
// mapping faults with SIGBUS when the file is truncated while in use, and changes when the
// file is rewritten in place; a copy makes a loaded model the process's own) and validates
// the whole header before anything is returned: sizes, offsets, and that the tensors,
// sorted by offset, tile the data buffer exactly (no gaps, no overlaps, nothing after the
// last tensor), as the reference implementation demands. get() returns a zero-copy view
// into that buffer when the tensor's data is aligned to its element size (always, for files
// written by save_safetensors or the reference writer), else an owning copy. Views keep the
// buffer alive; a SafeTensors may be dropped while its tensors are in use. Treat views as
// read-only (they are shared by every get() of the name): clone() a tensor before modifying it.
//
// dtypes: F32, BF16, F16 and BOOL map to DType::f32, bf16, f16 and boolean (a nonzero BOOL
// byte reads as true). F64 is converted to f32 by get() (a copy; round to nearest, beyond
// the f32 range to ±inf). F64, I64, I32, I16, I8, U8, U16, U32, U64, F8_E4M3 and F8_E5M2
// are accepted in files and listed by names()/info(), but get() of any of them except F64
// throws Error(ErrorKind::type) naming the tensor and its dtype; callers skip such tensors
// by name (BERT checkpoints carry an I64 `position_ids`) or read their bytes() (and write
// them as RawTensor). F64 stays f32 on reading although
// DType::f64 exists: the models and layers that load checkpoints compute in f32, and f64
// serves only the reference attention path. save_safetensors writes DType::f64 as F64.
//
// Every malformed file throws qkv::Error naming the file (or the label given to parse()),
// the tensor when there is one, what was expected and what was found. A file that fails as
// safetensors and is recognisably something else (a Git LFS pointer, a PyTorch ZIP or
// pickle, GGUF, HDF5) is named as such, with how to get or convert the weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qkv/tensor.h"

namespace qkv {

class AtomicFile;  // qkv/files.h

// One entry of a safetensors header.
struct TensorInfo {
  std::string name;
  std::string dtype;        // as in the file: "F32", "BF16", "I64", ...
  Shape shape;              // may be empty (a 0-d scalar) or hold zeros (no elements)
  std::uint64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
  std::uint64_t end = 0;
};

// A tensor of a dtype qkv does not compute with (I32, U8, ...), as its bytes: written by
// save_safetensors beside the Tensors, read back with SafeTensors::bytes (the search index's
// BM25 postings, apps/search/bm25.h).
struct RawTensor {
  std::string dtype;            // a safetensors dtype name: "I32", "U8", ...
  Shape shape;
  std::vector<std::byte> data;  // numel(shape) elements, little-endian, row-major
};

class SafeTensors {
 public:
  // One .safetensors file, memory-mapped.
  static SafeTensors open(const std::string& path);
  // A Hugging Face model directory: dir/model.safetensors when it exists, else the shards
  // named by dir/model.safetensors.index.json ({"weight_map": {tensor: shard file}}). Each
  // shard is opened once; a shard that is missing, or that lacks a tensor the index maps to
  // it, is an error naming both. With an index, names() are exactly the index's tensors and
  // metadata() merges the shards' __metadata__ (on a conflict, the shard first in name
  // order wins). A directory with neither says which other checkpoint formats it holds
  // (pytorch_model.bin, tf_model.h5, flax_model.msgpack, GGUF) and how to convert them.
  static SafeTensors open_model(const std::string& dir);
  // Parses a safetensors image held in memory (tests, fuzzing). The bytes are copied into
  // a 64-byte-aligned buffer of its own, so `bytes` need not outlive the result.
  static SafeTensors parse(std::span<const std::byte> bytes, std::string label = "<memory>");

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  std::size_t size() const { return entries_.size(); }
  const TensorInfo& info(const std::string& name) const;  // throws naming a missing tensor
  // A view into the loaded file, or a copy (unaligned data, F64 → f32); see the top of the file.
  Tensor get(const std::string& name) const;
  // The bytes of any tensor, of any dtype, as in the file (a view that lives as long as this
  // SafeTensors; not necessarily aligned): how integer tensors are read.
  std::span<const std::byte> bytes(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Source;  // one mapped file or buffer (defined in safetensors.cpp)
  struct Entry {
    TensorInfo info;
    std::shared_ptr<const Source> source;
  };
  // Validates the image [image, image + size) and indexes its tensors; `keeper` owns it.
  static SafeTensors from_image(const std::byte* image, std::uint64_t size,
                                std::shared_ptr<void> keeper, const std::string& label);

  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (any strides; written row-major) and `metadata` as a safetensors file,
// byte for byte as the reference writer lays it out: a compact JSON header ("__metadata__"
// first, then the tensors in data order, keys "dtype", "shape", "data_offsets"), padded
// with spaces to a multiple of 8 bytes, then the data ordered by dtype (F64, F32, BF16,
// F16, BOOL: largest first, as the reference sorts) and then by name, so every tensor is
// aligned and reads back zero-copy. Metadata keys are written sorted.
// Names must be unique and not "__metadata__". The file is written whole or not at all
// (an AtomicFile, qkv/files.h: beside the target, fsynced, renamed over it).
// `raw` tensors are written as they are, placed among the others by their dtype.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const std::vector<std::pair<std::string, RawTensor>>& raw = {});
// The same into an AtomicFile the caller commits (a file of a ModelFiles directory).
void save_safetensors(AtomicFile& file,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const std::vector<std::pair<std::string, RawTensor>>& raw = {});
// The same bytes, in memory.
std::vector<std::byte> serialize_safetensors(
    const std::vector<std::pair<std::string, Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata = {},
    const std::vector<std::pair<std::string, RawTensor>>& raw = {});

}  // namespace qkv
