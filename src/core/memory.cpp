#include "qkv/memory.h"

#include <malloc.h>

namespace qkv {

void retain_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace qkv
