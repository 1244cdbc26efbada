// Shared-memory plan of the SCAN (scan.cu): the transposed-state recurrence with the products on
// warpgroup MMA. Host and device, no CUDA includes. It reads the record of record.h (fp16
// factors, U's column bounds). The register maps (state, V_new, U^T, O^T) are transposed.h's:
// warp w of the CTA owns value rows 16 w .. 16 w + 15, and a wgmma m64nNk16 of warpgroup
// g = w / 4 gives warp w exactly the mma.sync fragments of those rows (device/wgmma.cuh).
//
// wgmma reads its B operands from shared memory in the canonical 128-byte-swizzle tiles (8 rows
// of 128 bytes, 16-byte unit u of row r at u ^ (r & 7)). W, q' and kg are [64 tokens][128 keys]
// 16-bit tiles with 256-byte swz128 rows, unit u of row r at (u ^ (r & 7)) | (u & 8)
// (device/fragments.h): each 128-byte half-row is already a canonical row, and the record stores
// the two halves of each tile as two [64][128 B] tiles, one per key half (record.h rec_split),
// without touching the order of the 16-byte units inside a half-row. A_qk ([64][64], swz64:
// 128-byte rows, u ^ (r & 7)) is canonical as it is, and so is everything after it (U, a, U's
// bounds). So the record is the buffer's image and moves by one bulk copy.
#pragma once

#include <cstdint>

#include "config.h"
#include "device/fragments.h"
#include "record.h"
#include "scan/transposed.h"

namespace kda::detail::scan {

static_assert(kWarps == 8, "two warpgroups of 64 value rows");

// ------------------------------------------------------------------------------------------------
// One record buffer (bytes from its 1024-byte-aligned base).
inline constexpr int kHalfTile = kChunk * 128;                   // [64 rows][128 B] = 8 KB
inline constexpr int kSplitBytes = static_cast<int>(kRecAQK);    // W, q', kg: the split part
inline constexpr int kW = 0;                                     // W  key half h at kW + h 8 KB
inline constexpr int kQP = static_cast<int>(kRecQP);             // q' (16 KB further)
inline constexpr int kKG = static_cast<int>(kRecKG);             // kg
inline constexpr int kAQK = static_cast<int>(kRecAQK);           // verbatim from here on
static_assert(kRecW == 0 && kRecQP == 2 * kHalfTile && kRecKG == 4 * kHalfTile,
              "W, q', kg: three [64][128] 16-bit tiles, each split into two key halves in place");
static_assert(kAQK % 1024 == 0 && kKG % 1024 == 0, "wgmma tiles are 1024-byte aligned");
inline constexpr int kBuffer = 74 * 1024;                        // record (74,752 B) rounded up
static_assert(kBuffer >= kRecordBytes && kBuffer % 1024 == 0, "buffers stay 1024-aligned");
// Two output tiles O [64 tokens][128 values] bf16 swz128: chunk c's in tile c % 2, copied out
// to global memory during chunk c + 1, so a chunk needs no CTA barrier after its epilogue.
inline constexpr int kOTile = kChunk * kHeadDim * 2;              // 16 KB
inline constexpr int kSO = 2 * kBuffer;
inline constexpr int kSUsed = kSO + 2 * kOTile + 16;              // 184,336 (+ the mbarriers)
inline constexpr int kSBytes = kSUsed + 1024;                    // + the base's alignment slack
static_assert(kSBytes <= 227 * 1024, "one CTA per SM");
KDA_HD constexpr int buffer(int chunk) { return (chunk & 1) * kBuffer; }
// The record is the buffer's exact image (record.h rec_split: W, q', kg already split into
// key halves), so one bulk copy (cp.async.bulk, completing on mbarrier kSBar + 8 (c % 2)) moves
// record c into buffer c % 2.
inline constexpr int kCopyBytes = static_cast<int>(kRecordBytes);
static_assert(kCopyBytes % 16 == 0 && kCopyBytes < (1 << 20), "bulk copy size and tx count");
inline constexpr int kSBar = kSO + 2 * kOTile;                    // two 8-byte mbarriers

// ------------------------------------------------------------------------------------------------
// wgmma shared-memory matrix descriptor (PTX ISA "matrix descriptor"): start address >> 4 (bits
// 0-13), leading byte offset >> 4 (16-29), stride byte offset >> 4 (32-45), swizzle mode (62-63,
// 1 = 128-byte). With the 128-byte swizzle the canonical tiles are 8 rows of 128 bytes, 1024-
// byte aligned, the swizzle applied to the final byte address: bits 4-6 ^= bits 7-9 (16-byte
// unit u of row r at u ^ (r & 7)). Element (n, k) of the k16 slice of B is at, before the swizzle:
//   K-major  (n rows of k, trans-b 0): start + 128 (n % 8) + SBO (n / 8) + 2 k, so a k16 step
//            inside the 64-element row is +32 bytes on the start address; LBO unused;
//   MN-major (k rows of n, trans-b 1): start + 2 (n % 64) + LBO (n / 64) + 128 (k % 8)
//            + SBO (k / 8).
// tests/kda/test_scan_layout.cpp decodes the descriptors below with exactly these formulas.
KDA_HD constexpr uint64_t desc_sw128(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32) | (uint64_t{1} << 62);
}

// B-operand descriptors' addresses and strides, relative to the buffer base.
//   Phase A, k-step ks (keys 16 ks .. +15): W^T / q'^T, K-major (n = token rows): key half
//   ks / 4, +32 bytes per k16 inside the half-row; SBO = 1024 (next 8 tokens).
KDA_HD constexpr int a_w(int ks) { return kW + (ks >> 2) * kHalfTile + (ks & 3) * 32; }
KDA_HD constexpr int a_qp(int ks) { return kQP + (ks >> 2) * kHalfTile + (ks & 3) * 32; }
//   Phase B1, k-step kt (tokens j = 16 kt .. +15): A_qk^T, K-major ([t][j] rows of t).
KDA_HD constexpr int b1_aqk(int kt) { return kAQK + kt * 32; }
//   Phase B2, k-step kt (tokens 16 kt .. +15): kg [token][key], MN-major (64 keys per 128-byte
//   row): +2 row groups of 8 tokens per k16; LBO = the second key half, SBO = 1024.
KDA_HD constexpr int b2_kg(int kt) { return kKG + kt * 2048; }
inline constexpr int kSBO = 1024;
inline constexpr int kKeyHalfLBO = kHalfTile;

// Base of O tile `tile` (0, 1); inside it transposed.h's o_trans_in_tile / o_row_in_tile maps.
KDA_HD constexpr int o_tile(int tile) { return kSO + tile * kOTile; }

}  // namespace kda::detail::scan
