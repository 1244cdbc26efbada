// Reading the files a user hands the tools (shape files, .npy, CSV, meta.json): regular files
// only, checked on the open descriptor before a byte is read, so a FIFO, a device or a directory
// given by mistake is refused at once instead of blocking the reader or feeding it a stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kda::harness {

// A file could not be opened or read. The message is the reason alone ("No such file or
// directory", "it is a directory", "it is a FIFO (named pipe), not a regular file"); each reader
// puts the path and its own context around it.
class InputFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "a directory", "a FIFO (named pipe)", "a character device", "a block device", "a socket",
// "a symbolic link" or "a regular file", for a st_mode value.
const char* file_kind(unsigned mode);

// A regular file open for reading. The open is non-blocking (opening a FIFO that no writer holds
// would otherwise wait forever) and the type is taken from the descriptor itself, so the file
// that is checked is the file that is read.
class RegularFile {
 public:
  explicit RegularFile(const std::string& path);  // throws InputFileError
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;  // owns a file descriptor
  RegularFile& operator=(const RegularFile&) = delete;

  uint64_t size() const { return size_; }
  // Reads exactly n bytes; throws InputFileError when the file ends first or a read fails.
  void read_exact(void* out, size_t n);
  // The whole file; throws InputFileError when it is larger than max_bytes (a file this large
  // is not what the caller reads: say so before allocating it).
  std::string read_all(uint64_t max_bytes);

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole regular file at `path` (at most max_bytes); a refusal is thrown as the caller's error
// type, Error("<path>: <context>: <reason>").
template <class Error>
std::string read_regular_file(const std::string& path, uint64_t max_bytes,
                              std::string_view context) {
  try {
    return RegularFile(path).read_all(max_bytes);
  } catch (const InputFileError& e) {
    throw Error(path + ": " + std::string(context) + ": " + e.what());
  }
}

}  // namespace kda::harness
