// PTX models of ldmatrix and mma.sync.m16n8k16 for the CPU emulation tests (test_prep_layout.cpp,
// tests/lab/test_scan_v1_layout.cpp, test_scan_t_layout.cpp), written from the PTX ISA definitions,
// independently of the kernels' layout helpers. Values are doubles: with small-integer data every
// product is exact.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

namespace kda_test {

// ------------------------------------------------------------------------------------------------
// Byte-addressed memory holding one value per 2-byte unit (bf16 elements; an fp32 lives in the
// slot of its first byte). Unwritten slots are NaN so stray reads show up.
struct Memory {
  std::vector<double> slot;
  explicit Memory(int64_t bytes) : slot(static_cast<size_t>(bytes / 2), std::nan("")) {}
  double& at(int64_t byte) {
    EXPECT_EQ(byte % 2, 0) << "odd byte address " << byte;
    EXPECT_GE(byte, 0);
    EXPECT_LT(byte / 2, static_cast<int64_t>(slot.size()));
    return slot.at(static_cast<size_t>(byte / 2));
  }
};

// ------------------------------------------------------------------------------------------------
// PTX models (independent of lib/kda/src/device/fragments.h).

using Frag4 = std::array<std::array<std::array<double, 2>, 4>, 32>;  // [lane][reg][half]
using Acc = std::array<std::array<double, 4>, 32>;                   // [lane][c0..c3]

inline int bank_conflicts = 0;

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane 8i + r gives the 16-byte row r of
// matrix i; without .trans lane l receives (row l/4, cols 2(l%4), 2(l%4)+1) of matrix i in
// register i, with .trans (rows 2(l%4), 2(l%4)+1; col l/4).
inline Frag4 ldmatrix_x4(Memory& smem, const std::array<int, 32>& addr, bool trans) {
  for (int i = 0; i < 4; ++i) {
    std::set<int> groups;
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(addr[8 * i + r] % 16, 0) << "ldmatrix row address not 16-byte aligned";
      groups.insert((addr[8 * i + r] / 16) % 8);  // 8 x 16-byte bank groups per 128 bytes
    }
    if (groups.size() != 8) ++bank_conflicts;
  }
  Frag4 out{};
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 4; ++i) {
      for (int e = 0; e < 2; ++e) {
        const int row = trans ? 2 * (l % 4) + e : l / 4;
        const int col = trans ? l / 4 : 2 * (l % 4) + e;
        out[l][i][e] = smem.at(addr[8 * i + row] + 2 * col);
      }
    }
  }
  return out;
}

// mma.sync.aligned.m16n8k16.row.col: D = A B + C with (g = l/4, t = l%4)
//   a0 = A(g, 2t..2t+1), a1 = A(g+8, 2t..), a2 = A(g, 2t+8..), a3 = A(g+8, 2t+8..)
//   b0 = B(2t..2t+1, g), b1 = B(2t+8..2t+9, g); c0,c1 = C(g, 2t..), c2,c3 = C(g+8, 2t..).
inline void mma(std::array<double, 4>* const d[32], const Frag4& a, const Frag4& b, int b_reg0) {
  double A[16][16], B[16][8], C[16][8];
  int seen_a[16][16] = {}, seen_b[16][8] = {};
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = a[l][0][e];
      A[g + 8][2 * t + e] = a[l][1][e];
      A[g][2 * t + 8 + e] = a[l][2][e];
      A[g + 8][2 * t + 8 + e] = a[l][3][e];
      ++seen_a[g][2 * t + e];
      ++seen_a[g + 8][2 * t + e];
      ++seen_a[g][2 * t + 8 + e];
      ++seen_a[g + 8][2 * t + 8 + e];
      B[2 * t + e][g] = b[l][b_reg0][e];
      B[2 * t + 8 + e][g] = b[l][b_reg0 + 1][e];
      ++seen_b[2 * t + e][g];
      ++seen_b[2 * t + 8 + e][g];
      C[g][2 * t + e] = (*d[l])[e];
      C[g + 8][2 * t + e] = (*d[l])[2 + e];
    }
  }
  for (int m = 0; m < 16; ++m) {
    for (int k = 0; k < 16; ++k) ASSERT_EQ(seen_a[m][k], 1);
  }
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < 8; ++n) ASSERT_EQ(seen_b[k][n], 1);
  }
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      for (int k = 0; k < 16; ++k) C[m][n] += A[m][k] * B[k][n];
    }
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 2; ++e) {
      (*d[l])[e] = C[g][2 * t + e];
      (*d[l])[2 + e] = C[g + 8][2 * t + e];
    }
  }
}

// mma into one warp's accumulator tile: acc += A B with b registers b_reg0, b_reg0 + 1.
inline void run_mma(Acc& acc, const Frag4& a, const Frag4& b, int b_reg0) {
  std::array<double, 4>* d[32];
  for (int l = 0; l < 32; ++l) d[l] = &acc[l];
  mma(d, a, b, b_reg0);
}

// A 32-bit access per lane (C-fragment element pairs): conflict-free iff 32 distinct banks.
inline void check_words(const std::array<int, 32>& byte) {
  std::set<int> banks;
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(byte[l] % 4, 0) << "pair access not 4-byte aligned";
    banks.insert((byte[l] / 4) % 32);
  }
  if (banks.size() != 32) ++bank_conflicts;
}

template <class F>
std::array<int, 32> per_lane(F f) {
  std::array<int, 32> out{};
  for (int l = 0; l < 32; ++l) out[l] = f(l);
  return out;
}


}  // namespace kda_test
