// libFuzzer target: the .npy reader (kda::harness::parse_npy) on arbitrary bytes. A refusal must
// be an NpyError; an accepted array must hold exactly shape-product x item-size bytes, and its
// typed views must agree with its dtype.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kda/harness/npy.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kda::harness::NpyType;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const kda::harness::NpyArray array = kda::harness::parse_npy(bytes, "fuzz.npy");
    const size_t item = array.type == NpyType::f64 ? 8 : 4;
    check(array.size() >= 0);
    check(array.bytes.size() == static_cast<size_t>(array.size()) * item);
    check(array.bytes.size() < size);  // the data came from the input, after its header
    switch (array.type) {
      case NpyType::f32:
        check(array.as_f32().size() == static_cast<size_t>(array.size()));
        check(array.as_f64().size() == static_cast<size_t>(array.size()));
        break;
      case NpyType::f64:
        check(array.as_f64().size() == static_cast<size_t>(array.size()));
        break;
      case NpyType::i32:
        check(array.as_i32().size() == static_cast<size_t>(array.size()));
        break;
    }
  } catch (const kda::harness::NpyError&) {
    // a refusal with a message
  }
  return 0;
}
