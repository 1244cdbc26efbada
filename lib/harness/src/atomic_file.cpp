// Atomic file output: write a temporary file beside the target, then rename it into place, so a
// reader (or a crash) never sees a half-written report.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "kda/harness/report.h"

namespace kda::harness {

namespace {

[[noreturn]] void fail_errno(const std::string& path, int error) {
  throw OutputError(fmt::format("cannot write {}: {}", path, std::strerror(error)));
}

[[noreturn]] void fail_exists(const std::string& path) {
  throw OutputError(fmt::format("{} exists; pass --force to overwrite", path));
}

bool path_exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

// Writes all bytes, retrying short writes and EINTR. Returns 0 or an errno value.
int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return 0;
}

}  // namespace

void check_output_file(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  auto refuse = [&](const std::string& why) -> OutputError {
    return OutputError(fmt::format("cannot write {}: {}", path, why));
  };
  if (path.empty()) throw OutputError("cannot write an empty path");
  const fs::path target(path);
  std::error_code ec;
  if (fs::is_directory(target, ec) || !target.has_filename()) throw refuse("it is a directory");
  if (!overwrite && path_exists(path)) fail_exists(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::not_found) {
    throw refuse(fmt::format("directory {} does not exist", dir.string()));
  }
  if (ec || !fs::is_directory(status)) {
    throw refuse(fmt::format("{} is not a directory", dir.string()));
  }
  // The writer creates a temporary file beside the target and renames it into place.
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw refuse(
        fmt::format("directory {} is not writable ({})", dir.string(), std::strerror(errno)));
  }
}

void write_binary_file_atomic(const std::string& path, const void* data, size_t size,
                              bool overwrite) {
  if (!overwrite && path_exists(path)) fail_exists(path);
  const std::string temp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno(path, errno);

  int error = write_all(fd, static_cast<const char*>(data), size);
  // close() can report a delayed write error (NFS, quota): it counts as a failed write.
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    ::unlink(temp.c_str());
    fail_errno(path, error);
  }

  if (!overwrite) {
    // link() refuses an existing target atomically; a file system without hard links falls back
    // to a second existence check and rename (a tiny race we accept there).
    if (::link(temp.c_str(), path.c_str()) == 0) {
      ::unlink(temp.c_str());
      return;
    }
    error = errno;
    if (error == EEXIST || path_exists(path)) {
      ::unlink(temp.c_str());
      fail_exists(path);
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    error = errno;
    ::unlink(temp.c_str());
    fail_errno(path, error);
  }
}

void write_text_file_atomic(const std::string& path, const std::string& content, bool overwrite) {
  write_binary_file_atomic(path, content.data(), content.size(), overwrite);
}

}  // namespace kda::harness
