// What the binding files share: allocation failures named after what a binding was doing.
#pragma once

#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "qkv/error.h"

namespace qkv_python {

// f(); a std::bad_alloc or std::length_error inside becomes qkv::Error(ErrorKind::memory)
// "<what>: out of memory", which Python receives as MemoryError. `what` says what was
// being done and on how much ("Tokenizer.encode of a text of 104857600 bytes"): the
// library's own allocations report their sizes themselves, but containers do not.
template <class F>
auto naming_allocations(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return std::forward<F>(f)();
  } catch (const std::bad_alloc&) {  // its what() is only the type's name
    throw qkv::Error(what + ": out of memory", qkv::ErrorKind::memory);
  } catch (const std::length_error& e) {
    throw qkv::Error(what + ": out of memory: more than a container can hold (" + e.what() + ")",
                     qkv::ErrorKind::memory);
  }
}

}  // namespace qkv_python
