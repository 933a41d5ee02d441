// libFuzzer harness for the safetensors reader: SafeTensors::parse must either accept the
// bytes or throw qkv::Error; get() of every tensor it accepts must return a tensor whose
// bytes can all be read, or throw qkv::Error. Any other exception, crash or sanitizer
// report is a bug.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "qkv/error.h"
#include "qkv/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  qkv::SafeTensors st;
  try {
    st = qkv::SafeTensors::parse(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz");
  } catch (const qkv::Error&) {
    return 0;
  }
  for (const std::string& name : st.names()) {
    const qkv::TensorInfo& info = st.info(name);
    if (info.end < info.begin) __builtin_trap();  // validation must have rejected it
    try {
      const qkv::Tensor t = st.get(name);
      // Touch every byte so ASan sees any read outside the buffer.
      const auto* bytes = static_cast<const unsigned char*>(t.data());
      unsigned sum = 0;
      for (std::size_t i = 0; i < t.nbytes(); ++i) sum += bytes[i];
      if (t.numel() > 0 && t.to_vector().size() != static_cast<std::size_t>(t.numel()))
        __builtin_trap();
      (void)sum;
    } catch (const qkv::Error&) {
    }
  }
  return 0;
}
