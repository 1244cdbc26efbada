// Regular-file input (files.h) and the readers built on it: anything that is not a regular file
// is refused before it is read, without blocking. FIFOs and links are made in a scratch
// directory; no test touches a device node.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kda/harness/files.h"
#include "kda/harness/npy.h"
#include "kda/harness/report.h"
#include "kda/harness/shapes.h"
#include "scratch.h"

namespace kda::harness {
namespace {

namespace fs = std::filesystem;
using test::put;
using test::scratch_dir;

std::string reason(const fs::path& path) {
  try {
    RegularFile file(path.string());
  } catch (const InputFileError& e) {
    return e.what();
  }
  return "(opened)";
}

// A FIFO with no writer: opening it for reading the usual way would block forever (the test
// would time out instead of failing fast, which is the behaviour being pinned).
fs::path make_fifo(const fs::path& path) {
  EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  return path;
}

TEST(RegularFile, ReadsRegularFilesOnly) {
  const fs::path dir = scratch_dir("regular_file");
  put(dir / "a.txt", "hello");
  RegularFile file((dir / "a.txt").string());
  EXPECT_EQ(file.size(), 5u);
  EXPECT_EQ(file.read_all(100), "hello");

  make_fifo(dir / "fifo");
  EXPECT_EQ(reason(dir / "fifo"), "it is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(reason(dir), "it is a directory");
  EXPECT_EQ(reason(dir / "missing"), "No such file or directory");
  // A link is followed: to a file it reads the file, to a FIFO it is refused like the FIFO.
  fs::create_symlink("a.txt", dir / "to_file");
  EXPECT_EQ(RegularFile((dir / "to_file").string()).read_all(100), "hello");
  fs::create_symlink("fifo", dir / "to_fifo");
  EXPECT_EQ(reason(dir / "to_fifo"), "it is a FIFO (named pipe), not a regular file");
}

TEST(RegularFile, ReadAllRefusesFilesLargerThanTheBound) {
  const fs::path dir = scratch_dir("regular_file_bound");
  put(dir / "big.txt", std::string(1000, 'x'));
  RegularFile file((dir / "big.txt").string());
  try {
    file.read_all(999);
    FAIL() << "expected InputFileError";
  } catch (const InputFileError& e) {
    EXPECT_STREQ(e.what(), "1000 bytes, more than the 999 this reader accepts");
  }
}

TEST(RegularFile, ShapeNpyAndCsvReadersRefuseAFifoWithoutBlocking) {
  const fs::path dir = scratch_dir("readers_fifo");
  const fs::path fifo = make_fifo(dir / "in");
  auto message = [](auto&& read) -> std::string {
    try {
      read();
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(read)";
  };
  EXPECT_EQ(message([&] { load_shape_file(fifo.string()); }),
            fifo.string() + ": cannot read shape file: it is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(message([&] { read_npy(fifo.string()); }),
            fifo.string() + ": cannot open: it is a FIFO (named pipe), not a regular file");
  EXPECT_EQ(message([&] { read_csv(fifo.string()); }),
            fifo.string() + ": cannot open: it is a FIFO (named pipe), not a regular file");
  // The readers' "it is a directory" wording is kept.
  EXPECT_EQ(message([&] { read_csv(dir.string()); }), dir.string() + ": cannot open: it is a directory");
}

TEST(RegularFile, KindNames) {
  EXPECT_STREQ(file_kind(S_IFREG), "a regular file");
  EXPECT_STREQ(file_kind(S_IFDIR), "a directory");
  EXPECT_STREQ(file_kind(S_IFIFO), "a FIFO (named pipe)");
  EXPECT_STREQ(file_kind(S_IFCHR), "a character device");
  EXPECT_STREQ(file_kind(S_IFBLK), "a block device");
  EXPECT_STREQ(file_kind(S_IFSOCK), "a socket");
  EXPECT_STREQ(file_kind(S_IFLNK), "a symbolic link");
}

}  // namespace
}  // namespace kda::harness
