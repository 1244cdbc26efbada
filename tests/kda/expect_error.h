// Shared by the host-validation tests of the library and of the lab: fake device pointers (never
// dereferenced: validation runs before any CUDA call) and a check that a call throws kda::Error
// with a given code and message fragment.
#pragma once

#include <gtest/gtest.h>
#include <kda/kda.h>

#include <cstdint>
#include <string>

namespace kda::test {

template <class T = void>
T* fake(uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

// Calls `call` and checks that it throws kda::Error with `code` and a message containing
// `fragment`.
template <class Call>
void expect_error(Call call, ErrorCode code, const std::string& fragment) {
  try {
    call();
    ADD_FAILURE() << "expected kda::Error containing \"" << fragment << "\", nothing thrown";
  } catch (const kda::Error& error) {
    EXPECT_EQ(static_cast<int>(error.code()), static_cast<int>(code)) << error.what();
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos)
        << "message: " << error.what() << "\nexpected fragment: " << fragment;
  }
}

}  // namespace kda::test
