// Helpers the harness tests share: a fresh scratch directory under the build tree (tests never
// write anywhere else), whole-file reads and writes, and a substring expectation.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

namespace kda::harness::test {

// KDA_TEST_SCRATCH_DIR/<suite>.<test>/<name>, emptied. One directory per test: ctest runs the
// tests of one binary as parallel processes, and two of them must never share a name.
inline std::filesystem::path scratch_dir(const std::string& name) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string owner =
      test ? std::string(test->test_suite_name()) + "." + test->name() : std::string("no-test");
  const std::filesystem::path dir = std::filesystem::path(KDA_TEST_SCRATCH_DIR) / owner / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void put(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace kda::harness::test

#define EXPECT_CONTAINS(text, fragment) \
  EXPECT_NE(std::string(text).find(fragment), std::string::npos) << (text)
