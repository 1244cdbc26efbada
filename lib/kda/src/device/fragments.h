// mma.sync fragment maps and the swizzled 16-bit tile layouts every tensor-core kernel shares
// (the PREP, the SCAN, the lab's v1 and v2t SCANs, and the record written between them). Host and
// device: the CPU tests (tests/kda/test_prep_layout.cpp, test_scan_layout.cpp, tests/lab/) emulate
// ldmatrix and mma.sync (from the PTX ISA definitions) on top of exactly these functions. No CUDA
// includes.
//
// PTX facts used (m16n8k16, bf16 or fp16 in, fp32 accumulate; g = lane >> 2, t = lane & 3):
//   A (16x16, row-major) regs: a0 = (row g,   cols 2t, 2t+1)   a1 = (row g+8, cols 2t, 2t+1)
//                              a2 = (row g,   cols 2t+8, 2t+9) a3 = (row g+8, cols 2t+8, 2t+9)
//   B (16x8, "col")      regs: b0 = (k 2t, 2t+1; n g)          b1 = (k 2t+8, 2t+9; n g)
//   C/D (16x8, fp32)         : c0, c1 = (row g, cols 2t, 2t+1) c2, c3 = (row g+8, cols 2t, 2t+1)
//   Each 32-bit register holds two 16-bit values, the lower column (or k) index in the low half.
//   ldmatrix.m8n8.x4.b16: lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of
//   matrix i, which lands in register i. Without .trans lane l receives (row l>>2, cols 2(l&3),
//   2(l&3)+1) of each matrix; with .trans it receives (rows 2(l&3), 2(l&3)+1; col l>>2), i.e. the
//   same position of the transposed matrix.
#pragma once

#if defined(__CUDACC__)
#define KDA_HD __host__ __device__ __forceinline__
#else
#define KDA_HD inline
#endif

namespace kda::detail::mma {

// ------------------------------------------------------------------------------------------------
// Swizzled row-major 16-bit tiles (element offsets). A row is split into 16-byte groups of 8
// elements; the group index is XORed with a function of the row so that the 8 rows any ldmatrix
// phase (8 lanes) reads -- 8 consecutive rows, the same logical group -- land in 8 different
// 16-byte bank groups (byte address / 16 mod 8), and so do C-fragment accesses. The tiles stay
// dense (the records in global memory are this exact image, no padding bytes to move).
//
// 128 columns (256-byte rows, W / q' / kg): group' = group ^ (row & 7) on the low 3 bits of the
//   16 groups. Bank group of (row, group) = group' mod 8 (256 B = 2 x 128 B): distinct for 8
//   consecutive rows.
KDA_HD constexpr int swz128(int row, int col) {
  const int group = col >> 3;
  return row * 128 + (((group ^ row) & 7) | (group & 8)) * 8 + (col & 7);
}
// 64 columns (128-byte rows, A_qk): group' = group ^ (row & 7); bank group = group'.
KDA_HD constexpr int swz64(int row, int col) {
  return row * 64 + (((col >> 3) ^ row) & 7) * 8 + (col & 7);
}
// 32 columns (64-byte rows: U slice, V_new, bf16 state copy): group' = group ^ ((row >> 1) & 3).
//   Bank group = 4 (row & 1) + group': distinct over 8 consecutive rows starting at a multiple of
//   8, because (row & 1, (row >> 1) & 3) takes all 8 values there. A C-fragment access (rows
//   r0 + g, one 4-byte word per t) then hits 32 different banks.
KDA_HD constexpr int swz32(int row, int col) {
  return row * 32 + (((col >> 3) ^ (row >> 1)) & 3) * 8 + (col & 7);
}

// ------------------------------------------------------------------------------------------------
// ldmatrix.x4 address maps: which (stored row, stored column) the 16-byte row segment of `lane`
// starts at. i = lane >> 3 (matrix = destination register), r = lane & 7 (row of that matrix).
struct RowCol {
  int row;
  int col;
};

// A fragment of the 16x16 tile (m0.., k0..) of a row-major [m][k] matrix, no .trans:
//   reg 0 = a0: rows m0+0..7,  cols k0+0..7      reg 1 = a1: rows m0+8..15, cols k0+0..7
//   reg 2 = a2: rows m0+0..7,  cols k0+8..15     reg 3 = a3: rows m0+8..15, cols k0+8..15
// so matrix i covers rows m0 + 8 (i & 1) + r, columns k0 + 8 (i >> 1): lane (g, t) receives
// (row g [+8], cols 2t, 2t+1 [+8]) = exactly a0..a3.
KDA_HD constexpr RowCol ldsm_a_rowmajor(int lane, int m0, int k0) {
  const int i = lane >> 3;
  return {m0 + 8 * (i & 1) + (lane & 7), k0 + 8 * (i >> 1)};
}

// A fragment of the 16x16 tile (m0.., k0..) of A when A is stored transposed, [k][m] row-major
// (A[m][k] = stored[k][m]), with .trans. Matrix i must be the stored 8x8 block whose transpose is
// a_i: a0 = A rows m0+0..7 x cols k0+0..7 = stored rows k0+0..7, stored cols m0+0..7; a1 (A rows
// +8) = stored cols m0+8..15; a2 (A cols +8) = stored rows k0+8..15. So stored row =
// k0 + 8 (i >> 1) + r, stored column = m0 + 8 (i & 1). With .trans lane (g, t) receives stored
// (rows 2t, 2t+1; col g) = A (row g; cols 2t, 2t+1) of each block.
KDA_HD constexpr RowCol ldsm_a_colmajor(int lane, int m0, int k0) {
  const int i = lane >> 3;
  return {k0 + 8 * (i >> 1) + (lane & 7), m0 + 8 * (i & 1)};
}

// B fragments of two n8 tiles (n0.., n0+8..) at k-step k0 of B stored [k][n] row-major, with
// .trans: b0 of tile n0 = stored rows k0+0..7, cols n0+0..7 (lane (g, t) receives stored rows 2t,
// 2t+1, col g = B (k 2t, 2t+1; n g)); b1 = rows k0+8..15. Register order: reg 0 = b0(n0),
// reg 1 = b1(n0), reg 2 = b0(n0+8), reg 3 = b1(n0+8): stored row = k0 + 8 (i & 1) + r,
// stored column = n0 + 8 (i >> 1).
KDA_HD constexpr RowCol ldsm_b_kmajor(int lane, int k0, int n0) {
  const int i = lane >> 3;
  return {k0 + 8 * (i & 1) + (lane & 7), n0 + 8 * (i >> 1)};
}

// C fragment: row / column (inside the 16x8 tile) of accumulator register `reg` of `lane`.
KDA_HD constexpr int c_row(int lane, int reg) { return (lane >> 2) + 8 * (reg >> 1); }
KDA_HD constexpr int c_col(int lane, int reg) { return 2 * (lane & 3) + (reg & 1); }

}  // namespace kda::detail::mma
