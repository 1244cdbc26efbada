// .npy: exact header layout, round trips of the three dtypes in several ranks, and one clear
// error per kind of corrupted file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kda/harness/npy.h"

namespace kda::harness {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  const fs::path dir = fs::path(KDA_TEST_SCRATCH_DIR) / "npy";
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string read_error(const std::string& path) {
  try {
    read_npy(path);
  } catch (const NpyError& e) {
    return e.what();
  }
  return "(read fine)";
}

TEST(Npy, HeaderIsNumpyFormat10PaddedTo64) {
  const std::string path = scratch("header.npy");
  write_npy(path, std::vector<float>{1, 2, 3, 4, 5}, {5});
  const std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(bytes[6], 1);
  EXPECT_EQ(bytes[7], 0);
  const size_t header_len = static_cast<unsigned char>(bytes[8]) + 256u * static_cast<unsigned char>(bytes[9]);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = bytes.substr(10, header_len);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", 0), 0u) << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + 5 * sizeof(float));
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST(Npy, RoundTripsAllDtypesAndRanks) {
  // float32, 3-D
  std::vector<float> f32(2 * 3 * 4);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.5f - 3.0f;
  write_npy(scratch("f32.npy"), f32, {2, 3, 4});
  NpyArray a = read_npy(scratch("f32.npy"));
  EXPECT_EQ(a.type, NpyType::f32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(a.size(), 24);
  EXPECT_EQ(a.as_f32(), f32);
  EXPECT_EQ(a.as_f64(), std::vector<double>(f32.begin(), f32.end()));
  EXPECT_THROW(a.as_i32(), NpyError);

  // float64, 0-D (a scalar) and 1-D
  write_npy(scratch("f64_scalar.npy"), std::vector<double>{3.25}, {});
  a = read_npy(scratch("f64_scalar.npy"));
  EXPECT_EQ(a.type, NpyType::f64);
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(a.size(), 1);
  EXPECT_EQ(a.as_f64(), std::vector<double>{3.25});
  EXPECT_THROW(a.as_f32(), NpyError);
  EXPECT_NE(read_bytes(scratch("f64_scalar.npy")).find("'shape': ()"), std::string::npos);

  const std::vector<double> f64 = {1e-300, -0.0, 1.0 / 3.0, 6.02e23};
  write_npy(scratch("f64.npy"), f64, {4});
  a = read_npy(scratch("f64.npy"));
  EXPECT_EQ(a.shape, std::vector<int64_t>{4});
  EXPECT_EQ(a.as_f64(), f64);

  // int32, 2-D, and an empty array
  const std::vector<int32_t> i32 = {0, 65, 65, 128, -7, 2147483647};
  write_npy(scratch("i32.npy"), i32, {2, 3});
  a = read_npy(scratch("i32.npy"));
  EXPECT_EQ(a.type, NpyType::i32);
  EXPECT_EQ(a.as_i32(), i32);
  EXPECT_THROW(a.as_f64(), NpyError);

  write_npy(scratch("empty.npy"), std::vector<float>{}, {0, 128});
  a = read_npy(scratch("empty.npy"));
  EXPECT_EQ(a.shape, (std::vector<int64_t>{0, 128}));
  EXPECT_EQ(a.size(), 0);
  EXPECT_TRUE(a.as_f32().empty());

  // Overwriting an existing file is allowed (atomic replace).
  write_npy(scratch("f64.npy"), std::vector<double>{1.0}, {1});
  EXPECT_EQ(read_npy(scratch("f64.npy")).as_f64(), std::vector<double>{1.0});
}

TEST(Npy, WriterRefusesMismatchedShapeAndUnwritablePath) {
  EXPECT_THROW(write_npy(scratch("bad.npy"), std::vector<float>{1, 2, 3}, {2, 2}), NpyError);
  EXPECT_THROW(write_npy(scratch("bad.npy"), std::vector<float>{1, 2}, {-1, -2}), NpyError);
  try {
    write_npy("/nonexistent/dir/x.npy", std::vector<float>{1}, {1});
    FAIL() << "expected NpyError";
  } catch (const NpyError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/x.npy: No such file or directory"),
              std::string::npos)
        << e.what();
  }
}

// Writes a good float32 file, applies `edit` to its bytes and returns the reader's message.
template <class Edit>
std::string corrupted(const std::string& name, Edit edit) {
  const std::string path = scratch(name);
  write_npy(path, std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  std::string bytes = read_bytes(path);
  edit(bytes);
  write_bytes(path, bytes);
  return read_error(path);
}

void replace_once(std::string& bytes, const std::string& from, const std::string& to) {
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, from.size(), to);
}

#define EXPECT_CONTAINS(text, fragment) \
  EXPECT_NE(std::string(text).find(fragment), std::string::npos) << (text)

TEST(Npy, CorruptedFilesGiveClearErrors) {
  EXPECT_CONTAINS(corrupted("magic.npy", [](std::string& b) { b[1] = 'X'; }), "bad magic");
  EXPECT_CONTAINS(corrupted("magic.npy", [](std::string& b) { b[1] = 'X'; }), "magic.npy");
  EXPECT_CONTAINS(corrupted("version.npy", [](std::string& b) { b[6] = 3; }),
                  "unsupported .npy version 3.0");
  EXPECT_CONTAINS(corrupted("f2.npy", [](std::string& b) { replace_once(b, "'<f4'", "'<f2'"); }),
                  "unsupported dtype '<f2'");
  EXPECT_CONTAINS(corrupted("be.npy", [](std::string& b) { replace_once(b, "'<f4'", "'>f4'"); }),
                  "unsupported dtype '>f4'");
  EXPECT_CONTAINS(corrupted("fortran.npy", [](std::string& b) { replace_once(b, "False", "True "); }),
                  "fortran_order True is not supported");
  EXPECT_CONTAINS(corrupted("parse.npy", [](std::string& b) { replace_once(b, "'shape': (", "'shape': ["); }),
                  "header parse error");
  EXPECT_CONTAINS(corrupted("key.npy", [](std::string& b) { replace_once(b, "'descr'", "'dtype'"); }),
                  "header parse error");
  EXPECT_CONTAINS(corrupted("truncated.npy", [](std::string& b) { b.resize(b.size() - 4); }),
                  "data truncated: expected 24 bytes, got 20");
  EXPECT_CONTAINS(corrupted("trailing.npy", [](std::string& b) { b += "junk"; }),
                  "trailing garbage: 4 bytes after the data");
  EXPECT_CONTAINS(corrupted("short.npy", [](std::string& b) { b.resize(30); }), "header truncated");
  EXPECT_CONTAINS(corrupted("tiny.npy", [](std::string& b) { b.resize(3); }), "bad magic");
  EXPECT_CONTAINS(read_error(scratch("does-not-exist.npy")), "cannot open");
}

// A preamble (format 1.0 or 2.0) followed by `header` verbatim and `data`.
std::string npy_bytes(int major, const std::string& header, const std::string& data = "") {
  std::string bytes("\x93NUMPY", 6);
  bytes.push_back(static_cast<char>(major));
  bytes.push_back('\0');
  const size_t length_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < length_bytes; ++i) {
    bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xFF));
  }
  return bytes + header + data;
}

std::string parse_error(const std::string& bytes) {
  try {
    parse_npy(bytes, "mem.npy");
  } catch (const NpyError& e) {
    return e.what();
  }
  return "(read fine)";
}

TEST(Npy, ParsesBytesLikeTheFileReader) {
  const std::string path = scratch("bytes.npy");
  write_npy(path, std::vector<int32_t>{0, 3, 3, 7}, {4});
  const NpyArray from_file = read_npy(path);
  const NpyArray from_bytes = parse_npy(read_bytes(path), "bytes.npy");
  EXPECT_EQ(from_bytes.type, NpyType::i32);
  EXPECT_EQ(from_bytes.shape, from_file.shape);
  EXPECT_EQ(from_bytes.as_i32(), (std::vector<int32_t>{0, 3, 3, 7}));
  // Format 2.0 (4-byte header length), as numpy writes for long headers.
  const std::string v2 = npy_bytes(2, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n",
                                    std::string(8, '\0'));
  EXPECT_EQ(parse_npy(v2, "v2.npy").as_f64(), std::vector<double>{0.0});
}

// Lengths and shapes in a header are checked against the bytes that are there before anything is
// allocated: a few bytes can claim gigabytes, they must cost nothing (the fuzz target checks the
// same with a 128 MiB allocation limit).
TEST(Npy, ClaimsLargerThanTheFileAreRefusedBeforeAllocating) {
  std::string huge_header = npy_bytes(2, "{}");
  huge_header[8] = huge_header[9] = huge_header[10] = huge_header[11] = '\xFF';
  EXPECT_CONTAINS(parse_error(huge_header),
                  "mem.npy: header truncated: expected 4294967295 bytes, got 2");
  EXPECT_CONTAINS(parse_error(npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': "
                                           "(1099511627776, 1024), }\n")),
                  "mem.npy: data truncated: expected 4503599627370496 bytes, got 0");
  EXPECT_CONTAINS(parse_error(npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': "
                                           "(4294967296, 4294967296), }\n")),
                  "shape too large");
  EXPECT_CONTAINS(parse_error(npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': "
                                           "(99999999999999999999,), }\n")),
                  "integer too large");
  // A real but absurdly long header (numpy never writes one over a few hundred bytes).
  const std::string scalar = "{'descr': '<f4', 'fortran_order': False, 'shape': (), }";
  EXPECT_CONTAINS(parse_error(npy_bytes(2, scalar + std::string(70000, ' ') + "\n", "abcd")),
                  "header of 70056 bytes is longer than the 65536 this reader accepts");
}

TEST(Npy, MessagesShowBinaryHeadersEscapedAndShort) {
  EXPECT_CONTAINS(
      parse_error(npy_bytes(1, "{'descr': '\x01\xFF', 'fortran_order': False, 'shape': (), }")),
      "unsupported dtype '\\x01\\xff'");
  const std::string parse = parse_error(npy_bytes(1, "{\x1b[31m" + std::string(500, 'x') + "}"));
  EXPECT_CONTAINS(parse,
                  "header parse error at offset 1: expected a quoted string (header: {\\x1b[31mxxx");
  EXPECT_CONTAINS(parse, "... (507 bytes)");
  EXPECT_EQ(parse.find('\x1b'), std::string::npos);
  EXPECT_CONTAINS(read_error(fs::path(KDA_TEST_SCRATCH_DIR).string()),
                  "cannot open: it is a directory");
}

}  // namespace
}  // namespace kda::harness
