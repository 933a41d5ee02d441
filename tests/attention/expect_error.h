// The tests' check of an error: the call throws qkv::Error of the given kind, and its
// message mentions `fragment`; or, for any kind, every one of several parts.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "qkv/error.h"

namespace qkv::testing {

inline void expect_error(const std::function<void()>& call, const std::string& fragment,
                         ErrorKind kind = ErrorKind::value) {
  try {
    call();
    ADD_FAILURE() << "no qkv::Error; expected one mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << fragment << "'";
    EXPECT_EQ(e.kind(), kind) << e.what();
  }
}

// The call throws qkv::Error, of any kind (a file's errors are not value errors), whose
// message mentions every one of `parts`.
inline void expect_error_mentioning(const std::function<void()>& call, const std::vector<std::string>& parts) {
  try {
    call();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "message \"" << message << "\" lacks \"" << part << "\"";
    return;
  }
  ADD_FAILURE() << "no qkv::Error thrown (expected one mentioning \"" << parts.front() << "\")";
}

}  // namespace qkv::testing
