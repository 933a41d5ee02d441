// Tensor storage: where Tensor::empty gets its memory. Internal: library users allocate
// through Tensor and control the cache behind it with qkv/memory.h.
#pragma once

#include <cstddef>
#include <memory>

namespace qkv {

// Blocks of this many bytes and more go through the storage cache (qkv/memory.h); smaller
// ones come from aligned_alloc and go back to it.
inline constexpr std::size_t kCachedStorageMin = std::size_t{128} << 10;

// `bytes` (rounded up to whole cache lines), 64-byte aligned, uninitialized. A request of
// kCachedStorageMin bytes or more is rounded up to whole pages and served by the smallest
// cached block of at most 1/4 more capacity when there is one; the block returns to the
// cache when the last owner drops it. Throws qkv::Error naming `who` when memory runs
// out, and naming QKV_STORAGE_CACHE_MB while that is malformed (see qkv/memory.h).
std::shared_ptr<void> allocate_storage(std::size_t bytes, const char* who);

}  // namespace qkv
