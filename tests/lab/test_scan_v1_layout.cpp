// CPU emulation of the v1 (tensor-core) SCAN's data movement (no GPU): ldmatrix and
// mma.sync.m16n8k16 are modelled here from their PTX ISA definitions, independently of the
// library, while every address, lane map, tile assignment, record offset and copy size comes from
// lab/src/scan_v1_layout.h and records.h (on lib/kda/src/device/fragments.h) -- the same
// functions the kernels use. Running whole chunks of the v1
// SCAN this way and comparing with plain matrix products catches layout and address bugs (wrong
// swizzle, wrong ldmatrix lane map, wrong fragment order, wrong .trans use, wrong record offset)
// before the kernel ever runs. Values are small integers and the emulation computes in double, so
// every comparison is exact. It also checks that every ldmatrix phase and every C-fragment access
// is free of shared-memory bank conflicts.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "mma_emulation.h"  // tests/kda
#include "record_chunk.h"
#include "records.h"         // lab/src
#include "scan_v1_layout.h"  // lab/src
#include "scans.h"           // lab/src

namespace {

namespace v1 = kda::lab::v1;
using kda::lab::kRec1A;
using kda::lab::kRec1AQK;
using kda::lab::kRec1KG;
using kda::lab::kRec1U;
using kda::lab::kRec1USlice;
using kda::lab::kRec1W;
using kda::lab::kRecord1Bytes;

constexpr int kC = kda::kChunk;      // 64
constexpr int kD = kda::kHeadDim;    // 128
constexpr int kBV = kda::lab::kScanSliceColumns;  // 32

using namespace kda_test;  // NOLINT: the PTX models (mma_emulation.h)

// ------------------------------------------------------------------------------------------------
// Layout properties

TEST(ScanV1Layout, SwizzlesArePermutationsOf16ByteGroups) {
  auto check = [](auto swz, int rows, int cols, const char* name) {
    std::vector<int> hits(static_cast<size_t>(rows * cols), 0);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        const int o = swz(r, c);
        ASSERT_GE(o, r * cols) << name;  // stays inside its row
        ASSERT_LT(o, (r + 1) * cols) << name;
        ++hits[static_cast<size_t>(o)];
        if (c % 8 == 0) {
          ASSERT_EQ(o % 8, 0) << name << ": 16-byte groups stay aligned";
        } else {
          ASSERT_EQ(o, swz(r, c - 1) + 1) << name << ": groups stay contiguous";
        }
      }
    }
    for (int h : hits) ASSERT_EQ(h, 1) << name << " is not a bijection";
  };
  check([](int r, int c) { return v1::swz128(r, c); }, 64, 128, "swz128");
  check([](int r, int c) { return v1::swz64(r, c); }, 64, 64, "swz64");
  check([](int r, int c) { return v1::swz32(r, c); }, 128, 32, "swz32");
}

TEST(ScanV1Layout, RecordIsExactlyCovered) {
  std::vector<int> hits(static_cast<size_t>(kRecord1Bytes), 0);
  auto mark = [&](int64_t byte, int size) {
    for (int b = 0; b < size; ++b) ++hits.at(static_cast<size_t>(byte + b));
  };
  for (int i = 0; i < kC; ++i) {
    for (int d = 0; d < kD; ++d) {
      mark(v1::rec1_w(i, d), 2);
      mark(v1::rec1_qp(i, d), 2);
      mark(v1::rec1_kg(i, d), 2);
      mark(v1::rec1_u(i, d), 2);
    }
    for (int j = 0; j < kC; ++j) mark(v1::rec1_aqk(i, j), 2);
  }
  for (int d = 0; d < kD; ++d) {
    EXPECT_EQ(v1::rec1_a(d) % 4, 0);
    mark(v1::rec1_a(d), 4);
  }
  for (size_t b = 0; b < hits.size(); ++b) ASSERT_EQ(hits[b], 1) << "record byte " << b;
  // U slice j is one contiguous 4 KB block holding columns 32j..32j+31.
  for (int i = 0; i < kC; ++i) {
    for (int d = 0; d < kD; ++d) {
      const int64_t off = v1::rec1_u(i, d) - kRec1U;
      EXPECT_EQ(off / kRec1USlice, d / kBV);
    }
  }
  // The copy plan moves every byte SCAN reads: W..A_qk, one U slice, a.
  EXPECT_EQ(int64_t{v1::kCopyWQ} * 16, kRec1KG - kRec1W);
  EXPECT_EQ(int64_t{v1::kCopyKA} * 16, kRec1U - kRec1KG);
  EXPECT_EQ(int64_t{v1::kCopyU} * 16, kRec1USlice);
  EXPECT_EQ(int64_t{v1::kCopyA} * 16, kRecord1Bytes - kRec1A);
  EXPECT_LE(v1::kS1Bytes, 227 * 1024 / 3 - 1024) << "three CTAs per SM";
}

// ------------------------------------------------------------------------------------------------
// Whole-chunk emulation of scan_v1_kernel (same loop structure, same helpers).

void copy16(Memory& smem, int dst, Memory& rec, int64_t src) {
  for (int b = 0; b < 16; b += 2) smem.at(dst + b) = rec.at(src + b);
}

struct Emulator {
  int slice = 0;
  Memory smem{v1::kS1Bytes};
  std::array<Acc, 4> state[v1::kWarps]{};  // state[warp][n tile j][lane][reg]

  void init_state(const std::vector<double>& s0) {  // s0 [128][32] (this slice)
    for (int w = 0; w < v1::kWarps; ++w) {
      for (int j = 0; j < 4; ++j) {
        for (int half = 0; half < 2; ++half) {
          const auto byte = per_lane([&](int l) { return v1::sb_pair(w, l, j, half); });
          check_words(byte);
          for (int l = 0; l < 32; ++l) {
            const int row = v1::state_row(w, l, half), col = v1::state_col(l, j);
            for (int e = 0; e < 2; ++e) {
              state[w][j][l][2 * half + e] = s0[static_cast<size_t>(row * kBV + col + e)];
              smem.at(byte[l] + 2 * e) = state[w][j][l][2 * half + e];
            }
          }
        }
      }
    }
  }

  // One chunk; returns O [64][32] (NaN where never written) and V_new [64][32].
  void chunk(Memory& rec, int n, std::vector<double>& out, std::vector<double>& vnew) {
    // cp.async groups WQU and KGA (scan_v1_layout.h copy plan).
    for (int e = 0; e < v1::kCopyWQ; ++e) copy16(smem, v1::kS1W + 16 * e, rec, kRec1W + 16 * e);
    for (int e = 0; e < v1::kCopyU; ++e) {
      copy16(smem, v1::kS1U + 16 * e, rec, kRec1U + slice * kRec1USlice + 16 * e);
    }
    for (int e = 0; e < v1::kCopyKA; ++e) copy16(smem, v1::kS1KG + 16 * e, rec, kRec1KG + 16 * e);
    for (int e = 0; e < v1::kCopyA; ++e) copy16(smem, v1::kS1A + 16 * e, rec, kRec1A + 16 * e);
    // (fp32 a: the value sits in the slot of its first byte; copy16 moved it with the rest.)

    Acc vw[v1::kWarps][2]{}, pq[v1::kWarps][2]{};
    // Phase A.
    for (int w = 0; w < v1::kWarps; ++w) {
      for (int ks = 0; ks < kD / 16; ++ks) {
        const Frag4 aw = ldmatrix_x4(smem, per_lane([&](int l) { return v1::pa_w(w, l, ks); }),
                                     false);
        const Frag4 aq = ldmatrix_x4(smem, per_lane([&](int l) { return v1::pa_qp(w, l, ks); }),
                                     false);
        const Frag4 b = ldmatrix_x4(smem, per_lane([&](int l) { return v1::pa_s(w, l, ks); }),
                                    true);
        run_mma(vw[w][0], aw, b, 0);
        run_mma(vw[w][1], aw, b, 2);
        run_mma(pq[w][0], aq, b, 0);
        run_mma(pq[w][1], aq, b, 2);
      }
      for (int j = 0; j < 2; ++j) {
        for (int half = 0; half < 2; ++half) {
          const auto ub = per_lane([&](int l) { return v1::u_pair(w, l, j, half); });
          const auto vb = per_lane([&](int l) { return v1::vn_pair(w, l, j, half); });
          check_words(ub);
          check_words(vb);
          for (int l = 0; l < 32; ++l) {
            for (int e = 0; e < 2; ++e) {
              smem.at(vb[l] + 2 * e) = smem.at(ub[l] + 2 * e) - vw[w][j][l][2 * half + e];
            }
          }
        }
      }
    }
    // V_new as SCAN holds it (logical read through the layout).
    vnew.assign(static_cast<size_t>(kC * kBV), 0.0);
    for (int i = 0; i < kC; ++i) {
      for (int c = 0; c < kBV; ++c) {
        vnew[static_cast<size_t>(i * kBV + c)] = smem.at(v1::kS1VN + 2 * v1::swz32(i, c));
      }
    }
    // Phase B2.
    for (int w = 0; w < v1::kWarps; ++w) {
      for (int half = 0; half < 2; ++half) {
        for (int l = 0; l < 32; ++l) {
          const double a = smem.at(v1::kS1A + 4 * v1::state_row(w, l, half));
          for (int j = 0; j < 4; ++j) {
            state[w][j][l][2 * half] *= a;
            state[w][j][l][2 * half + 1] *= a;
          }
        }
      }
      for (int ks = 0; ks < kC / 16; ++ks) {
        const Frag4 ak =
            ldmatrix_x4(smem, per_lane([&](int l) { return v1::b2_kg(w, l, ks); }), true);
        const Frag4 b01 =
            ldmatrix_x4(smem, per_lane([&](int l) { return v1::b2_vn(l, ks, 0); }), true);
        const Frag4 b23 =
            ldmatrix_x4(smem, per_lane([&](int l) { return v1::b2_vn(l, ks, 1); }), true);
        run_mma(state[w][0], ak, b01, 0);
        run_mma(state[w][1], ak, b01, 2);
        run_mma(state[w][2], ak, b23, 0);
        run_mma(state[w][3], ak, b23, 2);
      }
      for (int j = 0; j < 4; ++j) {
        for (int half = 0; half < 2; ++half) {
          const auto byte = per_lane([&](int l) { return v1::sb_pair(w, l, j, half); });
          check_words(byte);
          for (int l = 0; l < 32; ++l) {
            for (int e = 0; e < 2; ++e) smem.at(byte[l] + 2 * e) = state[w][j][l][2 * half + e];
          }
        }
      }
    }
    // Phase B1.
    out.assign(static_cast<size_t>(kC * kBV), std::nan(""));
    for (int w = 0; w < v1::kWarps; ++w) {
      const int mt = w & 3;
      for (int ks = 0; ks < kC / 16; ++ks) {
        if (ks > mt) continue;
        const Frag4 a =
            ldmatrix_x4(smem, per_lane([&](int l) { return v1::b1_aqk(w, l, ks); }), false);
        const Frag4 b =
            ldmatrix_x4(smem, per_lane([&](int l) { return v1::b1_vn(w, l, ks); }), true);
        run_mma(pq[w][0], a, b, 0);
        run_mma(pq[w][1], a, b, 2);
      }
      for (int half = 0; half < 2; ++half) {
        for (int l = 0; l < 32; ++l) {
          const int row = v1::out_row(w, l, half);
          if (row >= n) continue;
          for (int j = 0; j < 2; ++j) {
            for (int e = 0; e < 2; ++e) {
              double& dst = out[static_cast<size_t>(row * kBV + v1::out_col(w, l, j) + e)];
              EXPECT_TRUE(std::isnan(dst)) << "output element written twice";
              dst = pq[w][j][l][2 * half + e];
            }
          }
        }
      }
    }
  }

  std::vector<double> state_matrix() const {  // [128][32] from the registers
    std::vector<double> s(static_cast<size_t>(kD * kBV), std::nan(""));
    for (int w = 0; w < v1::kWarps; ++w) {
      for (int j = 0; j < 4; ++j) {
        for (int half = 0; half < 2; ++half) {
          for (int l = 0; l < 32; ++l) {
            for (int e = 0; e < 2; ++e) {
              double& dst = s[static_cast<size_t>(v1::state_row(w, l, half) * kBV +
                                                  v1::state_col(l, j) + e)];
              EXPECT_TRUE(std::isnan(dst)) << "state element owned twice";
              dst = state[w][j][l][2 * half + e];
            }
          }
        }
      }
    }
    return s;
  }
};

TEST(ScanV1Layout, ScanChunksMatchMatrixProducts) {
  std::mt19937_64 rng(2024);
  for (int slice = 0; slice < kda::lab::kScanSlices; ++slice) {
    bank_conflicts = 0;
    Emulator emu;
    emu.slice = slice;
    std::vector<double> s(static_cast<size_t>(kD * kBV));
    std::uniform_int_distribution<int> small(-1, 1);
    for (double& x : s) x = small(rng);
    emu.init_state(s);
    for (const int n : {64, 37, 1}) {  // a full chunk, then tails (rows >= n zero)
      const ChunkData c = random_chunk(rng, n);
      Memory rec = write_record(c);
      std::vector<double> out, vnew;
      emu.chunk(rec, n, out, vnew);
      // Reference on this slice's columns: V_new = U - W S, O = q' S + A_qk V_new,
      // S <- diag(a) S + kg^T V_new.
      std::vector<double> ref_v(static_cast<size_t>(kC * kBV)), ref_o(ref_v.size());
      for (int i = 0; i < kC; ++i) {
        for (int col = 0; col < kBV; ++col) {
          double ws = 0, qs = 0;
          for (int k = 0; k < kD; ++k) {
            ws += c.w[static_cast<size_t>(i * kD + k)] * s[static_cast<size_t>(k * kBV + col)];
            qs += c.qp[static_cast<size_t>(i * kD + k)] * s[static_cast<size_t>(k * kBV + col)];
          }
          ref_v[static_cast<size_t>(i * kBV + col)] =
              c.u[static_cast<size_t>(i * kD + slice * kBV + col)] - ws;
          ref_o[static_cast<size_t>(i * kBV + col)] = qs;
        }
      }
      for (int i = 0; i < kC; ++i) {
        for (int col = 0; col < kBV; ++col) {
          for (int j = 0; j <= i; ++j) {
            ref_o[static_cast<size_t>(i * kBV + col)] +=
                c.aqk[static_cast<size_t>(i * kC + j)] * ref_v[static_cast<size_t>(j * kBV + col)];
          }
        }
      }
      std::vector<double> next(s.size());
      for (int k = 0; k < kD; ++k) {
        for (int col = 0; col < kBV; ++col) {
          double acc = c.a[static_cast<size_t>(k)] * s[static_cast<size_t>(k * kBV + col)];
          for (int i = 0; i < kC; ++i) {
            acc += c.kg[static_cast<size_t>(i * kD + k)] *
                   ref_v[static_cast<size_t>(i * kBV + col)];
          }
          next[static_cast<size_t>(k * kBV + col)] = acc;
        }
      }
      s = next;
      const std::string what = "slice " + std::to_string(slice) + ", n " + std::to_string(n);
      ASSERT_EQ(vnew, ref_v) << what << ": V_new";
      for (int i = 0; i < kC; ++i) {
        for (int col = 0; col < kBV; ++col) {
          const double o = out[static_cast<size_t>(i * kBV + col)];
          if (i < n) {
            ASSERT_EQ(o, ref_o[static_cast<size_t>(i * kBV + col)])
                << what << ": O row " << i << " col " << col;
          } else {
            ASSERT_TRUE(std::isnan(o)) << what << ": row " << i << " >= n was written";
          }
        }
      }
      ASSERT_EQ(emu.state_matrix(), s) << what << ": register state";
      for (int k = 0; k < kD; ++k) {  // the smem copy phase A reads next
        for (int col = 0; col < kBV; ++col) {
          ASSERT_EQ(emu.smem.at(v1::kS1SB + 2 * v1::swz32(k, col)),
                    s[static_cast<size_t>(k * kBV + col)])
              << what << ": state copy key " << k << " col " << col;
        }
      }
    }
    EXPECT_EQ(bank_conflicts, 0) << "slice " << slice << ": shared-memory bank conflicts";
  }
}

// Shared-memory regions do not overlap and every ldmatrix / pair access stays inside its region.
TEST(ScanV1Layout, AccessesStayInTheirRegions) {
  struct Region {
    int begin, end;
  };
  const Region w{v1::kS1W, v1::kS1QP}, qp{v1::kS1QP, v1::kS1KG}, kg{v1::kS1KG, v1::kS1AQK},
      aqk{v1::kS1AQK, v1::kS1U}, u{v1::kS1U, v1::kS1A}, sb{v1::kS1SB, v1::kS1VN},
      vn{v1::kS1VN, v1::kS1Bytes};
  auto inside = [](int byte, int size, Region r) {
    return byte >= r.begin && byte + size <= r.end;
  };
  for (int wp = 0; wp < v1::kWarps; ++wp) {
    for (int l = 0; l < 32; ++l) {
      for (int ks = 0; ks < 8; ++ks) {
        EXPECT_TRUE(inside(v1::pa_w(wp, l, ks), 16, w));
        EXPECT_TRUE(inside(v1::pa_qp(wp, l, ks), 16, qp));
        EXPECT_TRUE(inside(v1::pa_s(wp, l, ks), 16, sb));
      }
      for (int ks = 0; ks < 4; ++ks) {
        EXPECT_TRUE(inside(v1::b1_aqk(wp, l, ks), 16, aqk));
        EXPECT_TRUE(inside(v1::b1_vn(wp, l, ks), 16, vn));
        EXPECT_TRUE(inside(v1::b2_kg(wp, l, ks), 16, kg));
        EXPECT_TRUE(inside(v1::b2_vn(l, ks, ks & 1), 16, vn));
      }
      for (int j = 0; j < 4; ++j) {
        for (int half = 0; half < 2; ++half) {
          EXPECT_TRUE(inside(v1::sb_pair(wp, l, j, half), 4, sb));
          if (j < 2) {
            EXPECT_TRUE(inside(v1::u_pair(wp, l, j, half), 4, u));
            EXPECT_TRUE(inside(v1::vn_pair(wp, l, j, half), 4, vn));
          }
        }
      }
      EXPECT_TRUE(inside(v1::kS1A + 4 * v1::state_row(wp, l, 1), 4, Region{v1::kS1A, v1::kS1SB}));
    }
  }
}

}  // namespace
