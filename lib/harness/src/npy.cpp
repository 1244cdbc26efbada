// NumPy .npy files, format 1.0 written, 1.0 and 2.0 read. Little-endian C-order float32,
// float64 and int32 only: the dtypes the harness exchanges with Python tools.
#include "kda/harness/npy.h"

#include <bit>
#include <cctype>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "kda/harness/files.h"
#include "kda/harness/report.h"

namespace kda::harness {

static_assert(std::endian::native == std::endian::little,
              ".npy data is little-endian and copied as-is; a big-endian host needs byte swaps");

namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes
constexpr size_t kMagicSize = 6;
constexpr size_t kAlignment = 64;  // numpy pads the header so the data starts 64-byte aligned
// Our headers are ~120 bytes; numpy itself refuses headers over 10000 bytes by default. A 2.0
// header may claim up to 4 GiB, so bound what we read.
constexpr uint64_t kMaxHeaderBytes = 65536;

// Header text for a message: at most 200 bytes, bytes outside printable ASCII as \xNN.
std::string printable(std::string_view text) {
  constexpr size_t kMax = 200;
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (text.size() > kMax) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

const char* descr_of(NpyType type) {
  switch (type) {
    case NpyType::f32: return "<f4";
    case NpyType::f64: return "<f8";
    case NpyType::i32: return "<i4";
  }
  return "?";
}

size_t item_size(NpyType type) { return type == NpyType::f64 ? 8 : 4; }

// Element count of a shape; throws on negative or overflowing extents.
int64_t element_count(const std::vector<int64_t>& shape, const std::string& context) {
  int64_t count = 1;
  for (int64_t extent : shape) {
    if (extent < 0) throw NpyError(fmt::format("{}: negative extent {} in the shape", context, extent));
    if (extent != 0 && count > std::numeric_limits<int64_t>::max() / 8 / extent) {
      throw NpyError(fmt::format("{}: shape too large", context));
    }
    count *= extent;
  }
  return count;
}

std::string shape_tuple(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "()";
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);  // a 1-tuple needs the comma
  return fmt::format("({})", fmt::join(shape, ", "));
}

template <class T>
void write_typed(const std::string& path, NpyType type, const std::vector<T>& data,
                 const std::vector<int64_t>& shape) {
  const int64_t count = element_count(shape, path);
  if (count != static_cast<int64_t>(data.size())) {
    throw NpyError(fmt::format("{}: shape {} holds {} elements but {} were given", path,
                               shape_tuple(shape), count, data.size()));
  }
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   descr_of(type), shape_tuple(shape));
  // magic (6) + version (2) + length (2) + header + '\n' must be a multiple of 64.
  const size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((kAlignment - unpadded % kAlignment) % kAlignment, ' ');
  header.push_back('\n');
  if (header.size() > 65535) throw NpyError(fmt::format("{}: header too long for format 1.0", path));

  std::string bytes(kMagic, kMagicSize);
  bytes.push_back('\x01');
  bytes.push_back('\x00');
  bytes.push_back(static_cast<char>(header.size() & 0xFF));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(T));
  try {
    write_binary_file_atomic(path, bytes.data(), bytes.size(), /*overwrite=*/true);
  } catch (const OutputError& e) {
    throw NpyError(e.what());
  }
}

// A tiny parser for the header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  void parse(std::string& descr, bool& fortran_order, std::vector<int64_t>& shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (true) {
      skip_spaces();
      if (peek() == '}') break;
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran_order = boolean();
        have_order = true;
      } else if (key == "shape") {
        shape = tuple();
        have_shape = true;
      } else {
        error(fmt::format("unexpected key '{}'", printable(key)));
      }
      skip_spaces();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') error("expected ',' or '}'");
    }
    ++pos_;
    skip_spaces();
    if (pos_ != text_.size()) error("text after the closing '}'");
    if (!have_descr || !have_order || !have_shape) {
      error("missing 'descr', 'fortran_order' or 'shape'");
    }
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw NpyError(fmt::format("{}: header parse error at offset {}: {} (header: {})", path_, pos_,
                               what, printable(text_)));
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_spaces() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  void expect(char c) {
    skip_spaces();
    if (peek() != c) error(fmt::format("expected '{}'", c));
    ++pos_;
  }
  std::string string_literal() {
    skip_spaces();
    const char quote = peek();
    if (quote != '\'' && quote != '"') error("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) error("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_spaces();
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    error("expected True or False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> values;
    while (true) {
      skip_spaces();
      if (peek() == ')') break;
      values.push_back(integer());
      skip_spaces();
      if (peek() == ',') {
        ++pos_;
      } else if (peek() != ')') {
        error("expected ',' or ')' in the shape");
      }
    }
    ++pos_;
    return values;
  }
  int64_t integer() {
    skip_spaces();
    if (!std::isdigit(static_cast<unsigned char>(peek()))) error("expected a non-negative integer");
    int64_t value = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      if (value > (std::numeric_limits<int64_t>::max() - 9) / 10) error("integer too large");
      value = value * 10 + (peek() - '0');
      ++pos_;
    }
    return value;
  }

  std::string_view text_;
  const std::string& path_;
  size_t pos_ = 0;
};

}  // namespace

const char* to_string(NpyType type) {
  switch (type) {
    case NpyType::f32: return "float32";
    case NpyType::f64: return "float64";
    case NpyType::i32: return "int32";
  }
  return "?";
}

int64_t NpyArray::size() const { return element_count(shape, "npy array"); }

std::vector<float> NpyArray::as_f32() const {
  if (type != NpyType::f32) {
    throw NpyError(fmt::format("npy array holds {}, not float32", to_string(type)));
  }
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

std::vector<double> NpyArray::as_f64() const {
  if (type == NpyType::f32) {
    const std::vector<float> narrow = as_f32();
    return std::vector<double>(narrow.begin(), narrow.end());
  }
  if (type != NpyType::f64) {
    throw NpyError(fmt::format("npy array holds {}, not a floating type", to_string(type)));
  }
  std::vector<double> out(bytes.size() / sizeof(double));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(double));
  return out;
}

std::vector<int32_t> NpyArray::as_i32() const {
  if (type != NpyType::i32) {
    throw NpyError(fmt::format("npy array holds {}, not int32", to_string(type)));
  }
  std::vector<int32_t> out(bytes.size() / sizeof(int32_t));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(int32_t));
  return out;
}

void write_npy(const std::string& path, const std::vector<float>& data,
               const std::vector<int64_t>& shape) {
  write_typed(path, NpyType::f32, data, shape);
}

void write_npy(const std::string& path, const std::vector<double>& data,
               const std::vector<int64_t>& shape) {
  write_typed(path, NpyType::f64, data, shape);
}

void write_npy(const std::string& path, const std::vector<int32_t>& data,
               const std::vector<int64_t>& shape) {
  write_typed(path, NpyType::i32, data, shape);
}

namespace {

// Where the bytes of a .npy come from: a file or a buffer. The total size is known up front, so
// every length the file claims is checked against what is there before anything is allocated.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t remaining() const = 0;
  // Reads exactly n bytes (n <= remaining()); throws NpyError on an I/O error.
  virtual void read(void* out, size_t n) = 0;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string_view bytes) : bytes_(bytes) {}
  uint64_t remaining() const override { return bytes_.size() - pos_; }
  void read(void* out, size_t n) override {
    if (n > 0) std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

class FileSource final : public ByteSource {
 public:
  FileSource(RegularFile& file, const std::string& path)
      : file_(file), left_(file.size()), path_(path) {}
  uint64_t remaining() const override { return left_; }
  void read(void* out, size_t n) override {
    try {
      file_.read_exact(out, n);
    } catch (const InputFileError& e) {
      throw NpyError(fmt::format("{}: {}", path_, e.what()));
    }
    left_ -= n;
  }

 private:
  RegularFile& file_;
  uint64_t left_;
  const std::string& path_;
};

NpyArray decode(ByteSource& source, const std::string& path) {
  auto fail = [&](const std::string& what) -> NpyError {
    return NpyError(fmt::format("{}: {}", path, what));
  };

  // Preamble: magic, version, header length (2 bytes in 1.0, 4 bytes in 2.0).
  char preamble[8] = {};
  if (source.remaining() < 8) throw fail("not a .npy file (bad magic; expected \\x93NUMPY)");
  source.read(preamble, 8);
  if (std::memcmp(preamble, kMagic, kMagicSize) != 0) {
    throw fail("not a .npy file (bad magic; expected \\x93NUMPY)");
  }
  const int major = static_cast<unsigned char>(preamble[6]);
  const int minor = static_cast<unsigned char>(preamble[7]);
  if ((major != 1 && major != 2) || minor != 0) {
    throw fail(fmt::format("unsupported .npy version {}.{} (supported: 1.0, 2.0)", major, minor));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (source.remaining() < length_bytes) throw fail("truncated header length");
  unsigned char length_raw[4] = {};
  source.read(length_raw, length_bytes);
  uint64_t header_length = 0;
  for (size_t i = length_bytes; i-- > 0;) header_length = header_length * 256 + length_raw[i];
  if (header_length > source.remaining()) {
    throw fail(fmt::format("header truncated: expected {} bytes, got {}", header_length,
                           source.remaining()));
  }
  if (header_length > kMaxHeaderBytes) {
    throw fail(fmt::format("header of {} bytes is longer than the {} this reader accepts",
                           header_length, kMaxHeaderBytes));
  }
  std::string header(header_length, '\0');
  source.read(header.data(), header.size());

  std::string descr;
  bool fortran_order = false;
  NpyArray array;
  HeaderParser(header, path).parse(descr, fortran_order, array.shape);
  if (descr == "<f4") {
    array.type = NpyType::f32;
  } else if (descr == "<f8") {
    array.type = NpyType::f64;
  } else if (descr == "<i4") {
    array.type = NpyType::i32;
  } else {
    throw fail(fmt::format("unsupported dtype '{}' (supported: '<f4', '<f8', '<i4')",
                           printable(descr)));
  }
  if (fortran_order) throw fail("fortran_order True is not supported (C order only)");

  // The shape decides how many bytes must follow; check before allocating them, so a header that
  // claims a huge array costs nothing.
  const int64_t count = element_count(array.shape, path);
  const uint64_t expected = static_cast<uint64_t>(count) * item_size(array.type);
  const uint64_t available = source.remaining();
  if (available < expected) {
    throw fail(fmt::format("data truncated: expected {} bytes, got {}", expected, available));
  }
  if (available > expected) {
    throw fail(fmt::format("trailing garbage: {} bytes after the data", available - expected));
  }
  array.bytes.resize(static_cast<size_t>(expected));
  source.read(array.bytes.data(), array.bytes.size());
  return array;
}

}  // namespace

NpyArray parse_npy(std::string_view bytes, const std::string& name_for_messages) {
  MemorySource source(bytes);
  return decode(source, name_for_messages);
}

NpyArray read_npy(const std::string& path) {
  std::optional<RegularFile> file;
  try {
    file.emplace(path);
  } catch (const InputFileError& e) {
    throw NpyError(fmt::format("{}: cannot open: {}", path, e.what()));
  }
  FileSource source(*file, path);
  return decode(source, path);
}

}  // namespace kda::harness
