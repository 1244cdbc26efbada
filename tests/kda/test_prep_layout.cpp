// CPU emulation of the PREP's data movement (lib/kda/src/prep/prep_chunk.cuh): every shared-memory
// address, fragment element map, task split, anchor, Schur schedule and record offset comes from
// lib/kda/src/prep/prep_layout.h, record.h and device/fragments.h -- the same functions the kernel
// uses -- and mma.sync is the PTX model of mma_emulation.h. Phases 2, 3 (grams), 4 (blocked
// inverse) and 5 (W, U) of the kernel are replayed warp by warp, lane by lane, and compared with
// plain matrix products. Data are small integers and powers of two, the emulation computes in
// double, so the gram and W / U comparisons are exact. Unwritten shared memory is NaN, so a read of
// something the kernel never wrote shows up.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "device/fragments.h"  // lib/kda/src
#include "mma_emulation.h"
#include "prep/prep_layout.h"  // lib/kda/src
#include "record.h"            // lib/kda/src

namespace {

namespace mma = kda::detail::mma;
namespace prep = kda::detail::prep;
using kda::detail::rec_a;
using kda::detail::rec_aqk;
using kda::detail::rec_kg;
using kda::detail::rec_qp;
using kda::detail::rec_u;
using kda::detail::rec_u_bound;
using kda::detail::rec_w;
using namespace kda_test;  // NOLINT: the PTX models

constexpr int kC = kda::kChunk;    // 64
constexpr int kD = kda::kHeadDim;  // 128

// A fragment of a 16x16 tile: element (row, col) -> value, through the kernel's element maps.
template <class F>
Frag4 a_frag(F value) {
  Frag4 out{};
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r) {
      for (int e = 0; e < 2; ++e) out[l][r][e] = value(prep::a_row(l, r), prep::a_col(l, r, e));
    }
  }
  return out;
}
// B fragments of two n8 tiles (registers 0, 1: tile 0; 2, 3: tile 1): element (k, n) -> value.
template <class F>
Frag4 b_frag2(F value) {
  Frag4 out{};
  for (int l = 0; l < 32; ++l) {
    for (int nt = 0; nt < 2; ++nt) {
      for (int r = 0; r < 2; ++r) {
        for (int e = 0; e < 2; ++e) {
          out[l][2 * nt + r][e] = value(prep::b_k(l, r, e), 8 * nt + prep::b_n(l));
        }
      }
    }
  }
  return out;
}

// The record (record.h), with a write counter per 2-byte unit.
struct Record {
  Memory mem{kda::detail::kRecordBytes};
  std::vector<int> hits = std::vector<int>(static_cast<size_t>(kda::detail::kRecordBytes / 2), 0);
  void put(int64_t byte, double x) {
    mem.at(byte) = x;
    ++hits.at(static_cast<size_t>(byte / 2));
  }
  double get(int64_t byte) { return mem.at(byte); }
};

struct Chunk {
  int n = kC;
  std::vector<double> q, k, v, g;  // [64][128]; rows >= n: q = k = v = 0, G = G_{n-1}
  std::vector<double> beta;        // [64], rows >= n zero
  double at(const std::vector<double>& m, int i, int d) const {
    return m[static_cast<size_t>(i * kD + d)];
  }
};

Chunk random_chunk(std::mt19937_64& rng, int n) {
  Chunk c;
  c.n = n;
  std::uniform_int_distribution<int> small(-2, 2), step(0, 1), start(-3, 0), b(1, 3);
  const size_t size = static_cast<size_t>(kC * kD);
  c.q.assign(size, 0.0);
  c.k.assign(size, 0.0);
  c.v.assign(size, 0.0);
  c.g.assign(size, 0.0);
  c.beta.assign(kC, 0.0);
  for (int d = 0; d < kD; ++d) {
    double g = start(rng);
    for (int i = 0; i < kC; ++i) {
      if (i > 0 && i < n) g -= step(rng);  // non-increasing; rows >= n repeat G_{n-1}
      c.g[static_cast<size_t>(i * kD + d)] = g;
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < kD; ++d) {
      const size_t e = static_cast<size_t>(i * kD + d);
      c.q[e] = small(rng);
      c.k[e] = small(rng);
      c.v[e] = small(rng);
    }
    c.beta[static_cast<size_t>(i)] = b(rng);
  }
  return c;
}

// Shared memory after phase 1 (prep_layout.h addresses).
Memory load_smem(const Chunk& c) {
  Memory s(prep::kSBytes);
  for (int i = 0; i < kC; ++i) {
    for (int d = 0; d < kD; ++d) {
      s.at(prep::sq(i, d)) = c.at(c.q, i, d);
      s.at(prep::sk(i, d)) = c.at(c.k, i, d);
      s.at(prep::sv(i, d)) = c.at(c.v, i, d);
      s.at(prep::sg(i, d)) = c.at(c.g, i, d);
    }
    s.at(prep::kSBeta + 4 * i) = c.beta[static_cast<size_t>(i)];
  }
  return s;
}

// Phase 3 of the PREP (scale = 1 here: the kernel multiplies A_qk by 1/sqrt(128)).
void emulate_grams(Memory& s, Record& rec, int n) {
  for (int j = 0; j < kC; ++j) {  // the column operands, once per column block
    const int m = prep::anchor(j >> 4, n);
    for (int d = 0; d < kD; ++d) {
      const double x = s.at(prep::sk(j, d)) * std::exp2(s.at(prep::sg(m, d)) - s.at(prep::sg(j, d)));
      s.at(prep::scol(j, d)) = j < n ? x : 0.0;
    }
  }
  double akk[8][2][2][32][4];  // [warp][slot][n tile][lane][reg]
  for (int warp = 0; warp < 8; ++warp) {
    for (int slot = 0; slot < 2; ++slot) {
      const int task = warp + 8 * slot;
      if (task >= prep::kGramTasks) break;
      const int p = prep::gram_p(task);
      const int c = prep::gram_c(task);
      Acc acck[2]{}, accq[2]{};
      if (16 * c < n && 16 * p < n) {
        const int m = prep::anchor(c, n);
        EXPECT_GE(m, 16 * c);
        EXPECT_LT(m, 16 * c + 16);
        EXPECT_LT(m, n);
        for (int ks = 0; ks < kD / 16; ++ks) {
          const int d0 = 16 * ks;
          auto row_op = [&](int base, int row, int col) {
            const int i = 16 * p + row, d = d0 + col;
            return s.at(base == 0 ? prep::sk(i, d) : prep::sq(i, d)) *
                   std::exp2(s.at(prep::sg(i, d)) - s.at(prep::sg(m, d)));
          };
          const Frag4 ak = a_frag([&](int row, int col) { return row_op(0, row, col); });
          const Frag4 aq = a_frag([&](int row, int col) { return row_op(1, row, col); });
          const Frag4 b =
              b_frag2([&](int kk, int nn) { return s.at(prep::scol(16 * c + nn, d0 + kk)); });
          for (int nt = 0; nt < 2; ++nt) {
            run_mma(acck[nt], ak, b, 2 * nt);
            run_mma(accq[nt], aq, b, 2 * nt);
          }
        }
      }
      for (int nt = 0; nt < 2; ++nt) {
        for (int l = 0; l < 32; ++l) {
          for (int half = 0; half < 2; ++half) {
            const int i = 16 * p + mma::c_row(l, 2 * half);
            const double beta = s.at(prep::kSBeta + 4 * i);
            for (int e = 0; e < 2; ++e) {
              const int j = 16 * c + 8 * nt + mma::c_col(l, e);
              const int reg = 2 * half + e;
              akk[warp][slot][nt][l][reg] = (j < i && i < n) ? beta * acck[nt][l][reg] : 0.0;
              rec.put(rec_aqk(i, j), (j <= i && i < n) ? accq[nt][l][reg] : 0.0);
            }
          }
        }
      }
    }
  }
  // Barrier; the q region becomes A_kk.
  for (int warp = 0; warp < 8; ++warp) {
    for (int slot = 0; slot < 2; ++slot) {
      const int task = warp + 8 * slot;
      if (task >= prep::kGramTasks) break;
      const int p = prep::gram_p(task);
      const int c = prep::gram_c(task);
      for (int nt = 0; nt < 2; ++nt) {
        for (int l = 0; l < 32; ++l) {
          for (int reg = 0; reg < 4; ++reg) {
            s.at(prep::sa(16 * p + mma::c_row(l, reg), 16 * c + 8 * nt + mma::c_col(l, reg))) =
                akk[warp][slot][nt][l][reg];
          }
        }
      }
    }
  }
}

// Phase 2's A_qk part: zero upper blocks.
void emulate_aqk_zero(Record& rec) {
  for (int e = 0; e < kC * kC / 2; ++e) {
    const int i = e >> 5, j = 2 * (e & 31);
    if ((i >> 4) < (j >> 4)) {
      rec.put(rec_aqk(i, j), 0.0);
      rec.put(rec_aqk(i, j + 1), 0.0);
    }
  }
}

TEST(PrepLayout, FragmentMapsCoverTilesOnce) {
  int a_hits[16][16] = {}, b_hits[16][8] = {};
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r) {
      for (int e = 0; e < 2; ++e) ++a_hits[prep::a_row(l, r)][prep::a_col(l, r, e)];
    }
    for (int r = 0; r < 2; ++r) {
      for (int e = 0; e < 2; ++e) ++b_hits[prep::b_k(l, r, e)][prep::b_n(l)];
    }
  }
  for (auto& row : a_hits) {
    for (int h : row) EXPECT_EQ(h, 1);
  }
  for (auto& row : b_hits) {
    for (int h : row) EXPECT_EQ(h, 1);
  }
  // Gram tasks: the 10 lower block pairs, each once.
  int pairs[4][4] = {};
  for (int t = 0; t < prep::kGramTasks; ++t) {
    ASSERT_GE(prep::gram_p(t), prep::gram_c(t));
    ++pairs[prep::gram_p(t)][prep::gram_c(t)];
  }
  for (int p = 0; p < 4; ++p) {
    for (int c = 0; c <= p; ++c) EXPECT_EQ(pairs[p][c], 1);
  }
}

TEST(PrepLayout, SharedMemoryRegions) {
  // Regions in order, disjoint, 16-byte aligned rows (cp.async, uint4 / float4 stores).
  EXPECT_EQ(prep::kSQ, 0);
  EXPECT_LE(prep::sq(kC - 1, kD - 1) + 2, prep::kSK);
  EXPECT_LE(prep::sa(kC - 1, kC - 1) + 4, prep::kSK);
  EXPECT_LE(prep::sk(kC - 1, kD - 1) + 2, prep::kSV);
  EXPECT_LE(prep::sv(kC - 1, kD - 1) + 2, prep::kSG);
  EXPECT_LE(prep::sg(kC - 1, kD - 1) + 4, prep::kSX);
  EXPECT_LE(prep::sx(kC - 1, kC - 1) + 4, prep::kSY);
  EXPECT_LE(prep::scol(kC - 1, kD - 1) + 2, prep::kSY);
  EXPECT_LE(prep::sy(prep::schur_units(1) - 1, 15, 7) + 4, prep::kSBeta);
  EXPECT_LE(prep::schur_units(1), 8) << "one warp per Schur unit";
  EXPECT_LE(prep::kSBeta + 4 * kC, prep::kSBytes);
  for (int i = 0; i < kC; ++i) {
    EXPECT_EQ(prep::sq(i, 0) % 16, 0);
    EXPECT_EQ(prep::sk(i, 0) % 16, 0);
    EXPECT_EQ(prep::sv(i, 0) % 16, 0);
    EXPECT_EQ(prep::sg(i, 0) % 16, 0);
    EXPECT_EQ(prep::sx(i, 0) % 16, 0);  // float2 fragment reads, float4 Schur row reads
    EXPECT_EQ(prep::sa(i, 0) % 16, 0);  // float4 Schur row reads
  }
  EXPECT_LE(2 * (prep::kSBytes + 1024), 228 * 1024) << "two CTAs per SM";
  // Reuse: beta k Gamma over the G region (stored after the barrier that ends phase 4a, when G
  // is dead), T's copies over the A_kk region.
  EXPECT_LE(prep::skt(kC - 1, kD - 1) + 2, prep::kSX);
  for (int t = 0; t < kC; ++t) {
    EXPECT_EQ(prep::skt(t, 0) % 16, 0);
    EXPECT_GE(prep::skt(t, 0), prep::kSG);
  }
  EXPECT_LE(prep::stb(kC - 1, kC - 1) + 2, prep::kSK);
  EXPECT_EQ(prep::st16(0, 0), prep::kSA);
}

TEST(PrepLayout, GramsMatchDirectSums) {
  std::mt19937_64 rng(77);
  for (const int n : {64, 57, 37, 17, 16, 9, 1}) {
    const Chunk c = random_chunk(rng, n);
    Memory s = load_smem(c);
    Record rec;
    emulate_aqk_zero(rec);
    emulate_grams(s, rec, n);
    for (int i = 0; i < kC; ++i) {
      for (int j = 0; j < kC; ++j) {
        double kk = 0, qk = 0;
        for (int d = 0; d < kD; ++d) {
          const double decay = std::exp2(c.at(c.g, i, d) - c.at(c.g, j, d));
          kk += c.at(c.k, i, d) * c.at(c.k, j, d) * decay;
          qk += c.at(c.q, i, d) * c.at(c.k, j, d) * decay;
        }
        const std::string what = "n " + std::to_string(n) + " (" + std::to_string(i) + ", " +
                                 std::to_string(j) + ")";
        ASSERT_EQ(rec.get(rec_aqk(i, j)), (j <= i && i < n) ? qk : 0.0) << what << " A_qk";
        ASSERT_EQ(rec.hits[static_cast<size_t>(rec_aqk(i, j) / 2)], 1) << what;
        if (i / 16 >= j / 16) {  // the blocks the inverse reads
          ASSERT_EQ(s.at(prep::sa(i, j)), (j < i && i < n) ? c.beta[static_cast<size_t>(i)] * kk : 0.0)
              << what << " A_kk";
        }
      }
    }
  }
}

// Phases 4a / 4b on the shared-memory model.
void emulate_inverse(Memory& s) {
  for (int p = 0; p < 4; ++p) {  // warps 0..3, lanes 0..15
    const int base = 16 * p;
    for (int lane = 0; lane < 16; ++lane) {
      double x[16];
      for (int i = 0; i < 16; ++i) {
        double acc = 0;
        for (int r = 0; r < i; ++r) acc += s.at(prep::sa(base + i, base + r)) * x[r];
        x[i] = (i == lane ? 1.0 : 0.0) - acc;
      }
      for (int i = 0; i < 16; ++i) s.at(prep::sx(base + i, base + lane)) = x[i];
    }
  }
  // Phase 4b on tensor cores: the fragments of each unit through the kernel's maps and the PTX
  // mma model (values are exact doubles here, so the kernel's hi + lo splits are x + 0).
  for (int level = 1; level <= 3; ++level) {
    std::set<std::pair<int, int>> written;  // (block, column) pairs, each exactly once
    for (int u = 0; u < prep::schur_units(level); ++u) {
      const int e = prep::schur_block(u);
      const int p = prep::schur_p(level, e), c = prep::schur_c(level, e);
      EXPECT_EQ(p - c, level);
      const int n0 = 16 * c + 8 * prep::schur_ntile(u);
      Acc y{};
      for (int r = c; r < p; ++r) {
        const Frag4 a = a_frag([&](int row, int col) { return s.at(prep::sa(16 * p + row, 16 * r + col)); });
        const Frag4 b = b_frag2([&](int k, int n) {
          return n < 8 ? s.at(prep::sx(16 * r + k, n0 + n)) : 0.0;
        });
        run_mma(y, a, b, 0);
      }
      for (int l = 0; l < 32; ++l) {
        for (int reg = 0; reg < 4; ++reg) s.at(prep::sy(u, mma::c_row(l, reg), mma::c_col(l, reg))) = y[l][reg];
      }
      const Frag4 a = a_frag([&](int row, int col) { return s.at(prep::sx(16 * p + row, 16 * p + col)); });
      const Frag4 b = b_frag2([&](int k, int n) { return n < 8 ? s.at(prep::sy(u, k, n)) : 0.0; });
      Acc x{};
      run_mma(x, a, b, 0);
      for (int l = 0; l < 32; ++l) {
        for (int reg = 0; reg < 4; ++reg) {
          const int row = 16 * p + mma::c_row(l, reg), col = n0 + mma::c_col(l, reg);
          s.at(prep::sx(row, col)) = -x[l][reg];
          EXPECT_TRUE(written.insert({row, col}).second) << "written twice: " << row << ", " << col;
        }
      }
    }
    EXPECT_EQ(written.size(), static_cast<size_t>(prep::schur_blocks(level) * 256));
  }
}

TEST(PrepLayout, BlockedInverseSolves) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-0.25, 0.25);
  for (int trial = 0; trial < 3; ++trial) {
    Memory s(prep::kSBytes);
    std::vector<double> a(static_cast<size_t>(kC * kC), 0.0);
    for (int i = 0; i < kC; ++i) {
      for (int j = 0; j < kC; ++j) {
        if (j < i) a[static_cast<size_t>(i * kC + j)] = u(rng);
        if (i / 16 >= j / 16) s.at(prep::sa(i, j)) = a[static_cast<size_t>(i * kC + j)];
      }
    }
    emulate_inverse(s);
    for (int i = 0; i < kC; ++i) {
      for (int j = 0; j <= i; ++j) {  // (I + A) X = I on the lower triangle (X is lower)
        double acc = s.at(prep::sx(i, j));
        for (int r = j; r < i; ++r) acc += a[static_cast<size_t>(i * kC + r)] * s.at(prep::sx(r, j));
        ASSERT_NEAR(acc, i == j ? 1.0 : 0.0, 1e-12) << "(" << i << ", " << j << ")";
      }
      for (int j = i + 1; j < kC; ++j) {
        if (i / 16 == j / 16) {
          ASSERT_EQ(s.at(prep::sx(i, j)), 0.0) << "diagonal block upper part";
        }
      }
    }
  }
}

// Phase 5: W = T (beta k Gamma), U = (T diag beta) v scaled per column (the record), record
// rows >= n zero.
TEST(PrepLayout, WUProductsMatchMatrixProducts) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> small(-2, 2);
  for (const int n : {64, 37, 1}) {
    const Chunk c = random_chunk(rng, n);
    Memory s = load_smem(c);
    // Unit lower triangular, as T = (I + A_kk)^-1 is (phase 5 relies on T_ii = 1 for U).
    std::vector<double> t(static_cast<size_t>(kC * kC), 0.0);
    for (int i = 0; i < kC; ++i) {
      for (int j = 0; j < kC; ++j) {
        if (j <= i) t[static_cast<size_t>(i * kC + j)] = j == i ? 1.0 : small(rng);
        if (i / 16 >= j / 16) s.at(prep::sx(i, j)) = t[static_cast<size_t>(i * kC + j)];
      }
    }
    // Phase 4a (warps 4..7): W's right-hand side, computed from shared memory before the G
    // region is overwritten (U's is v as loaded); phase 5a: T's fp16 copy and (T - I) diag(beta)'s
    // bf16 copy (lower blocks; U's diagonal term beta_i v_i starts the accumulators).
    std::vector<double> kt(static_cast<size_t>(kC * kD));
    for (int tok = 0; tok < kC; ++tok) {
      for (int d = 0; d < kD; ++d) {
        const double beta = s.at(prep::kSBeta + 4 * tok);
        kt[static_cast<size_t>(tok * kD + d)] =
            beta * s.at(prep::sk(tok, d)) * std::exp2(s.at(prep::sg(tok, d)));
      }
    }
    for (int tok = 0; tok < kC; ++tok) {
      for (int d = 0; d < kD; ++d) s.at(prep::skt(tok, d)) = kt[static_cast<size_t>(tok * kD + d)];
    }
    for (int i = 0; i < kC; ++i) {
      for (int j = 0; j < kC; ++j) {
        if (i / 16 < j / 16) continue;
        s.at(prep::st16(i, j)) = s.at(prep::sx(i, j));
        s.at(prep::stb(i, j)) = i == j ? 0.0 : s.at(prep::sx(i, j)) * s.at(prep::kSBeta + 4 * j);
      }
    }
    bank_conflicts = 0;
    Record rec;
    for (int warp = 0; warp < 8; ++warp) {
      const int n0 = prep::wu_n0(warp);
      for (int pass = 0; pass < 2; ++pass) {
        const bool is_w = pass == 0;
        const int rhs = is_w ? prep::kSKT : prep::kSV;
        Acc acc[4][2]{};
        if (!is_w) {  // U: the accumulators start from beta_i v_i
          for (int mt = 0; mt < 4; ++mt)
            for (int nt = 0; nt < 2; ++nt)
              for (int l = 0; l < 32; ++l)
                for (int reg = 0; reg < 4; ++reg) {
                  const int i = 16 * mt + mma::c_row(l, reg), d = n0 + 8 * nt + mma::c_col(l, reg);
                  acc[mt][nt][l][reg] = s.at(prep::kSBeta + 4 * i) * s.at(prep::sv(i, d));
                }
        }
        for (int ks = 0; ks < kC / 16; ++ks) {
          const Frag4 b = ldmatrix_x4(s, per_lane([&](int l) {
            return rhs + 2 * ((16 * ks + prep::ldsm_bt_row(l)) * prep::kLdH + n0 + prep::ldsm_bt_col(l));
          }), /*trans=*/true);
          for (int mt = ks; mt < kC / 16; ++mt) {
            const Frag4 a = ldmatrix_x4(s, per_lane([&](int l) {
              const int row = 16 * mt + prep::ldsm_a_row(l), col = 16 * ks + prep::ldsm_a_col(l);
              return is_w ? prep::st16(row, col) : prep::stb(row, col);
            }), /*trans=*/false);
            for (int nt = 0; nt < 2; ++nt) run_mma(acc[mt][nt], a, b, 2 * nt);
          }
        }
        // The record: U's column scales (prep_chunk.cuh u_column_scales), lane by lane: a lane's max
        // over its valid rows, then over the lanes of its column (xor 4, 8, 16).
        double u_mult[32][2][2];
        for (int l = 0; l < 32; ++l)
          for (int nt = 0; nt < 2; ++nt) u_mult[l][nt][0] = u_mult[l][nt][1] = 1.0;
        if (!is_w) {
          for (int nt = 0; nt < 2; ++nt) {
            for (int e = 0; e < 2; ++e) {
              double lane_max[32];
              for (int l = 0; l < 32; ++l) {
                lane_max[l] = 0.0;
                for (int mt = 0; mt < 4; ++mt)
                  for (int half = 0; half < 2; ++half)
                    if (16 * mt + mma::c_row(l, 2 * half) < n)
                      lane_max[l] = std::max(lane_max[l], std::fabs(acc[mt][nt][l][2 * half + e]));
              }
              for (int l = 0; l < 32; ++l) {
                double m = 0.0;
                for (int x = 0; x < 8; ++x) m = std::max(m, lane_max[(l & 3) | (x << 2)]);
                int ex = 0;
                std::frexp(m, &ex);
                u_mult[l][nt][e] = m > 0.0 ? std::ldexp(1.0, 15 - ex) : 1.0;
                if (l < 4) {
                  rec.put(rec_u_bound(n0 + 8 * nt + mma::c_col(l, e)),
                          m > 0.0 ? std::ldexp(1.0, ex) : 0.0);
                }
              }
            }
          }
        }
        for (int mt = 0; mt < 4; ++mt) {
          for (int nt = 0; nt < 2; ++nt) {
            for (int l = 0; l < 32; ++l) {
              for (int half = 0; half < 2; ++half) {
                const int i = 16 * mt + mma::c_row(l, 2 * half);
                const int d = n0 + 8 * nt + mma::c_col(l, 0);
                for (int e = 0; e < 2; ++e) {
                  const int64_t byte = (is_w ? rec_w(i, d) : rec_u(i, d)) + 2 * e;
                  rec.put(byte, i < n ? acc[mt][nt][l][2 * half + e] * u_mult[l][nt][e] : 0.0);
                }
              }
            }
          }
        }
      }
    }
    EXPECT_EQ(bank_conflicts, 0) << "phase 5 ldmatrix phases must be conflict-free";
    // U's column bound: the least power of two above the column's max |U| (0 for a zero column),
    // and the stored U scaled by 2^15 / bound.
    std::vector<double> u_exact(static_cast<size_t>(kC * kD), 0.0), bound(kD, 0.0);
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < kD; ++d) {
        double u = 0;
        for (int j = 0; j <= i; ++j) {
          u += t[static_cast<size_t>(i * kC + j)] * c.beta[static_cast<size_t>(j)] * c.at(c.v, j, d);
        }
        u_exact[static_cast<size_t>(i * kD + d)] = u;
        bound[static_cast<size_t>(d)] = std::max(bound[static_cast<size_t>(d)], std::fabs(u));
      }
    }
    for (double& b : bound) {  // max -> the least power of two above it
      int ex = 0;
      std::frexp(b, &ex);
      b = b > 0.0 ? std::ldexp(1.0, ex) : 0.0;
      EXPECT_TRUE(b == 0.0 || b > 1.0) << "integer data: every non-zero column max is >= 1";
    }
    for (int d = 0; d < kD; ++d) {
      ASSERT_EQ(rec.get(rec_u_bound(d)), bound[static_cast<size_t>(d)]) << "column " << d;
    }
    for (int i = 0; i < kC; ++i) {
      for (int d = 0; d < kD; ++d) {
        double w = 0;
        for (int j = 0; j <= i; ++j) {
          const double tij = t[static_cast<size_t>(i * kC + j)];
          const double beta = c.beta[static_cast<size_t>(j)];
          w += tij * beta * c.at(c.k, j, d) * std::exp2(c.at(c.g, j, d));
        }
        const double b = bound[static_cast<size_t>(d)];
        const double u = i < n && b > 0.0 ? u_exact[static_cast<size_t>(i * kD + d)] * 32768.0 / b : 0.0;
        const std::string what = "n " + std::to_string(n) + " (" + std::to_string(i) + ", " +
                                 std::to_string(d) + ")";
        ASSERT_EQ(rec.get(rec_w(i, d)), i < n ? w : 0.0) << what << " W";
        ASSERT_EQ(rec.get(rec_u(i, d)), u) << what << " U";
        ASSERT_LT(std::fabs(u), 32768.0) << what << " stored U stays below 2^15";
        ASSERT_EQ(rec.hits[static_cast<size_t>(rec_w(i, d) / 2)], 1) << what;
        ASSERT_EQ(rec.hits[static_cast<size_t>(rec_u(i, d) / 2)], 1) << what;
      }
    }
  }
}

// Phases 2, 3 and 5 together write every 16-bit value of the record exactly once (phase 2's q', kg pairs
// and a included), so no stale bytes of an earlier chunk survive in a reused workspace.
// Phase 2a's fused q norm: each warp's 8 sums of squares as the diagonal of X X^T (mma.sync with
// one ldmatrix.x4 per k-step serving as both A and B). The rows are exactly the ones the warp
// loads itself (2a runs before the CTA's load barrier), each diagonal lands in one lane, the
// values are the row sums, and no ldmatrix phase has a shared-memory bank conflict.
TEST(PrepLayout, RowSumsOfSquaresOnTheDiagonal) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(-9, 9);
  Memory smem(prep::kSBytes);
  std::vector<std::vector<double>> q(kC, std::vector<double>(kD));
  for (int i = 0; i < kC; ++i) {
    for (int c = 0; c < kD; ++c) smem.at(prep::sq(i, c)) = q[i][c] = value(rng);
  }
  std::set<int> all_rows;
  std::set<std::pair<int, int>> loaded_units;
  for (int warp = 0; warp < 8; ++warp) {
    std::set<int> rows, loaded_rows;
    for (int j = 0; j < 8; ++j) rows.insert(prep::ssq_row(warp, j));
    for (int lane = 0; lane < 32; ++lane) {
      for (int it = 0; it < 4; ++it) {
        const int row = prep::q_load_row(warp, lane, it);
        loaded_rows.insert(row);
        EXPECT_TRUE(loaded_units.insert({row, prep::q_load_col(lane)}).second)
            << "q unit loaded twice: warp " << warp << " lane " << lane << " it " << it;
      }
    }
    EXPECT_EQ(rows, loaded_rows) << "warp " << warp << " reads only rows it loaded";
    all_rows.insert(rows.begin(), rows.end());
    static_assert(prep::kSsqChains == 4, "the kernel adds (0 + 1) + (2 + 3)");
    std::array<Acc, prep::kSsqChains> chains{};
    for (int ks = 0; ks < kD / 16; ++ks) {
      const auto address = per_lane([&](int l) { return prep::ssq_ldsm(warp, l, ks, prep::kSQ); });
      // Each matrix's 8 row addresses (one shared-memory wavefront when conflict-free) fall in
      // 8 distinct 16-byte bank groups.
      for (int m = 0; m < 4; ++m) {
        std::set<int> groups;
        for (int l = 8 * m; l < 8 * m + 8; ++l) groups.insert((address[l] / 16) % 8);
        EXPECT_EQ(groups.size(), 8u) << "bank conflict: warp " << warp << " ks " << ks;
      }
      // One ldmatrix.x4: the registers are the A fragment, registers 0 and 1 the B fragment.
      const Frag4 x = ldmatrix_x4(smem, address, /*trans=*/false);
      run_mma(chains[ks % prep::kSsqChains], x, x, /*b_reg0=*/0);
    }
    Acc acc{};
    for (int l = 0; l < 32; ++l) {
      for (int r = 0; r < 4; ++r) {
        acc[l][r] = (chains[0][l][r] + chains[1][l][r]) + (chains[2][l][r] + chains[3][l][r]);
      }
    }
    int holders = 0;
    for (int l = 0; l < 32; ++l) {
      if (!prep::ssq_holds_diagonal(l)) continue;
      ++holders;
      const int row = prep::ssq_row(warp, l / 4);
      double ssq = 0;
      for (int c = 0; c < kD; ++c) ssq += q[row][c] * q[row][c];
      EXPECT_EQ(acc[l][prep::ssq_diagonal_reg(l)], ssq) << "warp " << warp << " lane " << l;
    }
    EXPECT_EQ(holders, 8);
  }
  EXPECT_EQ(all_rows.size(), static_cast<size_t>(kC)) << "the 8 warps cover every row once";
  EXPECT_EQ(loaded_units.size(), static_cast<size_t>(kC * kD / 8)) << "every q unit is loaded";
}

TEST(PrepLayout, RecordIsExactlyCovered) {
  // The record: W, q', kg at their key-half-split places (record.h rec_split), A_qk, U, a,
  // then U's 128 column bounds (phase 5, lanes 0..3 of each warp).
  std::vector<int> hits(static_cast<size_t>(kda::detail::kRecordBytes), 0);
  auto mark = [&](int64_t byte, int size) {
    for (int b = 0; b < size; ++b) ++hits.at(static_cast<size_t>(byte + b));
  };
  for (int e = 0; e < kC * kD / 2; ++e) {  // phase 2
    const int i = e >> 6, d = 2 * (e & 63);
    mark(rec_qp(i, d), 4);
    mark(rec_kg(i, d), 4);
  }
  for (int d = 0; d < kD; ++d) mark(rec_a(d), 4);
  for (int e = 0; e < kC * kC / 2; ++e) {
    const int i = e >> 5, j = 2 * (e & 31);
    if ((i >> 4) < (j >> 4)) mark(rec_aqk(i, j), 4);
  }
  for (int task = 0; task < prep::kGramTasks; ++task) {  // phase 3
    for (int l = 0; l < 32; ++l) {
      for (int nt = 0; nt < 2; ++nt) {
        for (int half = 0; half < 2; ++half) {
          const int i = 16 * prep::gram_p(task) + mma::c_row(l, 2 * half);
          const int j = 16 * prep::gram_c(task) + 8 * nt + mma::c_col(l, 0);
          mark(rec_aqk(i, j), 4);
        }
      }
    }
  }
  for (int warp = 0; warp < 8; ++warp) {  // phase 5
    for (int l = 0; l < 32; ++l) {
      for (int mt = 0; mt < 4; ++mt) {
        for (int nt = 0; nt < 2; ++nt) {
          for (int half = 0; half < 2; ++half) {
            const int i = 16 * mt + mma::c_row(l, 2 * half);
            const int d = prep::wu_n0(warp) + 8 * nt + mma::c_col(l, 0);
            EXPECT_EQ(rec_w(i, d) % 4, 0);
            EXPECT_EQ(rec_u(i, d) % 4, 0);
            EXPECT_EQ(rec_w(i, d + 1), rec_w(i, d) + 2) << "pair stays contiguous";
            EXPECT_EQ(rec_u(i, d + 1), rec_u(i, d) + 2) << "pair stays contiguous";
            mark(rec_w(i, d), 4);
            mark(rec_u(i, d), 4);
          }
        }
      }
      for (int nt = 0; nt < 2; ++nt) {
        for (int e = 0; e < 2; ++e) {
          if (l < 4) mark(rec_u_bound(prep::wu_n0(warp) + 8 * nt + mma::c_col(l, e)), 4);
        }
      }
    }
  }
  for (size_t b = 0; b < hits.size(); ++b) ASSERT_EQ(hits[b], 1) << "record byte " << b;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// The channel-halves PREP (prep/halves_chunk.cuh, prep_layout.h `halves`): what its regions hold
// in each phase, and its grams, accumulated over the two halves' k-steps, against direct sums.
namespace halves = prep::halves;

// Every (region, element) of a live set written with a distinct value, then read back: an overlap
// between two regions alive together shows up as a changed value.
struct Region {
  const char* name;
  int rows, cols;
  int (*at)(int, int);
};
void expect_disjoint(const std::vector<Region>& live, const char* phase) {
  Memory s(halves::kSBytes);
  double value = 0;
  for (const Region& r : live) {
    for (int i = 0; i < r.rows; ++i) {
      for (int j = 0; j < r.cols; ++j) s.at(r.at(i, j)) = ++value;
    }
  }
  value = 0;
  for (const Region& r : live) {
    for (int i = 0; i < r.rows; ++i) {
      for (int j = 0; j < r.cols; ++j) {
        ASSERT_EQ(s.at(r.at(i, j)), ++value) << phase << ": " << r.name << " (" << i << ", " << j
                                             << ") is also another live region's";
      }
    }
  }
}

TEST(PrepLayout, HalvesRegionsPerPhase) {
  const Region q{"q", kC, kD, [](int i, int d) { return prep::sq(i, d); }};
  const Region kt{"beta k Gamma / raw k", kC, kD, [](int i, int d) { return halves::skt(i, d); }};
  const Region k{"k half", kC, halves::kHalf, [](int i, int d) { return halves::sk(i, d); }};
  const Region g{"G half", kC, halves::kHalf, [](int i, int d) { return halves::sg(i, d); }};
  const Region col{"column operands", kC, halves::kHalf,
                   [](int i, int d) { return halves::scol(i, d); }};
  const Region y{"Schur scratch", prep::schur_units(1) * 16, 8,
                 [](int u, int c) { return halves::Tail::y(u / 16, u % 16, c); }};
  const Region scalars{"beta, q and k factors", 3, kC, [](int which, int i) {
                         return (which == 0 ? halves::kSBeta
                                            : which == 1 ? halves::kSQScale : halves::kSKScale) +
                                4 * i;
                       }};
  const Region akk{"A_kk", kC, kC, [](int i, int j) { return prep::sa(i, j); }};
  const Region x{"X = T", kC, kC, [](int i, int j) { return halves::Tail::x(i, j); }};
  const Region v{"v", kC, kD, [](int i, int d) { return halves::Tail::v(i, d); }};
  const Region t16{"T fp16", kC, kC, [](int i, int j) { return prep::st16(i, j); }};
  const Region tb{"T bf16", kC, kC, [](int i, int j) { return prep::stb(i, j); }};
  // Phases 1 - 3 (v not loaded yet), the grams' end to the inverse (v landing beside X), phase 5.
  expect_disjoint({q, kt, k, g, col, y, scalars}, "phases 1-3");
  expect_disjoint({akk, kt, x, v, y, scalars}, "phase 4");
  expect_disjoint({t16, tb, kt, x, v, scalars}, "phases 5a-5");
  // Everything inside the CTA's bytes, three CTAs per SM, 16-byte aligned rows for cp.async and
  // the uint4 / float4 accesses.
  EXPECT_LE(halves::kSKScale + 4 * kC, halves::kSBytes);
  EXPECT_LE(3 * (halves::kSBytes + 1024), 228 * 1024) << "three CTAs per SM";
  for (int i = 0; i < kC; ++i) {
    for (int c = 0; c < halves::kHalf; c += 8) {
      EXPECT_EQ(halves::sk(i, c) % 16, 0);
      EXPECT_EQ(halves::scol(i, c) % 16, 0);
    }
    for (int c = 0; c < halves::kHalf; c += 4) EXPECT_EQ(halves::sg(i, c) % 16, 0);
    EXPECT_EQ(halves::skt(i, 0) % 16, 0);
    EXPECT_EQ(halves::Tail::v(i, 0) % 16, 0);
    EXPECT_EQ(halves::Tail::x(i, 0) % 16, 0);
  }
  // The raw gate's strips (halves_chunk.cuh HalfGateStrips: warp w < 4 stages its 16 channels in
  // bytes [64 w, 64 w + 64) of each G row; bf16 rows >= 32 at +32): inside the row's 64 channels.
  for (int w = 0; w < halves::kHalf / 16; ++w) {
    EXPECT_EQ(halves::sg(0, 16 * w) + 64, halves::sg(0, 16 * w + 15) + 4);
  }
}

// The grams' fragment reads on the halves' pitches hit distinct banks (prep_layout.h): 4-byte
// pairs of k and the column operands over the whole warp, 8-byte pairs of G per half warp.
TEST(PrepLayout, HalvesGramReadsAreConflictFree) {
  for (int r = 0; r < 4; ++r) {
    std::set<int> k_banks, col_banks;
    std::set<int> g_banks[2];
    for (int l = 0; l < 32; ++l) {
      k_banks.insert((halves::sk(prep::a_row(l, r), prep::a_col(l, r, 0)) / 4) % 32);
      const int word = halves::sg(prep::a_row(l, r), prep::a_col(l, r, 0)) / 4;
      g_banks[l / 16].insert(word % 32);
      g_banks[l / 16].insert((word + 1) % 32);
      if (r < 2) col_banks.insert((halves::scol(prep::b_n(l), prep::b_k(l, r, 0)) / 4) % 32);
    }
    EXPECT_EQ(k_banks.size(), 32u) << "k, A register " << r;
    EXPECT_EQ(g_banks[0].size(), 32u) << "G, A register " << r;
    EXPECT_EQ(g_banks[1].size(), 32u) << "G, A register " << r;
    if (r < 2) {
      EXPECT_EQ(col_banks.size(), 32u) << "column operands, B register " << r;
    }
  }
}

TEST(PrepLayout, HalvesGramsMatchDirectSums) {
  std::mt19937_64 rng(78);
  for (const int n : {64, 45, 16, 1}) {
    const Chunk c = random_chunk(rng, n);
    Memory s(halves::kSBytes);
    for (int i = 0; i < kC; ++i) {
      for (int d = 0; d < kD; ++d) s.at(prep::sq(i, d)) = c.at(c.q, i, d);
      s.at(halves::kSBeta + 4 * i) = c.beta[static_cast<size_t>(i)];
    }
    Acc acck[8][2][2]{}, accq[8][2][2]{};  // [warp][slot][n tile], kept over both halves
    for (int half = 0; half < 2; ++half) {
      const int d_base = halves::kHalf * half;
      for (int i = 0; i < kC; ++i) {  // the half's k and G over the previous half's
        for (int d = 0; d < halves::kHalf; ++d) {
          s.at(halves::sk(i, d)) = c.at(c.k, i, d_base + d);
          s.at(halves::sg(i, d)) = c.at(c.g, i, d_base + d);
        }
      }
      for (int j = 0; j < kC; ++j) {  // phase 2's column operands
        const int m = prep::anchor(j >> 4, n);
        for (int d = 0; d < halves::kHalf; ++d) {
          const double x = s.at(halves::sk(j, d)) *
                           std::exp2(s.at(halves::sg(m, d)) - s.at(halves::sg(j, d)));
          s.at(halves::scol(j, d)) = j < n ? x : 0.0;
        }
      }
      for (int warp = 0; warp < 8; ++warp) {  // phase 3, the half's k-steps
        for (int slot = 0; slot < 2; ++slot) {
          const int task = warp + 8 * slot;
          if (task >= prep::kGramTasks) break;
          const int p = prep::gram_p(task);
          const int cb = prep::gram_c(task);
          if (16 * cb >= n || 16 * p >= n) continue;
          const int m = prep::anchor(cb, n);
          for (int ks = 0; ks < halves::kHalf / 16; ++ks) {
            const int d0 = 16 * ks;
            auto row_op = [&](bool is_k, int row, int col) {
              const int i = 16 * p + row, d = d0 + col;
              return s.at(is_k ? halves::sk(i, d) : prep::sq(i, d_base + d)) *
                     std::exp2(s.at(halves::sg(i, d)) - s.at(halves::sg(m, d)));
            };
            const Frag4 ak = a_frag([&](int row, int col) { return row_op(true, row, col); });
            const Frag4 aq = a_frag([&](int row, int col) { return row_op(false, row, col); });
            const Frag4 b =
                b_frag2([&](int kk, int nn) { return s.at(halves::scol(16 * cb + nn, d0 + kk)); });
            for (int nt = 0; nt < 2; ++nt) {
              run_mma(acck[warp][slot][nt], ak, b, 2 * nt);
              run_mma(accq[warp][slot][nt], aq, b, 2 * nt);
            }
          }
        }
      }
    }
    // Phase 3': every block pair's accumulators against the direct sums over all 128 channels.
    for (int warp = 0; warp < 8; ++warp) {
      for (int slot = 0; slot < 2; ++slot) {
        const int task = warp + 8 * slot;
        if (task >= prep::kGramTasks) break;
        const int p = prep::gram_p(task);
        const int cb = prep::gram_c(task);
        for (int nt = 0; nt < 2; ++nt) {
          for (int l = 0; l < 32; ++l) {
            for (int reg = 0; reg < 4; ++reg) {
              const int i = 16 * p + mma::c_row(l, reg);
              const int j = 16 * cb + 8 * nt + mma::c_col(l, reg);
              double kk = 0, qk = 0;
              if (i < n && j < n) {
                for (int d = 0; d < kD; ++d) {
                  const double decay = std::exp2(c.at(c.g, i, d) - c.at(c.g, j, d));
                  kk += c.at(c.k, i, d) * c.at(c.k, j, d) * decay;
                  qk += c.at(c.q, i, d) * c.at(c.k, j, d) * decay;
                }
              }
              const std::string what = "n " + std::to_string(n) + " (" + std::to_string(i) +
                                       ", " + std::to_string(j) + ")";
              ASSERT_EQ(acck[warp][slot][nt][l][reg], kk) << what << " k gram";
              ASSERT_EQ(accq[warp][slot][nt][l][reg], qk) << what << " q gram";
            }
          }
        }
      }
    }
  }
}
