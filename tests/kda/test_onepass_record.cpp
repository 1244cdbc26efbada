// The one pass's sub-chunk record (lib/kda/src/onepass/record16.h) is covered exactly once by
// the entries a build writes (build16.cuh OneRecord), and is whole 16-byte units (the value
// halves copy it to the peer CTA by bulk copy). No GPU: the address helpers are host-callable.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "onepass/record16.h"

namespace {

namespace op = kda::detail::onepass;

// Marks `bytes` bytes at `offset` of a record map; every byte may be marked once.
void mark(std::vector<int>& map, int64_t offset, int bytes) {
  for (int b = 0; b < bytes; ++b) {
    ASSERT_GE(offset + b, 0);
    ASSERT_LT(offset + b, static_cast<int64_t>(map.size()));
    ++map[static_cast<size_t>(offset + b)];
  }
}

// The value-independent parts of a record: W, QP, KG (16 x 128 16-bit entries each), AQK's
// written columns (16 x 16) within its 2 KB tile.
void mark_tiles(std::vector<int>& map) {
  for (const int64_t tile : {op::kRecW, op::kRecQP, op::kRecKG}) {
    for (int i = 0; i < op::kSub; ++i) {
      for (int d = 0; d < op::kDim; ++d) mark(map, op::rec_split(tile, i, d), 2);
    }
  }
  for (int i = 0; i < op::kSub; ++i) {
    for (int j = 0; j < op::kSub; ++j) mark(map, op::rec_aqk(i, j), 2);
  }
}

TEST(OnePassRecord, WholeRecordIsCoveredOnce) {
  std::vector<int> map(static_cast<size_t>(op::kRecordBytes), 0);
  mark_tiles(map);
  for (int d = 0; d < op::kDim; ++d) {
    for (int i = 0; i < op::kSub; ++i) mark(map, op::rec_ut(d, i), 4);
    mark(map, op::rec_a(d), 4);
  }
  for (size_t b = 0; b < map.size(); ++b) {
    const bool aqk_unused = static_cast<int64_t>(b) >= op::kRecAQK &&
                            static_cast<int64_t>(b) < op::kRecUT && map[b] == 0;
    if (!aqk_unused) {
      EXPECT_EQ(map[b], 1) << "byte " << b;
    }
  }
  EXPECT_EQ(op::kRecordBytes % 16, 0) << "the bulk copy moves whole 16-byte units";
}

}  // namespace
