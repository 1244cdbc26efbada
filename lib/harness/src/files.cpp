// Regular-file input (files.h).
#include "kda/harness/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace kda::harness {

const char* file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

namespace {

// The reason a file of this type is refused ("it is a directory" stays short: it is the common
// mistake, and the wording the tools used before every other type was refused too).
std::string refusal(unsigned mode) {
  if (S_ISDIR(mode)) return "it is a directory";
  return fmt::format("it is {}, not a regular file", file_kind(mode));
}

}  // namespace

RegularFile::RegularFile(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) {
    const int error = errno;
    // Opening a socket fails (ENXIO): name what is there rather than the errno.
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
      throw InputFileError(refusal(info.st_mode));
    }
    throw InputFileError(std::strerror(error));
  }
  struct stat info {};
  if (::fstat(fd_, &info) != 0) {
    const int error = errno;
    ::close(fd_);
    throw InputFileError(std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    throw InputFileError(refusal(info.st_mode));
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RegularFile::read_exact(void* out, size_t n) {
  auto* bytes = static_cast<char*>(out);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd_, bytes + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputFileError(fmt::format("read error: {}", std::strerror(errno)));
    if (got == 0) {
      throw InputFileError(fmt::format(
          "read error after {} of {} bytes (file changed while reading?)", done, n));
    }
    done += static_cast<size_t>(got);
  }
}

std::string RegularFile::read_all(uint64_t max_bytes) {
  if (size_ > max_bytes) {
    throw InputFileError(
        fmt::format("{} bytes, more than the {} this reader accepts", size_, max_bytes));
  }
  std::string text(static_cast<size_t>(size_), '\0');
  read_exact(text.data(), text.size());
  return text;
}

}  // namespace kda::harness
