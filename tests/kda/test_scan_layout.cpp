// CPU emulation of how the SCAN (lib/kda/src/scan/scan.cu, wgmma) reads its B operands: the
// record is written with the PREP's own address helpers (record.h rec_*), copied verbatim into a
// record buffer (the kernel's single bulk copy), and every element of every wgmma B operand the
// kernel issues is fetched through the descriptor the kernel builds (scan/scan_layout.h
// desc_sw128), decoded and addressed with the canonical 128-byte-swizzle formulas of the PTX ISA
// (repeated here independently of scan_layout.h: K-major start + 128 (n % 8) + SBO (n / 8) + 2 k,
// MN-major start + 2 (n % 64) + LBO (n / 64) + 128 (k % 8) + SBO (k / 8), then bits 4-6 ^= bits
// 7-9). Each fetched element must be the matrix element the product needs. The register-side maps
// (state, V_new, U^T, O^T) are scan/transposed.h's, emulated by tests/lab/test_scan_t_layout.cpp
// through the lab's mma.sync twin of the SCAN.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "device/fragments.h"  // lib/kda/src
#include "record.h"             // lib/kda/src
#include "scan/scan_layout.h"   // lib/kda/src
#include "scan/transposed.h"    // lib/kda/src

namespace {

namespace ws = kda::detail::scan;
using kda::detail::rec_aqk;
using kda::detail::rec_kg;
using kda::detail::rec_qp;
using kda::detail::rec_split;
using kda::detail::rec_u_bound;
using kda::detail::rec_w;

constexpr int kC = kda::kChunk;    // 64
constexpr int kD = kda::kHeadDim;  // 128

// A distinct 16-bit tag per (matrix, row, column): matrix 0 = W, 1 = q', 2 = kg, 3 = A_qk.
uint16_t tag(int matrix, int row, int col) {
  return static_cast<uint16_t>((matrix << 13) | (row << 7) | col);
}

// The record as the PREP writes it (tags in place of the 16-bit values).
std::vector<uint8_t> tagged_record() {
  std::vector<uint8_t> rec(kda::detail::kRecordBytes, 0);
  auto put = [&](int64_t offset, uint16_t value) { std::memcpy(&rec[offset], &value, 2); };
  for (int i = 0; i < kC; ++i) {
    for (int d = 0; d < kD; ++d) {
      put(rec_w(i, d), tag(0, i, d));
      put(rec_qp(i, d), tag(1, i, d));
      put(rec_kg(i, d), tag(2, i, d));
    }
    for (int j = 0; j < kC; ++j) put(rec_aqk(i, j), tag(3, i, j));
  }
  return rec;
}

struct Smem {
  uint32_t base = 0;  // the shared-memory address of bytes[0]
  std::vector<uint8_t> bytes;
  uint16_t at(uint32_t addr) const {
    const uint32_t swizzled = addr ^ (((addr >> 7) & 7) << 4);
    EXPECT_GE(swizzled, base);
    EXPECT_LE(swizzled + 2, base + bytes.size());
    uint16_t v = 0;
    std::memcpy(&v, &bytes[swizzled - base], 2);
    return v;
  }
};

struct Desc {
  uint32_t start, lbo, sbo;
};
Desc decode(uint64_t desc) {
  EXPECT_EQ(desc >> 62, 1u) << "128-byte swizzle";
  EXPECT_EQ((desc >> 49) & 7, 0u) << "base offset";
  return {static_cast<uint32_t>(desc & 0x3FFF) << 4,
          static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4,
          static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4};
}
uint32_t kmajor(const Desc& d, int n, int k) {
  return d.start + 128 * (n % 8) + d.sbo * (n / 8) + 2 * k;
}
uint32_t mnmajor(const Desc& d, int n, int k) {
  return d.start + 2 * (n % 64) + d.lbo * (n / 64) + 128 * (k % 8) + d.sbo * (k / 8);
}

// The unsplit byte offset of element (i, d) of tile t (0 = W, 1 = q', 2 = kg): [64][128] 16-bit
// tiles with 256-byte swz128 rows, the form rec_split starts from (the lab's v1 record's).
int64_t unsplit(int t, int i, int d) { return 16384 * t + 2 * kda::detail::mma::swz128(i, d); }

// rec_split moves every 16-bit slot of the W, q', kg part to a distinct slot of the same part,
// keeps 4-byte pairs and 16-byte groups contiguous (PREP writes both), and the record fits the
// buffer whose image it is.
TEST(ScanLayout, SplitRecordIsAPermutation) {
  std::set<int64_t> slots;
  for (int64_t off = 0; off < ws::kSplitBytes; off += 2) {
    const int64_t to = rec_split(off);
    EXPECT_GE(to, 0);
    EXPECT_LT(to, ws::kSplitBytes);
    if (off % 16 != 0) {
      EXPECT_EQ(to, rec_split(off - 2) + 2) << "16-byte groups stay whole";
    }
    slots.insert(to);
  }
  EXPECT_EQ(static_cast<int64_t>(slots.size()), ws::kSplitBytes / 2);
  // Key half h of row r of tile t is the canonical [64][128 B] tile at t 16 KB + h 8 KB.
  for (int i = 0; i < kC; ++i) {
    for (int d = 0; d < kD; ++d) {
      const int64_t to = rec_w(i, d);
      EXPECT_EQ(to / ws::kHalfTile, d / 64) << "W key half";
      EXPECT_EQ((to % ws::kHalfTile) / 128, i) << "row";
      EXPECT_EQ(rec_qp(i, d) - to, ws::kQP);
      EXPECT_EQ(rec_kg(i, d) - to, ws::kKG);
      EXPECT_EQ(to, rec_split(unsplit(0, i, d))) << "closed form = split unsplit offset";
      EXPECT_EQ(rec_qp(i, d), rec_split(unsplit(1, i, d)));
      EXPECT_EQ(rec_kg(i, d), rec_split(unsplit(2, i, d)));
    }
  }
  EXPECT_EQ(ws::kCopyBytes, kda::detail::kRecordBytes) << "the whole record";
  EXPECT_LE(ws::kCopyBytes, ws::kBuffer);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(ws::buffer(c) % 1024, 0);
  EXPECT_EQ(ws::kSO % 1024, 0);
  EXPECT_EQ(ws::kSBar % 8, 0) << "mbarriers are 8-byte aligned";
  EXPECT_GE(ws::kSBar, ws::kSO + 2 * ws::kOTile);
  EXPECT_LE(ws::kSBar + 16, ws::kSUsed);
  EXPECT_LE(ws::kSUsed + 1023, ws::kSBytes) << "room to align the dynamic base up to 1024";
}

// Every B element of every wgmma of one chunk, through the kernel's descriptors, for both
// buffers at a 1024-aligned base.
TEST(ScanLayout, DescriptorsFetchTheOperands) {
  const std::vector<uint8_t> rec = tagged_record();
  for (int chunk = 0; chunk < 2; ++chunk) {
    const uint32_t sbase = 3 * 1024;  // any 1024-aligned shared address
    Smem smem{sbase, std::vector<uint8_t>(ws::kSUsed, 0xEE)};
    const int b = ws::buffer(chunk);
    std::memcpy(&smem.bytes[b], rec.data(), rec.size());  // the bulk copy
    const uint32_t buf = sbase + b;
    int mismatches = 0;
    auto expect = [&](uint16_t got, uint16_t want, const std::string& what) {
      if (got != want && ++mismatches <= 5) {
        ADD_FAILURE() << what << ": got tag " << got << ", want " << want;
      }
    };
    for (int ks = 0; ks < kD / 16; ++ks) {  // phase A: B[k = key][n = token] = W[n][16 ks + k]
      const Desc w = decode(ws::desc_sw128(buf + ws::a_w(ks), 16, ws::kSBO));
      const Desc q = decode(ws::desc_sw128(buf + ws::a_qp(ks), 16, ws::kSBO));
      for (int n = 0; n < kC; ++n) {
        for (int k = 0; k < 16; ++k) {
          expect(smem.at(kmajor(w, n, k)), tag(0, n, 16 * ks + k), "W ks " + std::to_string(ks));
          expect(smem.at(kmajor(q, n, k)), tag(1, n, 16 * ks + k), "q' ks " + std::to_string(ks));
        }
      }
    }
    for (int kt = 0; kt < kC / 16; ++kt) {
      // B1: B[k = token j][n = token t] = A_qk[t][16 kt + k].
      const Desc a = decode(ws::desc_sw128(buf + ws::b1_aqk(kt), 16, ws::kSBO));
      for (int n = 0; n < kC; ++n) {
        for (int k = 0; k < 16; ++k) {
          expect(smem.at(kmajor(a, n, k)), tag(3, n, 16 * kt + k), "A_qk kt " + std::to_string(kt));
        }
      }
      // B2: B[k = token][n = key] = kg[16 kt + k][n], MN-major.
      const Desc g = decode(ws::desc_sw128(buf + ws::b2_kg(kt), ws::kKeyHalfLBO, ws::kSBO));
      for (int n = 0; n < kD; ++n) {
        for (int k = 0; k < 16; ++k) {
          expect(smem.at(mnmajor(g, n, k)), tag(2, 16 * kt + k, n), "kg kt " + std::to_string(kt));
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << "buffer " << chunk;
  }
}

// The row scales (scan.cu plan_row_scales, load_u_bounds, row_max_abs, operand_row_max): a
// thread's state registers 2 h, 2 h + 1 belong to one value row, as do its A registers q with
// q & 1 == h; the row's max is reduced over lanes xor 1 and xor 2, and those four lanes hold all
// 128 keys of the row exactly once; the U bound the thread reads for that row is the record's.
TEST(ScanLayout, RowScalesSeeTheirWholeRow) {
  namespace ts = kda::detail::scan;
  for (int warp = 0; warp < kda::detail::kWarps; ++warp) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int h = 0; h < 2; ++h) {
        const int row = ts::state_value(warp, lane, 2 * h);
        EXPECT_EQ(ts::state_value(warp, lane, 2 * h + 1), row);
        std::set<int> keys;
        for (int other : {lane, lane ^ 1, lane ^ 2, lane ^ 3}) {
          EXPECT_EQ(ts::state_value(warp, other, 2 * h), row) << "the quad shares the row";
          for (int j = 0; j < kD / 8; ++j) {
            for (int r : {2 * h, 2 * h + 1}) keys.insert(ts::state_key(other, j, r));
          }
        }
        EXPECT_EQ(keys.size(), static_cast<size_t>(kD)) << "warp " << warp << " lane " << lane;
        // operand_row_max reads row h from the A registers q with q & 1 == h.
        for (int q = 0; q < 4; ++q) {
          if ((q & 1) != h) continue;
          EXPECT_EQ(ts::state_value(warp, lane, 2 * ts::a_half(q)), row) << "A register " << q;
        }
        // The bound the thread loads (from the record in global memory) is U_BOUND[value row].
        EXPECT_GE(rec_u_bound(row), ws::kSplitBytes);
        EXPECT_EQ(rec_u_bound(row), kda::detail::kRecUBound + 4 * row);
      }
    }
  }
  // Every value row is some thread's row.
  std::set<int> rows;
  for (int warp = 0; warp < kda::detail::kWarps; ++warp)
    for (int lane = 0; lane < 32; ++lane)
      for (int reg = 0; reg < 4; ++reg) rows.insert(ts::state_value(warp, lane, reg));
  EXPECT_EQ(rows.size(), static_cast<size_t>(kD));
}

}  // namespace
