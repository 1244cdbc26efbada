// Shared by the host-validation tests of the library and of the lab: fake device pointers (never
// dereferenced: validation runs before any CUDA call), a valid dense forward call on them, and a
// check that a call throws kda::Error with a given code and message fragment.
#pragma once

#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <kda/kda.h>

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

// A valid dense chunk_forward call (B = 2, T = 130, H = 2) on fake, aligned pointers; the caller
// sets workspace_bytes for the forward it validates (the library's or a lab variant's).
inline kda::ForwardParams dense_forward_on_fake_pointers() {
  kda::ForwardParams p;
  p.q = fake(0x100000);
  p.k = fake(0x200000);
  p.v = fake(0x300000);
  p.gate = fake<const float>(0x400000);
  p.beta = fake<const float>(0x500000);
  p.out = fake(0x600000);
  p.batch = 2;
  p.tokens = 130;
  p.heads = 2;
  p.workspace = fake(0x10000000);
  return p;
}

}  // namespace kda::test
