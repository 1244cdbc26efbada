// CPU emulation of the lab's transposed-state SCAN's data movement (v2t_mma, lab/src/scan_t.cu):
// ldmatrix, stmatrix and mma.sync.m16n8k16 modelled from the PTX ISA (mma_emulation.h), every
// address, register map and record offset taken from lab/src/scan_t_layout.h and the library's
// lib/kda/src/scan/transposed.h -- the functions the kernel uses. Whole chunks (a tail chunk
// included) run through the emulated kernel and are compared, exactly (small integers,
// powers-of-two decays, double arithmetic), with the chunk recurrence written as plain matrix
// products on S [key][value]. Also checks that the C -> A register reuse covers each A element
// once, that the O tile is written exactly once per element, and that no ldmatrix / stmatrix phase
// has bank conflicts.
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
#include "scan_t_layout.h"  // lab/src

namespace {

namespace ts = kda::lab::tscan;
using namespace kda_test;  // NOLINT: the PTX models

constexpr int kC = kda::kChunk;    // 64
constexpr int kD = kda::kHeadDim;  // 128

// stmatrix.sync.aligned.m8n8.x4[.trans].shared.b16, the inverse of ldmatrix: lane 8 i + r gives
// the address of row r of matrix i; lane l's register i holds (row l/4, cols 2(l%4), +1) of matrix
// i, stored there without .trans, or at (rows 2(l%4), +1; col l/4) with .trans.
void stmatrix_x4(Memory& smem, const std::array<int, 32>& addr, const Frag4& regs, bool trans) {
  for (int i = 0; i < 4; ++i) {
    std::set<int> groups;
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(addr[8 * i + r] % 16, 0) << "stmatrix row address not 16-byte aligned";
      groups.insert((addr[8 * i + r] / 16) % 8);
    }
    if (groups.size() != 8) ++bank_conflicts;
  }
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 4; ++i) {
      for (int e = 0; e < 2; ++e) {
        const int row = trans ? 2 * (l % 4) + e : l / 4;
        const int col = trans ? l / 4 : 2 * (l % 4) + e;
        double& dst = smem.at(addr[8 * i + row] + 2 * col);
        EXPECT_TRUE(std::isnan(dst)) << "O element written twice";
        dst = regs[l][i][e];
      }
    }
  }
}

// The recurrence on S [key][value]: V_new = U - W S, O = q' S + A_qk V_new,
// S <- diag(a) S + kg^T V_new.
void reference_chunk(const ChunkData& c, std::vector<double>& s, std::vector<double>& out,
                     std::vector<double>& vnew) {
  vnew.assign(static_cast<size_t>(kC * kD), 0.0);
  out.assign(static_cast<size_t>(kC * kD), 0.0);
  for (int t = 0; t < kC; ++t) {
    for (int v = 0; v < kD; ++v) {
      double ws = 0, qs = 0;
      for (int k = 0; k < kD; ++k) {
        ws += c.w[static_cast<size_t>(t * kD + k)] * s[static_cast<size_t>(k * kD + v)];
        qs += c.qp[static_cast<size_t>(t * kD + k)] * s[static_cast<size_t>(k * kD + v)];
      }
      vnew[static_cast<size_t>(t * kD + v)] = c.u[static_cast<size_t>(t * kD + v)] - ws;
      out[static_cast<size_t>(t * kD + v)] = qs;
    }
  }
  for (int t = 0; t < kC; ++t) {
    for (int v = 0; v < kD; ++v) {
      for (int j = 0; j < kC; ++j) {
        out[static_cast<size_t>(t * kD + v)] +=
            c.aqk[static_cast<size_t>(t * kC + j)] * vnew[static_cast<size_t>(j * kD + v)];
      }
    }
  }
  std::vector<double> next(s.size());
  for (int k = 0; k < kD; ++k) {
    for (int v = 0; v < kD; ++v) {
      double acc = c.a[static_cast<size_t>(k)] * s[static_cast<size_t>(k * kD + v)];
      for (int t = 0; t < kC; ++t) {
        acc += c.kg[static_cast<size_t>(t * kD + k)] * vnew[static_cast<size_t>(t * kD + v)];
      }
      next[static_cast<size_t>(k * kD + v)] = acc;
    }
  }
  s = next;
}

using Tiles = std::vector<Acc>;  // [tile][lane][reg]

// The A fragment of k-block kb from the C fragments of tiles 2 kb, 2 kb + 1 (transposed.h C -> A).
Frag4 c_to_a(const Tiles& c, int kb) {
  Frag4 a{};
  for (int l = 0; l < 32; ++l) {
    for (int q = 0; q < 4; ++q) {
      for (int e = 0; e < 2; ++e) {
        a[l][q][e] = c[static_cast<size_t>(2 * kb + ts::a_tile(q))][l][2 * ts::a_half(q) + e];
      }
    }
  }
  return a;
}

struct Emulator {
  Memory smem{ts::kSBytes};
  std::vector<Tiles> state = std::vector<Tiles>(ts::kWarps, Tiles(kD / 8));  // [warp][key tile]

  void init_state(const std::vector<double>& s) {  // s [key][value]
    for (int w = 0; w < ts::kWarps; ++w) {
      for (int j = 0; j < kD / 8; ++j) {
        for (int l = 0; l < 32; ++l) {
          for (int r = 0; r < 4; ++r) {
            state[w][j][l][r] = s[static_cast<size_t>(ts::state_key(l, j, r) * kD +
                                                      ts::state_value(w, l, r))];
          }
        }
      }
    }
  }

  std::vector<double> state_matrix() const {  // [key][value]
    std::vector<double> s(static_cast<size_t>(kD * kD), std::nan(""));
    for (int w = 0; w < ts::kWarps; ++w) {
      for (int j = 0; j < kD / 8; ++j) {
        for (int l = 0; l < 32; ++l) {
          for (int r = 0; r < 4; ++r) {
            double& dst = s[static_cast<size_t>(ts::state_key(l, j, r) * kD +
                                                ts::state_value(w, l, r))];
            EXPECT_TRUE(std::isnan(dst)) << "state element owned twice";
            dst = state[w][j][l][r];
          }
        }
      }
    }
    return s;
  }

  // One chunk, as scan_t_kernel runs it; returns O [64][128] (read back from the O tile) and
  // V_new [64][128] (from the registers).
  void chunk(Memory& rec, int c, std::vector<double>& out, std::vector<double>& vnew) {
    const int buf = ts::buffer(c);
    for (int e = 0; e < ts::kCopyUnits; ++e) {
      for (int b = 0; b < 16; b += 2) smem.at(buf + 16 * e + b) = rec.at(16 * e + b);
    }
    for (int byte = ts::kSO; byte < ts::kSBytes; byte += 2) smem.at(byte) = std::nan("");
    vnew.assign(static_cast<size_t>(kC * kD), std::nan(""));
    for (int w = 0; w < ts::kWarps; ++w) {
      Tiles acc(kC / 8), pq(kC / 8), vn(kC / 8);
      // Phase A.
      for (int ks = 0; ks < kD / 16; ++ks) {
        const Frag4 a = c_to_a(state[w], ks);
        for (int p = 0; p < kC / 16; ++p) {
          const Frag4 bw =
              ldmatrix_x4(smem, per_lane([&](int l) { return buf + ts::a_w(l, p, ks); }), false);
          const Frag4 bq =
              ldmatrix_x4(smem, per_lane([&](int l) { return buf + ts::a_qp(l, p, ks); }), false);
          run_mma(acc[static_cast<size_t>(2 * p)], a, bw, 0);
          run_mma(acc[static_cast<size_t>(2 * p + 1)], a, bw, 2);
          run_mma(pq[static_cast<size_t>(2 * p)], a, bq, 0);
          run_mma(pq[static_cast<size_t>(2 * p + 1)], a, bq, 2);
        }
      }
      for (int p = 0; p < kC / 16; ++p) {
        const Frag4 u =
            ldmatrix_x4(smem, per_lane([&](int l) { return buf + ts::u_trans(w, l, p); }), true);
        for (int i = 0; i < 4; ++i) {
          const size_t tile = static_cast<size_t>(2 * p + (i >> 1));
          for (int l = 0; l < 32; ++l) {
            for (int e = 0; e < 2; ++e) {
              const int reg = 2 * (i & 1) + e;
              vn[tile][l][reg] = u[l][i][e] - acc[tile][l][reg];
            }
          }
        }
      }
      for (int nt = 0; nt < kC / 8; ++nt) {
        for (int l = 0; l < 32; ++l) {
          for (int r = 0; r < 4; ++r) {
            vnew[static_cast<size_t>(ts::out_token(l, nt, r) * kD + ts::out_value(w, l, r))] =
                vn[static_cast<size_t>(nt)][l][r];
          }
        }
      }
      // Phase B1 (causal blocks: k-step kt <= token tile pair p).
      for (int p = 0; p < kC / 16; ++p) {
        for (int kt = 0; kt <= p; ++kt) {
          const Frag4 a = c_to_a(vn, kt);
          const Frag4 b =
              ldmatrix_x4(smem, per_lane([&](int l) { return buf + ts::b1_aqk(l, p, kt); }), false);
          run_mma(pq[static_cast<size_t>(2 * p)], a, b, 0);
          run_mma(pq[static_cast<size_t>(2 * p + 1)], a, b, 2);
        }
      }
      // Phase B2.
      for (int j = 0; j < kD / 8; ++j) {
        for (int l = 0; l < 32; ++l) {
          for (int r = 0; r < 4; ++r) {
            const int key = ts::state_key(l, j, r);
            state[w][static_cast<size_t>(j)][l][r] *= smem.at(buf + ts::decay(key));
          }
        }
      }
      for (int kt = 0; kt < kC / 16; ++kt) {
        const Frag4 a = c_to_a(vn, kt);
        for (int q = 0; q < kD / 16; ++q) {
          const Frag4 b =
              ldmatrix_x4(smem, per_lane([&](int l) { return buf + ts::b2_kg(l, q, kt); }), true);
          run_mma(state[w][static_cast<size_t>(2 * q)], a, b, 0);
          run_mma(state[w][static_cast<size_t>(2 * q + 1)], a, b, 2);
        }
      }
      // O^T -> O tile.
      for (int p = 0; p < kC / 16; ++p) {
        Frag4 regs{};
        for (int i = 0; i < 4; ++i) {
          for (int l = 0; l < 32; ++l) {
            for (int e = 0; e < 2; ++e) {
              regs[l][i][e] = pq[static_cast<size_t>(2 * p + (i >> 1))][l][2 * (i & 1) + e];
            }
          }
        }
        stmatrix_x4(smem,
                    per_lane([&](int l) { return ts::kSO + ts::o_trans_in_tile(w, l, p); }), regs,
                    true);
      }
    }
    out.assign(static_cast<size_t>(kC * kD), std::nan(""));
    for (int t = 0; t < kC; ++t) {
      for (int u = 0; u < kD / 8; ++u) {
        for (int e = 0; e < 8; ++e) {
          out[static_cast<size_t>(t * kD + 8 * u + e)] =
              smem.at(ts::kSO + ts::o_row_in_tile(t, u) + 2 * e);
        }
      }
    }
  }
};

TEST(ScanTLayout, ChunksMatchTheRecurrence) {
  std::mt19937_64 rng(77);
  std::uniform_int_distribution<int> small(-1, 1);
  std::vector<double> s(static_cast<size_t>(kD * kD));
  for (double& x : s) x = small(rng);
  Emulator emu;
  emu.init_state(s);
  bank_conflicts = 0;
  const int lengths[3] = {64, 64, 37};  // the last chunk is a tail
  for (int c = 0; c < 3; ++c) {
    SCOPED_TRACE("chunk " + std::to_string(c));
    const ChunkData chunk = random_chunk(rng, lengths[c]);
    Memory rec = write_record(chunk);
    std::vector<double> out, vnew, ref_out, ref_vnew;
    emu.chunk(rec, c, out, vnew);
    reference_chunk(chunk, s, ref_out, ref_vnew);
    int bad_v = 0, bad_o = 0;
    for (size_t e = 0; e < ref_out.size(); ++e) {
      bad_v += vnew[e] == ref_vnew[e] ? 0 : 1;
      bad_o += out[e] == ref_out[e] ? 0 : 1;
    }
    EXPECT_EQ(bad_v, 0) << "V_new elements differing";
    EXPECT_EQ(bad_o, 0) << "output elements differing";
    const std::vector<double> got = emu.state_matrix();
    int bad_s = 0;
    for (size_t e = 0; e < s.size(); ++e) bad_s += got[e] == s[e] ? 0 : 1;
    EXPECT_EQ(bad_s, 0) << "state elements differing";
  }
  EXPECT_EQ(bank_conflicts, 0) << "ldmatrix / stmatrix phases with bank conflicts";
}

TEST(ScanTLayout, RegionsAndCopies) {
  // The copy loop moves exactly one record into each buffer; the buffers and the O tile are
  // disjoint and 128-byte aligned (ldmatrix / stmatrix rows are 16-byte units).
  EXPECT_EQ(int64_t{ts::kCopyUnits} * 16, kda::lab::kRecord1Bytes);
  EXPECT_EQ(ts::buffer(0), 0);
  EXPECT_EQ(ts::buffer(1), ts::kBuffer);
  EXPECT_EQ(ts::buffer(2), 0);
  EXPECT_EQ(ts::kSO % 128, 0);
  EXPECT_EQ(ts::kBuffer % 128, 0);
  EXPECT_LE(ts::kSBytes + 1024, 228 * 1024) << "one CTA per SM";
  // Every (token, value) of the O tile has exactly one 16-byte row segment slot per 8 values.
  std::set<int> slots;
  for (int t = 0; t < kC; ++t) {
    for (int u = 0; u < kD / 8; ++u) slots.insert(ts::kSO + ts::o_row_in_tile(t, u));
  }
  EXPECT_EQ(static_cast<int>(slots.size()), kC * kD / 8);
  EXPECT_EQ(*slots.begin(), ts::kSO);
  EXPECT_EQ(*slots.rbegin(), ts::kSBytes - 16);
}

}  // namespace
