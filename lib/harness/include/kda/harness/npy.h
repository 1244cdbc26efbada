// NumPy .npy interchange (format 1.0, little-endian, C order): float32, float64, int32.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kda::harness {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class NpyType { f32, f64, i32 };
const char* to_string(NpyType type);  // "float32", "float64", "int32"

struct NpyArray {
  NpyType type = NpyType::f32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // raw little-endian data
  int64_t size() const;
  std::vector<float> as_f32() const;    // throws unless type == f32
  std::vector<double> as_f64() const;   // f32 or f64 widened
  std::vector<int32_t> as_i32() const;  // throws unless type == i32
};

// Written atomically (temp file + rename).
void write_npy(const std::string& path, const std::vector<float>& data, const std::vector<int64_t>& shape);
void write_npy(const std::string& path, const std::vector<double>& data, const std::vector<int64_t>& shape);
void write_npy(const std::string& path, const std::vector<int32_t>& data, const std::vector<int64_t>& shape);
// Throws NpyError naming the file and what is wrong (magic, version, dtype, order, shape,
// truncation, trailing bytes). Every length in the file is checked against the file's size
// before anything is allocated, so a corrupted header cannot make the reader allocate more than
// the file holds.
NpyArray read_npy(const std::string& path);
// The same reader on the bytes of a whole .npy file; `name_for_messages` stands for the path.
NpyArray parse_npy(std::string_view bytes, const std::string& name_for_messages);

}  // namespace kda::harness
