// Report printers, the CSV reader, the atomic writer and number formatting.
#include <gtest/gtest.h>

#include <sys/stat.h>  // mkfifo
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "kda/harness/report.h"
#include "scratch.h"

namespace kda::harness {
namespace {

namespace fs = std::filesystem;
using test::put;
using test::scratch_dir;
using test::slurp;

std::string csv_error(const fs::path& path) {
  try {
    read_csv(path.string());
  } catch (const CsvError& e) {
    return e.what();
  }
  return "(read fine)";
}

// ---------------------------------------------------------------------------------------------
// Printers

TEST(Markdown, AlignsPipesAndRightAlignsNumbers) {
  const Table table{{"shape", "time (us)", "verdict"},
                    {{"h96-fixed", "123.4", "passed"}, {"edge-1", "5", "failed: a|b"}}};
  const std::string expected =
      "| shape     | time (us) | verdict      |\n"
      "| --------- | --------: | ------------ |\n"
      "| h96-fixed |     123.4 | passed       |\n"
      "| edge-1    |         5 | failed: a\\|b |\n";
  EXPECT_EQ(to_markdown(table), expected);
}

TEST(Markdown, CountsUtf8AsOneColumnAndRefusesRaggedRows) {
  const Table table{{"t", "x"}, {{"µs", "a\nb"}}};
  EXPECT_EQ(to_markdown(table),
            "| t   | x   |\n"
            "| --- | --- |\n"
            "| µs  | a b |\n");
  EXPECT_THROW(to_markdown(Table{{"a", "b"}, {{"1"}}}), std::invalid_argument);
  EXPECT_THROW(to_csv(Table{{"a", "b"}, {{"1", "2", "3"}}}), std::invalid_argument);
}

TEST(Csv, QuotesOnlyWhenNeeded) {
  const Table table{{"id", "note"},
                    {{"plain", "a,b"}, {"quote", "say \"hi\""}, {"newline", "x\ny"}, {"", ""}}};
  EXPECT_EQ(to_csv(table),
            "id,note\n"
            "plain,\"a,b\"\n"
            "quote,\"say \"\"hi\"\"\"\n"
            "newline,\"x\ny\"\n"
            ",\n");
  // A single empty field would be a blank line: it is quoted.
  EXPECT_EQ(to_csv(Table{{"only"}, {{""}}}), "only\n\"\"\n");
}

TEST(Csv, RoundTripsThroughAFile) {
  const fs::path dir = scratch_dir("csv_round_trip");
  const Table table{{"id", "value", "note, with comma"},
                    {{"h96-fixed", "1.5e-3", "multi\nline \"quoted\""},
                     {"", "", ""},
                     {"µ", "-0", " spaces kept "},
                     {"cr", "1", "a\r"}}};
  const fs::path path = dir / "t.csv";
  write_text_file_atomic(path.string(), to_csv(table), false);
  const Table back = read_csv(path.string());
  EXPECT_EQ(back.columns, table.columns);
  ASSERT_EQ(back.rows.size(), table.rows.size());
  EXPECT_EQ(back.rows, table.rows);

  const Table single{{"only"}, {{""}, {"x"}}};
  write_text_file_atomic((dir / "single.csv").string(), to_csv(single), false);
  EXPECT_EQ(read_csv((dir / "single.csv").string()).rows, single.rows);

  // A first cell that starts with a byte-order mark (which the reader skips at the start of a
  // file) is quoted, so it comes back whole (found by tests/fuzz/fuzz_csv).
  const Table bom{{"\xEF\xBB\xBF" "a", "b"}, {{"\xEF\xBB\xBF", "c"}}};
  EXPECT_EQ(to_csv(bom), "\"\xEF\xBB\xBF" "a\",b\n\xEF\xBB\xBF,c\n");
  const Table back_bom = parse_csv(to_csv(bom), "bom.csv");
  EXPECT_EQ(back_bom.columns, bom.columns);
  EXPECT_EQ(back_bom.rows, bom.rows);
}

TEST(Csv, ReaderAcceptsCrlfBomBlankLinesAndNoFinalNewline) {
  const fs::path dir = scratch_dir("csv_reader");
  put(dir / "a.csv", "\xEF\xBB\xBF" "a,b\r\n1,\"x\r\ny\"\r\n\r\n2,3");
  const Table t = read_csv((dir / "a.csv").string());
  EXPECT_EQ(t.columns, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0], (std::vector<std::string>{"1", "x\ny"}));
  EXPECT_EQ(t.rows[1], (std::vector<std::string>{"2", "3"}));
  put(dir / "header_only.csv", "a,b\n");
  EXPECT_TRUE(read_csv((dir / "header_only.csv").string()).rows.empty());
}

TEST(Csv, MalformedFilesNameFileLineAndProblem) {
  const fs::path dir = scratch_dir("csv_bad");
  put(dir / "count.csv", "a,b,c\n1,2,3\n4,5\n");
  EXPECT_CONTAINS(csv_error(dir / "count.csv"),
                  (dir / "count.csv").string() + ":3: row has 2 fields, expected 3");
  put(dir / "unterminated.csv", "a,b\n1,\"open\n2,3\n");
  EXPECT_CONTAINS(csv_error(dir / "unterminated.csv"), "unterminated.csv:2: unterminated quoted field");
  put(dir / "stray.csv", "a,b\n1,x\"y\n");
  EXPECT_CONTAINS(csv_error(dir / "stray.csv"), "stray.csv:2: quote inside an unquoted field");
  put(dir / "after.csv", "a,b\n1,\"x\"y\n");
  EXPECT_CONTAINS(csv_error(dir / "after.csv"), "after.csv:2: unexpected 'y' after a closing quote");
  // The line reported for a bad record is the line where the record starts.
  put(dir / "multiline.csv", "a,b\n\"1\n2\",3,4\n");
  EXPECT_CONTAINS(csv_error(dir / "multiline.csv"), "multiline.csv:2: row has 3 fields, expected 2");
  put(dir / "empty.csv", "");
  EXPECT_CONTAINS(csv_error(dir / "empty.csv"), "empty file, expected a header line");
  EXPECT_CONTAINS(csv_error(dir / "missing.csv"), "missing.csv: cannot open: No such file or directory");
}

TEST(Csv, ParsesTextLikeTheFileReaderAndRefusesBinary) {
  const fs::path dir = scratch_dir("csv_text");
  const std::string text = "shape_id,median_s\r\n\"a,b\",1e-3\n";
  put(dir / "t.csv", text);
  const Table from_file = read_csv((dir / "t.csv").string());
  const Table from_text = parse_csv(text, "t.csv");
  EXPECT_EQ(from_text.columns, from_file.columns);
  EXPECT_EQ(from_text.rows, from_file.rows);
  EXPECT_EQ(from_text.rows, (std::vector<std::vector<std::string>>{{"a,b", "1e-3"}}));
  // A short last row without a final line break: the file was cut off.
  EXPECT_CONTAINS(std::string([&] {
                    try {
                      parse_csv("a,b,c\n1,2,3\n4,5", "cut.csv");
                    } catch (const CsvError& e) {
                      return std::string(e.what());
                    }
                    return std::string("(read fine)");
                  }()),
                  "cut.csv:3: row has 2 fields, expected 3 (the header's count); the file ends "
                  "inside this row (truncated?)");
  // The line reader would silently end a line at a NUL byte: binary data is refused instead.
  put(dir / "nul.csv", std::string("a,b\n1,2\n3,\0", 11));
  EXPECT_CONTAINS(csv_error(dir / "nul.csv"), "nul.csv:3: a NUL byte (binary data, not CSV text)");
  EXPECT_CONTAINS(csv_error(dir), "cannot open: it is a directory");
}

// ---------------------------------------------------------------------------------------------
// Atomic writer

TEST(AtomicWrite, WritesRefusesClobberAndLeavesNoTemp) {
  const fs::path dir = scratch_dir("atomic");
  const std::string path = (dir / "report.md").string();
  write_text_file_atomic(path, "first\n", false);
  EXPECT_EQ(slurp(path), "first\n");
  try {
    write_text_file_atomic(path, "second\n", false);
    FAIL() << "expected OutputError";
  } catch (const OutputError& e) {
    EXPECT_EQ(std::string(e.what()), path + " exists; pass --force to overwrite");
  }
  EXPECT_EQ(slurp(path), "first\n");
  write_text_file_atomic(path, "third\n", true);
  EXPECT_EQ(slurp(path), "third\n");
  // Only the report is left: no temporary file from any of the three calls.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(AtomicWrite, UnwritableTargetsGiveTheReason) {
  const fs::path dir = scratch_dir("atomic_bad");
  try {
    write_text_file_atomic((dir / "no/such/dir/r.csv").string(), "x", true);
    FAIL() << "expected OutputError";
  } catch (const OutputError& e) {
    EXPECT_CONTAINS(e.what(), "cannot write " + (dir / "no/such/dir/r.csv").string() +
                                  ": No such file or directory");
  }
  // A directory in the way of the target: the rename fails, the temp file is removed.
  fs::create_directory(dir / "taken");
  fs::create_directory(dir / "taken" / "inner");
  EXPECT_THROW(write_text_file_atomic((dir / "taken").string(), "x", true), OutputError);
  EXPECT_THROW(write_text_file_atomic((dir / "taken").string(), "x", false), OutputError);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(AtomicWrite, CheckOutputFileRefusesUpFront) {
  const fs::path dir = scratch_dir("check_output");
  auto refusal = [](const fs::path& path, bool overwrite) {
    try {
      check_output_file(path.string(), overwrite);
    } catch (const OutputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(refusal(dir / "new.csv", false), "");
  put(dir / "old.csv", "x");
  EXPECT_EQ(refusal(dir / "old.csv", false), (dir / "old.csv").string() +
                                                 " exists; pass --force to overwrite");
  EXPECT_EQ(refusal(dir / "old.csv", true), "");
  EXPECT_EQ(refusal(dir, true), "cannot write " + dir.string() + ": it is a directory");
  EXPECT_EQ(refusal(dir.string() + "/", true),
            "cannot write " + dir.string() + "/: it is a directory");
  EXPECT_EQ(refusal(dir / "no" / "r.csv", true),
            "cannot write " + (dir / "no" / "r.csv").string() + ": directory " +
                (dir / "no").string() + " does not exist");
  EXPECT_EQ(refusal(dir / "old.csv" / "r.csv", true),
            "cannot write " + (dir / "old.csv" / "r.csv").string() + ": " +
                (dir / "old.csv").string() + " is not a directory");
  // Nothing was created by the checks.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(AtomicWrite, CheckOutputFileRefusesReadOnlyDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write into a read-only directory";
  const fs::path dir = scratch_dir("check_output_ro");
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  std::string message;
  try {
    check_output_file((dir / "r.csv").string(), true);
  } catch (const OutputError& e) {
    message = e.what();
  }
  fs::permissions(dir, fs::perms::owner_all);
  EXPECT_EQ(message, "cannot write " + (dir / "r.csv").string() + ": directory " + dir.string() +
                         " is not writable (Permission denied)");
}

// Issue 18, item 1: outputs go to regular files or new paths. A link is written through to the
// end of its chain (the link stays); a FIFO, a directory or a link to one is refused before
// anything is written, and left as it was. (A FIFO stands for /dev/null and other devices, which
// tests must not touch.)
std::string output_refusal(const fs::path& path, bool overwrite) {
  try {
    check_output_file(path.string(), overwrite);
  } catch (const OutputError& e) {
    return e.what();
  }
  return "";
}

TEST(AtomicWrite, RefusesFifosAndLinksToThem) {
  const fs::path dir = scratch_dir("atomic_fifo");
  const fs::path fifo = dir / "r.md";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string why = "cannot write " + fifo.string() +
                          ": it is a FIFO (named pipe); outputs go to regular files (or new paths)";
  EXPECT_EQ(output_refusal(fifo, true), why);
  EXPECT_THROW(write_text_file_atomic(fifo.string(), "x", true), OutputError);
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));  // not replaced by a regular file

  fs::create_symlink("r.md", dir / "link.md");
  EXPECT_EQ(output_refusal(dir / "link.md", true),
            "cannot write " + (dir / "link.md").string() + ": it is a symbolic link to " +
                fifo.string() + ", which is a FIFO (named pipe); outputs go to regular files (or "
                "new paths)");
  EXPECT_THROW(write_text_file_atomic((dir / "link.md").string(), "x", true), OutputError);
  EXPECT_TRUE(fs::is_symlink(dir / "link.md"));
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));

  fs::create_directory(dir / "sub");
  fs::create_symlink("sub", dir / "to_dir");
  EXPECT_EQ(output_refusal(dir / "to_dir", true),
            "cannot write " + (dir / "to_dir").string() + ": it is a symbolic link to " +
                (dir / "sub").string() + ", which is a directory; outputs go to regular files (or "
                "new paths)");
  // Nothing left behind by any of the refusals (no temporary file).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 4);
}

TEST(AtomicWrite, WritesThroughLinks) {
  const fs::path dir = scratch_dir("atomic_link");
  fs::create_directory(dir / "real");
  // To a file that does not exist yet: it is created there, without --force.
  fs::create_symlink("real/new.csv", dir / "new.csv");
  EXPECT_EQ(check_output_file((dir / "new.csv").string(), false), (dir / "real/new.csv").string());
  write_text_file_atomic((dir / "new.csv").string(), "one\n", false);
  EXPECT_TRUE(fs::is_symlink(dir / "new.csv"));
  EXPECT_EQ(slurp(dir / "real/new.csv"), "one\n");
  // To an existing file (through a chain of two links): replaced only with --force.
  fs::create_symlink("new.csv", dir / "chain.csv");
  EXPECT_EQ(output_refusal(dir / "chain.csv", false),
            (dir / "chain.csv").string() + " exists (a symbolic link to " +
                (dir / "real/new.csv").string() + "); pass --force to overwrite");
  EXPECT_THROW(write_text_file_atomic((dir / "chain.csv").string(), "two\n", false), OutputError);
  write_text_file_atomic((dir / "chain.csv").string(), "two\n", true);
  EXPECT_TRUE(fs::is_symlink(dir / "chain.csv") && fs::is_symlink(dir / "new.csv"));
  EXPECT_EQ(slurp(dir / "real/new.csv"), "two\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "real"), fs::directory_iterator()), 1);
  // A loop of links is refused, not followed forever.
  fs::create_symlink("loop_b", dir / "loop_a");
  fs::create_symlink("loop_a", dir / "loop_b");
  EXPECT_EQ(output_refusal(dir / "loop_a", true),
            "cannot write " + (dir / "loop_a").string() + ": too many levels of symbolic links");
}

TEST(AtomicWrite, ATempNameTakenByAFifoDoesNotBlock) {
  const fs::path dir = scratch_dir("atomic_temp_fifo");
  const fs::path target = dir / "r.json";
  const fs::path temp = dir / ("r.json.tmp." + std::to_string(::getpid()));
  ASSERT_EQ(::mkfifo(temp.c_str(), 0600), 0);
  write_text_file_atomic(target.string(), "{}\n", false);
  EXPECT_EQ(slurp(target), "{}\n");
  EXPECT_FALSE(fs::exists(temp));
}

// ---------------------------------------------------------------------------------------------
// Escaping text from user input (item 8)

TEST(Escape, ControlCharactersBecomeHexEscapes) {
  EXPECT_EQ(escape_controls("plain id-1.x, ünïcode"), "plain id-1.x, ünïcode");
  EXPECT_EQ(escape_controls("a\\x1b"), "a\\x1b");  // a backslash is not a control
  EXPECT_EQ(escape_controls("a\x1b[31mb\x07\x7f\tc\rd"), "a\\x1b[31mb\\x07\\x7f\\x09c\\x0dd");
  EXPECT_EQ(escape_controls(std::string("nul\0!", 5)), "nul\\x00!");
  EXPECT_EQ(escape_controls("two\nlines"), "two\nlines");  // messages keep their line breaks
  // U+009B (CSI) in UTF-8; U+00A0 (no-break space) is not a control.
  EXPECT_EQ(escape_controls("x\xc2\x9by\xc2\xa0z"), "x\\xc2\\x9by\xc2\xa0z");
}

TEST(Markdown, EscapesControlCharactersInCells) {
  const Table table{{"shape"}, {{"h96\x1b[2Jfixed"}, {"a\nb"}}};
  const std::string md = to_markdown(table);
  EXPECT_EQ(md.find('\x1b'), std::string::npos) << md;
  EXPECT_CONTAINS(md, "| h96\\x1b[2Jfixed |");
  EXPECT_CONTAINS(md, "| a b ");
}

// ---------------------------------------------------------------------------------------------
// Formatting

TEST(Format, SignificantDigits) {
  EXPECT_EQ(format_sig(1.0, 3), "1.00");
  EXPECT_EQ(format_sig(0.0123456, 3), "0.0123");
  EXPECT_EQ(format_sig(123.456, 3), "123");
  EXPECT_EQ(format_sig(9.996, 3), "10.0");
  EXPECT_EQ(format_sig(-2.5e-7, 2), "-2.5e-07");
  EXPECT_EQ(format_sig(1.5e9, 3), "1.50e+09");
  EXPECT_EQ(format_sig(0.0, 3), "0.00");
  EXPECT_EQ(format_sig(std::numeric_limits<double>::quiet_NaN(), 3), "nan");
  EXPECT_EQ(format_sig(-std::numeric_limits<double>::infinity(), 3), "-inf");
}

TEST(Format, SecondsPickTheUnit) {
  EXPECT_EQ(format_seconds(1.5), "1.50 s");
  EXPECT_EQ(format_seconds(0.0123), "12.3 ms");
  EXPECT_EQ(format_seconds(135.3e-6), "135 us");
  EXPECT_EQ(format_seconds(0.9999996e-3), "1.00 ms");  // would print "1000 us"
  EXPECT_EQ(format_seconds(4.2e-9), "4.20 ns");
  EXPECT_EQ(format_seconds(0.0), "0 s");
}

}  // namespace
}  // namespace kda::harness
