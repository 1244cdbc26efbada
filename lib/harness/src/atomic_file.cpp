// Atomic file output: write a temporary file beside the target, then rename it into place, so a
// reader (or a crash) never sees a half-written report.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kda/harness/files.h"
#include "kda/harness/report.h"

namespace kda::harness {

namespace {

[[noreturn]] void fail_errno(const std::string& path, int error) {
  throw OutputError(fmt::format("cannot write {}: {}", path, std::strerror(error)));
}

[[noreturn]] void fail_exists(const std::string& path, const std::string& target) {
  if (target == path) throw OutputError(fmt::format("{} exists; pass --force to overwrite", path));
  throw OutputError(fmt::format("{} exists (a symbolic link to {}); pass --force to overwrite",
                                path, target));
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw OutputError(fmt::format("cannot write {}: {}", path, why));
}

// Where a write to `path` lands. A symbolic link is written through: the chain of links is
// followed to the file it ends at, which is replaced (or created) while the links stay. Anything
// that is not a regular file or a path that does not exist yet is refused: renaming a report
// over a device node, a FIFO or a socket would replace it with a regular file (as root even
// /dev/null), and writing into one is not what a report path means.
struct OutputTarget {
  std::string path;     // the file that will be written
  bool exists = false;  // it exists now (a regular file)
};

OutputTarget resolve_output(const std::string& path) {
  namespace fs = std::filesystem;
  constexpr int kMaxLinks = 40;  // the kernel's own limit (ELOOP)
  if (!fs::path(path).has_filename()) refuse(path, "it is a directory");
  fs::path target(path);
  for (int links = 0;; ++links) {
    struct stat info {};
    if (::lstat(target.c_str(), &info) != 0) {
      // Not there (or a parent is not a directory): a new file; check_output_file names what is
      // wrong with its directory, the writer gets the errno.
      if (errno == ENOENT || errno == ENOTDIR) return {target.string(), false};
      fail_errno(path, errno);
    }
    if (S_ISLNK(info.st_mode)) {
      if (links == kMaxLinks) refuse(path, "too many levels of symbolic links");
      std::error_code ec;
      const fs::path next = fs::read_symlink(target, ec);
      if (ec) fail_errno(path, ec.value());
      target = next.is_absolute() ? next : target.parent_path() / next;
      continue;
    }
    if (S_ISREG(info.st_mode)) return {target.string(), true};
    if (links == 0 && S_ISDIR(info.st_mode)) refuse(path, "it is a directory");
    const std::string what =
        links == 0 ? fmt::format("it is {}", file_kind(info.st_mode))
                   : fmt::format("it is a symbolic link to {}, which is {}", target.string(),
                                 file_kind(info.st_mode));
    refuse(path, what + "; outputs go to regular files (or new paths)");
  }
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

// Creates the temporary file, never following or opening what is already there under its name
// (a FIFO would block the open, a link would redirect it): a leftover of a run that died with
// our pid is removed first.
int create_temp(const std::string& temp) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(temp.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST && ::unlink(temp.c_str()) == 0) {
    fd = ::open(temp.c_str(), kFlags, 0644);
  }
  return fd;
}

}  // namespace

std::string check_output_file(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  if (path.empty()) throw OutputError("cannot write an empty path");
  const OutputTarget target = resolve_output(path);
  if (target.exists && !overwrite) fail_exists(path, target.path);
  const fs::path parent = fs::path(target.path).parent_path();
  const fs::path dir = parent.empty() ? fs::path(".") : parent;
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (status.type() == fs::file_type::not_found) {
    refuse(path, fmt::format("directory {} does not exist", dir.string()));
  }
  if (ec || !fs::is_directory(status)) {
    refuse(path, fmt::format("{} is not a directory", dir.string()));
  }
  // The writer creates a temporary file beside the target and renames it into place.
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    refuse(path,
           fmt::format("directory {} is not writable ({})", dir.string(), std::strerror(errno)));
  }
  return target.path;
}

void check_output_files(const std::vector<std::string>& paths, bool overwrite) {
  std::map<std::string, std::string> given;  // target -> the path that named it first
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    const auto [it, fresh] = given.emplace(check_output_file(path, overwrite), path);
    if (fresh) continue;
    if (it->second == path) throw OutputError(fmt::format("{} is given for two outputs", path));
    throw OutputError(fmt::format("{} is given for two outputs ({} names the same file)", path,
                                  it->second));
  }
}

void write_binary_file_atomic(const std::string& path, const void* data, size_t size,
                              bool overwrite) {
  if (path.empty()) throw OutputError("cannot write an empty path");
  const OutputTarget target = resolve_output(path);
  if (target.exists && !overwrite) fail_exists(path, target.path);
  const std::string temp = fmt::format("{}.tmp.{}", target.path, ::getpid());
  const int fd = create_temp(temp);
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
    if (::link(temp.c_str(), target.path.c_str()) == 0) {
      ::unlink(temp.c_str());
      return;
    }
    error = errno;
    struct stat info {};
    if (error == EEXIST || ::lstat(target.path.c_str(), &info) == 0) {
      ::unlink(temp.c_str());
      fail_exists(path, target.path);
    }
  }
  if (::rename(temp.c_str(), target.path.c_str()) != 0) {
    error = errno;
    ::unlink(temp.c_str());
    fail_errno(path, error);
  }
}

void write_text_file_atomic(const std::string& path, const std::string& content, bool overwrite) {
  write_binary_file_atomic(path, content.data(), content.size(), overwrite);
}

}  // namespace kda::harness
