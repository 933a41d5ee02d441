// Process-wide memory policy for programs that run models in a loop.
#pragma once

namespace qkv {

// Every forward (and training step) allocates and frees the same activation sizes,
// megabytes each, again and again. glibc returns such blocks to the kernel (mmap'd
// blocks are unmapped, the heap top is trimmed), so every call faults the same pages in
// again: measured ~20% of a training step of the date model and ~12% of a BERT-base
// forward. This keeps freed memory in the process instead (mallopt: no mmap below
// 256 MiB, no trimming below 1 GiB). It changes the whole process's allocator, so the
// library never calls it by itself: the qkv tool and the benchmarks do, once, at start.
void retain_freed_memory();

}  // namespace qkv
