// The attention tests' check of an error: the call throws qkv::Error of the given kind,
// and its message mentions `fragment`.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

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

}  // namespace qkv::testing
