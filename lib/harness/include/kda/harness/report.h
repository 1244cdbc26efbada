// Report writers: one table model, several printers (markdown, CSV), a CSV reader for frozen
// results and baselines, atomic file output and number formatting. Pure CPU.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kda::harness {

// A result table: every row has exactly columns.size() cells, already formatted as text.
struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

// Output could not be written (exists without --force, unwritable directory, disk full...).
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A CSV file could not be read; the message names the file, the line and the problem.
class CsvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// GitHub-flavoured markdown with the pipes aligned. Columns whose cells are all numbers are
// right-aligned. '|' in a cell is escaped, line breaks become spaces, other control characters
// are written as \xNN (escape_controls). Throws std::invalid_argument when a row's cell count
// differs from the column count.
std::string to_markdown(const Table& table);

// `text` with every byte a terminal could act on written as \xNN: the C0 controls but '\n', DEL,
// and the UTF-8 encodings of the C1 controls (U+0080..U+009F). For text from user input (ids,
// paths, CSV cells, messages that quote them) on its way to a terminal or a markdown report.
std::string escape_controls(std::string_view text);

// RFC 4180: fields with a comma, quote, CR or LF are quoted, quotes doubled; "\n" line ends; the
// header line first. Throws std::invalid_argument on a ragged row.
std::string to_csv(const Table& table);

// Reads a CSV file written by to_csv (or by hand): RFC 4180 quoting, fields may span lines, CRLF
// accepted (a CR LF line break inside a quoted field reads as "\n"), blank lines between records
// skipped, a UTF-8 BOM ignored. The first record is the header; every other record must have as
// many fields. Throws CsvError.
Table read_csv(const std::string& path);
// The same reader on the text of a whole CSV file; `name_for_messages` stands for the path. Text
// with a NUL byte is refused (binary data).
Table parse_csv(std::string_view text, const std::string& name_for_messages);

// Writes `content` to `path` through `<path>.tmp.<pid>` + rename, so readers never see a partial
// file. Refuses to replace an existing file unless overwrite is true ("<path> exists; pass --force
// to overwrite"). Only a regular file or a new path is written: a symbolic link is written
// through (the file at the end of its chain is replaced or created, the link stays); a directory,
// FIFO, socket or device, or a link to one, is refused. Throws OutputError naming the path and
// the reason (strerror); never leaves the temporary file behind.
void write_text_file_atomic(const std::string& path, const std::string& content, bool overwrite);

// Checks, before a long run, that write_text_file_atomic(path, ..., overwrite) can succeed, and
// returns the file it will write (`path`, or the end of its chain of symbolic links): the path
// names a regular file or nothing yet (not a directory, FIFO, socket or device), it does not
// exist unless overwrite is true, and its directory exists and is writable. Throws OutputError:
// "<path> exists; pass --force to overwrite", "cannot write <path>: it is a directory", "... it is
// a FIFO (named pipe); outputs go to regular files (or new paths)", "... it is a symbolic link to
// <target>, which is ...", "... directory <dir> does not exist", "... <dir> is not a directory",
// "... directory <dir> is not writable (<why>)".
std::string check_output_file(const std::string& path, bool overwrite);
// check_output_file for each non-empty path of a run's outputs, and no two of them one file (the
// same path, or links that end at one file): "<path> is given for two outputs", with " (<other>
// names the same file)" when the other spelling differs.
void check_output_files(const std::vector<std::string>& paths, bool overwrite);

// Same, for raw bytes (used by the .npy writer).
void write_binary_file_atomic(const std::string& path, const void* data, size_t size,
                              bool overwrite);

// "1.93 GiB": bytes in GiB with two decimals (memory needs and what is free).
std::string format_gib(size_t bytes);

// "1.23 s", "45.6 ms", "789 us", "12.0 ns": three significant digits, unit chosen by magnitude.
std::string format_seconds(double seconds);

// `digits` significant digits, trailing zeros kept ("1.00"); fixed notation for magnitudes in
// [1e-4, 1e6), scientific ("1.23e-07") outside. Non-finite values print as "nan", "inf", "-inf".
std::string format_sig(double value, int digits);

}  // namespace kda::harness
