// One random chunk of v1 record contents and PREP's writes of it (lab/src/records.h rec1_*), shared
// by the CPU emulations of the two SCANs that read the v1 record (test_scan_v1_layout.cpp: v1 SCAN,
// test_scan_t_layout.cpp: the transposed-state SCAN on mma.sync). Small integers and power-of-two
// decays, so the emulations' double arithmetic is exact.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "mma_emulation.h"  // tests/kda
#include "records.h"        // lab/src

namespace kda_test {

struct ChunkData {
  int n = kda::kChunk;
  std::vector<double> w, qp, kg, u;  // [64][128] (rows >= n zero)
  std::vector<double> aqk;           // [64][64] inclusive lower, rows >= n zero
  std::vector<double> a;             // [128]
};

inline ChunkData random_chunk(std::mt19937_64& rng, int n) {
  constexpr int kC = kda::kChunk, kD = kda::kHeadDim;
  ChunkData c;
  c.n = n;
  std::uniform_int_distribution<int> small(-1, 1), mid(-2, 2);
  auto fill = [&](std::vector<double>& m, int rows, int cols, bool lower) {
    m.assign(static_cast<size_t>(rows * cols), 0.0);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < cols; ++j) {
        if (!lower || j <= i) m[static_cast<size_t>(i * cols + j)] = small(rng);
      }
    }
  };
  fill(c.w, kC, kD, false);
  fill(c.qp, kC, kD, false);
  fill(c.kg, kC, kD, false);
  fill(c.aqk, kC, kC, true);
  c.u.assign(static_cast<size_t>(kC * kD), 0.0);
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < kD; ++d) c.u[static_cast<size_t>(i * kD + d)] = mid(rng);
  }
  const double decays[3] = {0.5, 1.0, 2.0};
  c.a.resize(kD);
  for (double& x : c.a) x = decays[rng() % 3];
  return c;
}

// PREP's writes of the chunk (RecordV1 in lab/src/forward_v0.cu and V1Record in prep_v2.cu use
// exactly these offsets).
inline Memory write_record(const ChunkData& c) {
  namespace v1 = kda::lab::v1;
  constexpr int kC = kda::kChunk, kD = kda::kHeadDim;
  Memory rec(kda::lab::kRecord1Bytes);
  for (int i = 0; i < kC; ++i) {
    for (int d = 0; d < kD; ++d) {
      const size_t e = static_cast<size_t>(i * kD + d);
      rec.at(v1::rec1_w(i, d)) = c.w[e];
      rec.at(v1::rec1_qp(i, d)) = c.qp[e];
      rec.at(v1::rec1_kg(i, d)) = c.kg[e];
      rec.at(v1::rec1_u(i, d)) = c.u[e];
    }
    for (int j = 0; j < kC; ++j) {
      rec.at(v1::rec1_aqk(i, j)) = c.aqk[static_cast<size_t>(i * kC + j)];
    }
  }
  for (int d = 0; d < kD; ++d) rec.at(v1::rec1_a(d)) = c.a[static_cast<size_t>(d)];
  return rec;
}

}  // namespace kda_test
