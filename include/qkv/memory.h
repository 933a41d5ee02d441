// Process-wide memory policy: the memory limit every call is checked against before it
// allocates, the allocator setting for programs that run models in a loop, and the cache
// that tensor storage comes from.
#pragma once

#include <cstddef>

namespace qkv {

// The memory limit. Before a call allocates memory whose size follows from its input (an
// output from shapes, kernel scratch per thread, a temporary copy of an input), it adds the
// sizes up, with overflow-checked arithmetic, and compares the sum with this limit; over it,
// nothing is allocated and the call throws qkv::Error of ErrorKind::memory (Python:
// MemoryError) naming the bytes and what they were for. Any single tensor of 128 KiB or more
// is checked against it too. An allocation that fails all the same (memory taken by others)
// is also ErrorKind::memory, never std::bad_alloc or a crash.
// Default: 80% of the least of physical memory, the cgroup's memory limit (v2 memory.max,
// v1 memory.limit_in_bytes, of the process's cgroup and its ancestors) and the address-space
// limit (RLIMIT_AS, as `ulimit -v` or `prlimit --as` set it). The environment variable
// QKV_MEMORY_LIMIT (bytes, or with a suffix K, M, G or T for 2^10, 2^20, 2^30, 2^40:
// "8G", "512M") replaces the default, and set_memory_limit() replaces both. While
// QKV_MEMORY_LIMIT is malformed, memory_limit() and the calls it guards throw qkv::Error
// naming it (until set_memory_limit()).
std::size_t memory_limit();
void set_memory_limit(std::size_t bytes);  // bytes >= 1, else qkv::Error
void reset_memory_limit();                 // back to QKV_MEMORY_LIMIT, else the default
std::size_t default_memory_limit();        // the default, whatever overrides it

// Every forward (and training step) allocates and frees the same activation sizes,
// megabytes each, again and again. glibc returns such blocks to the kernel (mmap'd
// blocks are unmapped, the heap top is trimmed), so every call faults the same pages in
// again: measured ~20% of a training step of the date model and ~12% of a BERT-base
// forward. This keeps freed memory in the process instead (mallopt: no mmap below
// 256 MiB, no trimming below 1 GiB). It changes the whole process's allocator, so the
// library never calls it by itself: the qkv tool and the benchmarks do, once, at start.
void retain_freed_memory();

// The tensor storage cache. Blocks of 128 KiB and more that tensors free are kept and
// handed to the next tensor of about the same size (at most 1/4 larger), instead of
// going back to glibc, which unmaps them: the next tensor of that size then faults every
// page in again. That is what a call from Python paid for its output, which no
// retain_freed_memory() protects: 193 page faults per call, 2.88 ms against 2.42 with
// the cache for L = 512 (ONNX Runtime's arena and PyTorch's CUDA caching allocator exist for
// the same reason). The library-wide effect is bounded: the cache holds at most
// storage_cache_limit() bytes (256 MiB unless QKV_STORAGE_CACHE_MB says otherwise; 0
// turns it off), evicting the oldest blocks first. Thread-safe. While QKV_STORAGE_CACHE_MB
// is malformed, tensors of 128 KiB and more and storage_cache_limit() throw qkv::Error
// naming it (until set_storage_cache_limit() sets a limit).

// Bytes the cache holds now (blocks no tensor uses).
std::size_t cached_storage_bytes();
// Gives every cached block back to the allocator (torch.cuda.empty_cache's CPU twin).
void release_cached_storage();
// The cache's capacity in bytes; setting it evicts down to the new limit.
std::size_t storage_cache_limit();
void set_storage_cache_limit(std::size_t bytes);

}  // namespace qkv
