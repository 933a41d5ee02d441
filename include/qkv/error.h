// qkv::Error — the one exception type the library throws for bad input.
//
// A library never calls exit(). Every message names the argument, what was
// expected and what was given, e.g.
//   "scaled_dot_product_attention: k.size(3) (Dk) must equal q.size(3) = 64, got 32".
// `kind()` tells front ends how to surface it: Python maps `value` to ValueError, `type`
// to TypeError, `memory` to MemoryError and `interrupted` to KeyboardInterrupt; the CLI
// prints the message and exits non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace qkv {

enum class ErrorKind {
  value,        // a wrong size, range, option or file content
  type,         // a wrong dtype
  memory,       // more memory than the budget allows, or an allocation that failed
  interrupted,  // the caller asked a running computation to stop (Ctrl-C)
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, ErrorKind kind = ErrorKind::value)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace qkv

// QKV_CHECK(cond, "q.dim() must be 4, got " << q.dim());
// The message is only built when the check fails.
#define QKV_CHECK(cond, message)                                    \
  do {                                                              \
    if (!(cond)) {                                                  \
      std::ostringstream qkv_check_stream_;                         \
      qkv_check_stream_ << message;                                 \
      throw ::qkv::Error(qkv_check_stream_.str());                  \
    }                                                               \
  } while (0)

#define QKV_CHECK_KIND(cond, kind, message)                     \
  do {                                                          \
    if (!(cond)) {                                              \
      std::ostringstream qkv_check_stream_;                     \
      qkv_check_stream_ << message;                             \
      throw ::qkv::Error(qkv_check_stream_.str(), kind);        \
    }                                                           \
  } while (0)

#define QKV_CHECK_TYPE(cond, message)                                     \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::ostringstream qkv_check_stream_;                               \
      qkv_check_stream_ << message;                                       \
      throw ::qkv::Error(qkv_check_stream_.str(), ::qkv::ErrorKind::type); \
    }                                                                     \
  } while (0)
