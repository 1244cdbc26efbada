// Table printers (markdown, CSV), the CSV reader and number formatting.
#include "kda/harness/report.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "kda/harness/files.h"

namespace kda::harness {

namespace {

void check_rectangular(const Table& table, const char* printer) {
  for (size_t r = 0; r < table.rows.size(); ++r) {
    if (table.rows[r].size() != table.columns.size()) {
      throw std::invalid_argument(fmt::format("{}: row {} has {} cells, the table has {} columns",
                                              printer, r, table.rows[r].size(),
                                              table.columns.size()));
    }
  }
}

// Display width of UTF-8 text: code points (continuation bytes 10xxxxxx don't count).
size_t display_width(const std::string& text) {
  size_t width = 0;
  for (unsigned char c : text) width += (c & 0xC0) != 0x80;
  return width;
}

std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return escape_controls(out);
}

bool looks_numeric(const std::string& text) {
  double value = 0.0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

std::string csv_field(const std::string& text, bool always_quote) {
  if (!always_quote && text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

void append_csv_record(std::string& out, const std::vector<std::string>& fields) {
  // A lone empty field would be a blank line, which the reader skips: quote it.
  if (fields.size() == 1 && fields[0].empty()) {
    out += "\"\"\n";
    return;
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    // The reader skips a byte-order mark at the very start of a file: a first cell that starts
    // with one is quoted so that it survives (found by tests/fuzz/fuzz_csv).
    const bool starts_file = i == 0 && out.empty() && fields[i].rfind("\xEF\xBB\xBF", 0) == 0;
    if (i > 0) out += ',';
    out += csv_field(fields[i], starts_file);
  }
  out += '\n';
}

// RFC 4180 record splitter fed one physical line at a time (a quoted field may span lines).
class CsvRecordParser {
 public:
  explicit CsvRecordParser(const std::string& path) : path_(path) {}

  // Consumes a line; returns true when it completed a record (then take it with record()).
  bool feed(std::string_view line, unsigned line_number) {
    if (!in_record_) {
      fields_.clear();
      field_.clear();
      quoted_ = false;
      start_line_ = line_number;
      in_record_ = true;
    } else {
      field_ += '\n';  // the line break inside a quoted field
    }
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (in_quotes_) {
        if (c != '"') {
          field_ += c;
        } else if (i + 1 < line.size() && line[i + 1] == '"') {
          field_ += '"';
          ++i;
        } else {
          in_quotes_ = false;
        }
      } else if (c == ',') {
        end_field();
      } else if (c == '"') {
        if (quoted_ || !field_.empty()) error(line_number, "quote inside an unquoted field");
        in_quotes_ = quoted_ = true;
      } else {
        if (quoted_) error(line_number, fmt::format("unexpected '{}' after a closing quote", c));
        field_ += c;
      }
    }
    if (in_quotes_) return false;
    end_field();
    in_record_ = false;
    return true;
  }

  bool inside_quotes() const { return in_quotes_; }
  unsigned start_line() const { return start_line_; }
  std::vector<std::string>& record() { return fields_; }

  [[noreturn]] void error(unsigned line, const std::string& what) const {
    throw CsvError(fmt::format("{}:{}: {}", path_, line, what));
  }

 private:
  void end_field() {
    fields_.push_back(std::move(field_));
    field_.clear();
    quoted_ = false;
  }

  const std::string& path_;
  std::vector<std::string> fields_;
  std::string field_;
  bool in_record_ = false;
  bool in_quotes_ = false;
  bool quoted_ = false;  // the current field was quoted and its closing quote was seen
  unsigned start_line_ = 0;
};

// Splits text into lines the way CSV files are written: '\n' ends a line, a '\r' before it is
// dropped (CRLF files), a last line without '\n' still counts, a UTF-8 byte-order mark at the
// start is skipped. Lines are numbered from 1.
class LineSplitter {
 public:
  explicit LineSplitter(std::string_view text) : text_(text) {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
  }
  bool at_end() const { return pos_ >= text_.size(); }
  unsigned line_number() const { return line_number_; }
  // The next line, or false at the end of the text.
  bool next(std::string_view* line) {
    if (at_end()) return false;
    size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    *line = text_.substr(pos_, end - pos_);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    pos_ = end + 1;
    ++line_number_;
    return true;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  unsigned line_number_ = 0;
};

}  // namespace

std::string escape_controls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c0 = (c < 0x20 && c != '\n') || c == 0x7F;
    // U+0080..U+009F in UTF-8 (C2 80..C2 9F): terminals that take 8-bit controls act on them.
    const bool c1 = c == 0xC2 && i + 1 < text.size() &&
                    static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9F;
    if (c0) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c1) {
      out += fmt::format("\\xc2\\x{:02x}", static_cast<unsigned char>(text[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string to_markdown(const Table& table) {
  check_rectangular(table, "to_markdown");
  const size_t columns = table.columns.size();
  std::vector<std::string> header(columns);
  std::vector<std::vector<std::string>> cells(table.rows.size(), std::vector<std::string>(columns));
  std::vector<size_t> width(columns, 3);  // "---" is the shortest separator
  std::vector<bool> right(columns, false);
  for (size_t c = 0; c < columns; ++c) {
    header[c] = markdown_cell(table.columns[c]);
    width[c] = std::max(width[c], display_width(header[c]));
    bool any = false, all_numeric = true;
    for (size_t r = 0; r < table.rows.size(); ++r) {
      cells[r][c] = markdown_cell(table.rows[r][c]);
      width[c] = std::max(width[c], display_width(cells[r][c]));
      if (!table.rows[r][c].empty()) {
        any = true;
        all_numeric = all_numeric && looks_numeric(table.rows[r][c]);
      }
    }
    right[c] = any && all_numeric;
  }

  auto line = [&](const std::vector<std::string>& row) {
    std::string out = "|";
    for (size_t c = 0; c < columns; ++c) {
      const std::string pad(width[c] - display_width(row[c]), ' ');
      out += ' ';
      out += right[c] ? pad + row[c] : row[c] + pad;
      out += " |";
    }
    return out + "\n";
  };
  std::string out = line(header);
  out += "|";
  for (size_t c = 0; c < columns; ++c) {
    out += right[c] ? fmt::format(" {}: |", std::string(width[c] - 1, '-'))
                    : fmt::format(" {} |", std::string(width[c], '-'));
  }
  out += "\n";
  for (const auto& row : cells) out += line(row);
  return out;
}

std::string to_csv(const Table& table) {
  check_rectangular(table, "to_csv");
  std::string out;
  append_csv_record(out, table.columns);
  for (const auto& row : table.rows) append_csv_record(out, row);
  return out;
}

Table parse_csv(std::string_view text, const std::string& name_for_messages) {
  const std::string& path = name_for_messages;
  // A NUL byte means binary data (a .npy or a spreadsheet handed over by mistake).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    const auto line =
        1 + std::count(text.begin(), text.begin() + static_cast<ptrdiff_t>(nul), '\n');
    throw CsvError(fmt::format("{}:{}: a NUL byte (binary data, not CSV text)", path, line));
  }

  Table table;
  bool have_header = false;
  CsvRecordParser parser(path);
  LineSplitter lines(text);
  std::string_view line;
  while (lines.next(&line)) {
    if (!parser.inside_quotes() && line.empty()) continue;  // blank line between records
    if (!parser.feed(line, lines.line_number())) continue;
    std::vector<std::string>& record = parser.record();
    if (!have_header) {
      table.columns = std::move(record);
      have_header = true;
    } else if (record.size() != table.columns.size()) {
      // A short last row without a final line break: most likely a file cut off mid-write.
      const bool cut_off =
          record.size() < table.columns.size() && lines.at_end() && text.back() != '\n';
      parser.error(parser.start_line(),
                   fmt::format("row has {} fields, expected {} (the header's count){}",
                               record.size(), table.columns.size(),
                               cut_off ? "; the file ends inside this row (truncated?)" : ""));
    } else {
      table.rows.push_back(std::move(record));
    }
  }
  if (parser.inside_quotes()) {
    parser.error(parser.start_line(),
                 "unterminated quoted field (no closing quote before the end)");
  }
  if (!have_header) throw CsvError(fmt::format("{}: empty file, expected a header line", path));
  return table;
}

Table read_csv(const std::string& path) {
  // Result files are KiB to a few MiB; this only bounds what a wrong file can make us allocate.
  constexpr uint64_t kMaxCsvBytes = uint64_t{1} << 30;
  return parse_csv(read_regular_file<CsvError>(path, kMaxCsvBytes, "cannot open"), path);
}

std::string format_sig(double value, int digits) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  digits = std::clamp(digits, 1, 17);
  if (value == 0.0) return digits > 1 ? fmt::format("{:.{}f}", 0.0, digits - 1) : "0";
  // The exponent after rounding to `digits` digits (9.996 at 3 digits is 1.00e+01).
  const std::string sci = fmt::format("{:.{}e}", value, digits - 1);
  const int exponent = std::stoi(sci.substr(sci.find('e') + 1));
  if (exponent < -4 || exponent >= 6) return sci;
  return fmt::format("{:.{}f}", value, std::max(0, digits - 1 - exponent));
}

std::string format_gib(size_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

std::string format_seconds(double seconds) {
  if (!std::isfinite(seconds)) return format_sig(seconds, 3);
  if (seconds == 0.0) return "0 s";
  const double magnitude = std::abs(seconds);
  // Pick the unit from the value as it will print (999.95 us prints as 1.00 ms).
  struct Unit { double scale; const char* name; };
  for (Unit unit : {Unit{1.0, "s"}, Unit{1e-3, "ms"}, Unit{1e-6, "us"}}) {
    if (magnitude >= unit.scale * (1.0 - 5e-4)) {
      return fmt::format("{} {}", format_sig(seconds / unit.scale, 3), unit.name);
    }
  }
  return fmt::format("{} ns", format_sig(seconds / 1e-9, 3));
}

}  // namespace kda::harness
