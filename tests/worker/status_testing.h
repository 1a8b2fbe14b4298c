// GoogleTest helpers for the worker's Status-returning API: assert a call succeeded (printing
// its Status when it did not), take a StatusOr's value, and match an error by code and message.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "phub/common/status.h"

namespace phub::worker::testing {

inline const Status& StatusOf(const Status& s) { return s; }
template <class T>
const Status& StatusOf(const StatusOr<T>& s) {
  return s.status();
}

template <class S>
::testing::AssertionResult IsOk(const char* expr, const S& s) {
  const Status& status = StatusOf(s);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr << " failed: " << status;
}

// The value of a StatusOr a test helper needs (one that cannot ASSERT: it returns a value);
// records the failure and aborts the test binary when there is none.
template <class T>
T ValueOrDie(StatusOr<T> s, const char* what = "") {
  if (!s.ok()) {
    ADD_FAILURE() << what << " failed: " << s.status();
    std::abort();
  }
  return *std::move(s);
}

// Matches a Status or StatusOr whose code is `code` and whose message matches `message`.
MATCHER_P2(StatusIs, code, message,
           std::string("is a status with code ") + absl::StatusCodeToString(code)) {
  const Status& s = StatusOf(arg);
  *result_listener << "which is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message, std::string(s.message()), result_listener);
}

}  // namespace phub::worker::testing

#define PHUB_ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::phub::worker::testing::IsOk, expr)
#define PHUB_EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::phub::worker::testing::IsOk, expr)
// Declares (or assigns) lhs from a StatusOr, failing the test (ASSERT) if it holds an error.
#define PHUB_ASSERT_OK_AND_ASSIGN(lhs, expr)             \
  auto PHUB_CONCAT_(phub_test_or_, __LINE__) = (expr);   \
  PHUB_ASSERT_OK(PHUB_CONCAT_(phub_test_or_, __LINE__)); \
  lhs = std::move(*PHUB_CONCAT_(phub_test_or_, __LINE__))
