// libqkv_cuda.so's C functions (capi.h): the device form of the forward behind a plain
// struct, every exception turned into a return code and a message.
#include "attention/cuda/capi.h"

#include <cstring>
#include <exception>
#include <string>

#include "attention/cuda/check.h"

namespace {

void copy_message(const std::string& text, char* buffer, size_t size) {
  if (buffer == nullptr || size == 0) return;
  const size_t n = text.size() < size - 1 ? text.size() : size - 1;
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
}

qkv::cuda::Strides strides(const int64_t (&s)[3]) { return qkv::cuda::Strides{s[0], s[1], s[2]}; }

// The device form's arguments from the C struct.
qkv::cuda::DeviceAttention device_attention(const qkv_cuda_forward_args& args) {
  qkv::cuda::DeviceAttention a;
  a.dtype = args.dtype == 0 ? qkv::cuda::ElementType::bf16 : qkv::cuda::ElementType::f16;
  a.q = args.q, a.k = args.k, a.v = args.v, a.out = args.out, a.lse = args.lse;
  a.q_strides = strides(args.q_strides), a.k_strides = strides(args.k_strides);
  a.v_strides = strides(args.v_strides), a.out_strides = strides(args.out_strides);
  a.B = args.B, a.Hq = args.Hq, a.Hkv = args.Hkv, a.Lq = args.Lq, a.Lk = args.Lk, a.D = args.D;
  a.scale = static_cast<float>(args.scale);
  a.causal = args.causal != 0;
  a.alignment = args.bottom_right != 0 ? qkv::Alignment::bottom_right : qkv::Alignment::top_left;
  a.window_left = args.window_left, a.window_right = args.window_right;
  a.key_lengths = args.key_lengths;
  a.alibi_slopes = args.alibi_slopes;
  a.softcap = static_cast<float>(args.softcap);
  return a;
}

}  // namespace


// python/qkv/cuda.py mirrors the struct; a field added or moved must change both.
static_assert(sizeof(qkv_cuda_forward_args) == 272, "capi.h changed: update python/qkv/cuda.py and QKV_CUDA_ABI_VERSION");

extern "C" int qkv_cuda_abi_version(void) { return QKV_CUDA_ABI_VERSION; }

extern "C" int qkv_cuda_available(char* reason, size_t reason_size) {
  try {
    copy_message(qkv::cuda::unavailable_reason(), reason, reason_size);
    return qkv::cuda::available() ? 1 : 0;
  } catch (const std::exception& e) {
    copy_message(e.what(), reason, reason_size);
    return 0;
  }
}

extern "C" int qkv_cuda_attention_forward(const qkv_cuda_forward_args* args, char* error, size_t error_size) {
  try {
    if (args == nullptr) throw qkv::Error("qkv_cuda_attention_forward: args is NULL");
    qkv::cuda::detail::attention_forward_splits(device_attention(*args), static_cast<int>(args->splits),
                                                args->stream);
    copy_message("", error, error_size);
    return 0;
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_size);
    return 1;
  }
}

extern "C" int qkv_cuda_attention_backward(const qkv_cuda_backward_args* args, char* error, size_t error_size) {
  try {
    if (args == nullptr) throw qkv::Error("qkv_cuda_attention_backward: args is NULL");
    qkv::cuda::DeviceAttentionBackward a;
    a.forward = device_attention(args->forward);
    a.dout = args->dout;
    a.dout_strides = strides(args->dout_strides);
    a.dq = args->dq, a.dk = args->dk, a.dv = args->dv;
    qkv::cuda::attention_backward(a, args->forward.stream);
    copy_message("", error, error_size);
    return 0;
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_size);
    return 1;
  }
}
