// expect_error: asserts that f throws ding::Error with `code` and a message containing every
// one of `parts` (the op name, the argument, the offending values).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "ding/error.h"

namespace ding::testing {

inline void expect_error(const std::function<void()>& f, ErrorCode code, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no ding::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

}  // namespace ding::testing
