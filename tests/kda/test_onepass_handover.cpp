// The one pass's record hand-over (lib/kda/src/onepass/kernel.cuh, halves.cuh, helpers.cuh),
// simulated on the CPU with random build and step times: builders build sub-chunks c = builder,
// builder + B, ... into ring buffer c % R of every CTA of the chain (the value halves: into their
// own CTA's and, by bulk copy, the peer's), and each CTA's chain consumes them in order; the
// helper cluster's schedule (simulate_helpers) and the L2 helpers' claims (simulate_l2_helpers)
// are simulated on their own.
// A builder may write buffer b only once every chain has finished the buffer's previous record
// (c - R), and a chain may read record c only once it is built. The waits are modelled as the
// kernels do them: an mbarrier's try_wait.parity (true when the phase in progress has the other
// parity, so a waiter two phases behind is let through), or the value halves' monotonic counts
// of finished sub-chunks. Each configuration of the kernels is safe with its wait; the value
// halves would not be with parity waits (the reason for halves.cuh kSDone).
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "onepass/onepass.h"

namespace {

namespace op = kda::detail::onepass;

// An mbarrier: `completed` phases; a phase completes when `expected` arrivals are in.
struct Mbarrier {
  int64_t completed = 0;
  int arrivals = 0;
  int expected = 1;
  void arrive() {
    if (++arrivals == expected) {
      arrivals = 0;
      ++completed;
    }
  }
  // mbarrier.try_wait.parity: true when the phase in progress does not have parity `parity`.
  bool try_wait_parity(int64_t parity) const { return (completed & 1) != (parity & 1); }
};

enum class Wait { parity, counts };

struct Config {
  int ring = 0;         // buffers a CTA
  int builders = 0;     // builders a chain (all CTAs together)
  int ctas = 1;         // CTAs a chain (each with its chain of part of the value rows)
  bool staged = false;  // the buffer is waited for late in the build, not at its start
  Wait wait = Wait::parity;
};

struct Outcome {
  int64_t violations = 0;  // buffer writes over a record some chain had not finished
  bool deadlock = false;
};

// One chain of `chunks` sub-chunks; each event's duration is random (seed).
Outcome simulate(const Config& k, int64_t chunks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> build_time(20, 120), step_time(5, 40), prefix(10, 90);
  std::vector<std::vector<Mbarrier>> full(k.ctas, std::vector<Mbarrier>(k.ring));
  std::vector<std::vector<Mbarrier>> empty(k.ctas, std::vector<Mbarrier>(k.ring));
  for (auto& cta : empty) {
    for (Mbarrier& m : cta) m.expected = k.ctas;  // every chain frees every copy
  }
  std::vector<int64_t> done(k.ctas, 0);  // sub-chunks each chain has finished
  struct Builder {
    int64_t c;
    int64_t busy_until = 0;
    bool started = false;  // c's build has begun
    bool waited = false;   // the buffer's wait has passed for c
    int64_t wait_at = 0;   // when in the build the wait happens
  };
  struct Chain {
    int64_t c = 0;
    int64_t busy_until = 0;
    bool stepping = false;
  };
  std::vector<Builder> builders;
  for (int j = 0; j < k.builders; ++j) builders.push_back({j});
  std::vector<Chain> chains(k.ctas);
  Outcome out;
  for (int64_t now = 0; now < 100000; ++now) {  // ~4,000 ticks when nothing waits forever
    bool all_done = true;
    for (Chain& ch : chains) all_done = all_done && ch.c >= chunks;
    if (all_done) return out;
    for (Builder& b : builders) {
      if (b.c >= chunks || now < b.busy_until) continue;
      const int slot = static_cast<int>(b.c % k.ring);
      const int64_t round = b.c / k.ring;
      if (!b.waited) {
        // The build (or its part before the buffer, staged) runs first.
        if (!b.started) {
          b.started = true;
          b.wait_at = now + (k.staged ? prefix(rng) : 0);
        }
        if (now < b.wait_at) continue;
        bool free = true;
        if (round > 0) {
          if (k.wait == Wait::counts) {
            for (int64_t d : done) free = free && d >= b.c - k.ring + 1;
          } else {
            // The builder's own CTA's empty barrier (cta = the builder's, here any: they agree).
            free = empty[0][slot].try_wait_parity(round - 1);
          }
        }
        if (!free) continue;
        b.waited = true;
        for (int64_t d : done) {
          if (round > 0 && d < b.c - k.ring + 1) ++out.violations;
        }
        b.busy_until = now + build_time(rng);
        continue;
      }
      // Built: every CTA's full barrier of the buffer.
      for (int cta = 0; cta < k.ctas; ++cta) full[cta][slot].arrive();
      b.c += k.builders;
      b.started = false;
      b.waited = false;
    }
    for (int cta = 0; cta < k.ctas; ++cta) {
      Chain& ch = chains[cta];
      if (ch.c >= chunks || now < ch.busy_until) continue;
      const int slot = static_cast<int>(ch.c % k.ring);
      if (ch.stepping) {  // the step is over: the buffer is free in every CTA's count
        ch.stepping = false;
        done[cta] = ch.c + 1;
        for (int other = 0; other < k.ctas; ++other) empty[other][slot].arrive();
        ++ch.c;
        continue;
      }
      if (full[cta][slot].try_wait_parity(ch.c / k.ring)) {
        ch.stepping = true;
        ch.busy_until = now + step_time(rng);
      }
    }
  }
  out.deadlock = true;
  return out;
}

Outcome worst_over_seeds(const Config& k) {
  Outcome worst;
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    const Outcome o = simulate(k, 97, seed);
    worst.violations += o.violations;
    worst.deadlock = worst.deadlock || o.deadlock;
  }
  return worst;
}

TEST(OnePassHandover, LibraryKernelParityWaitsAreSafe) {
  const Outcome o =
      worst_over_seeds({op::kRingBuffers, op::kLibraryBuilders, 1, /*staged=*/false, Wait::parity});
  EXPECT_EQ(o.violations, 0);
  EXPECT_FALSE(o.deadlock);
}

// Six builders on five buffers (unstaged) or three (staged): a builder can be two of a buffer's
// phases behind, so the value halves wait on counts (halves.cuh kSDone).
TEST(OnePassHandover, ValueHalvesNeedCounts) {
  for (const bool staged : {false, true}) {
    SCOPED_TRACE(staged ? "staged" : "unstaged");
    const Config counts{staged ? op::kHalvesStagedRingBuffers : op::kHalvesRingBuffers,
                        op::kHalvesBuilders, 2, staged, Wait::counts};
    const Outcome safe = worst_over_seeds(counts);
    EXPECT_EQ(safe.violations, 0);
    EXPECT_FALSE(safe.deadlock);
    // With parity waits a builder two phases behind passes early: the simulation finds it.
    Config parity = counts;
    parity.wait = Wait::parity;
    EXPECT_GT(worst_over_seeds(parity).violations, 0);
  }
}

// The helper cluster (helpers.cuh): kHelperChains chains, each with its CTA's kLibraryBuilders
// builders (sub-chunks c with c % kHelperRound = j, built in place into ring buffer
// c % kHelperRingBuffers after a count wait), and one helper CTA whose builders build round r's
// sub-chunk helper_sub_chunk(r) of chain helper_chain(j, r): staged (its own record buffer is
// taken again before phase 5 once the chain it last served has finished that sub-chunk), then
// one thread waits for the chain's buffer and copies the record, which lands some ticks later.
// Chains of different lengths (a cluster's last may have none). Returns the ticks to the end.
struct HelperOutcome {
  int64_t violations = 0;  // a buffer written before it was free, or read before it held c
  bool deadlock = false;
  int64_t ticks = 0;
};
HelperOutcome simulate_helpers(const std::vector<int64_t>& chunks, uint32_t seed, int build_lo,
                               int build_hi, int step_hi, int copy_hi) {
  constexpr int kChains = op::kHelperChains, kRing = op::kHelperRingBuffers;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> build_time(build_lo, build_hi), step_time(step_hi / 2, step_hi),
      copy_time(2, copy_hi);
  const auto prefix = [&](int t) { return t * 4 / 5; };  // phases 1-4 of a staged build
  struct Ring {
    std::vector<Mbarrier> full = std::vector<Mbarrier>(kRing);
    std::vector<int64_t> holds = std::vector<int64_t>(kRing, -1);  // the sub-chunk written
    int64_t done = 0;  // the chain's count
    int64_t c = 0;     // the chain's next step
    int64_t busy_until = 0;
    bool stepping = false;
  };
  std::vector<Ring> chain(kChains);
  struct Landing {
    int64_t at;
    int chain;
    int slot;
    int64_t c;
  };
  std::vector<Landing> landings;
  HelperOutcome out;
  const auto write = [&](int i, int64_t c) {  // a record for sub-chunk c into chain i's ring
    const int slot = static_cast<int>(c % kRing);
    if (c >= kRing && chain[i].done < c - kRing + 1) ++out.violations;
    chain[i].holds[slot] = c;
    return slot;
  };
  // The chain CTAs' builders: (chain, j, c, busy until, waited).
  struct Local {
    int chain;
    int64_t c;
    int64_t busy_until = 0;
    bool building = false;
  };
  std::vector<Local> local;
  for (int i = 0; i < kChains; ++i) {
    for (int j = 0; j < op::kLibraryBuilders; ++j) local.push_back({i, j});
  }
  struct Helper {
    int64_t round = 0;
    int phase = 0;  // 0 ready, 1 prefix, 2 waiting for its record buffer, 3 suffix, 4 ring wait
    int64_t busy_until = 0;
    int last_chain = -1;
    int64_t last_c = 0;
    bool copy_landed = true;  // the last copy from its record buffer has landed
    int build = 0;
  };
  std::vector<Helper> helpers(op::kHelperBuilders);
  const auto next_round = [&](int j, int64_t r) -> int64_t {
    for (int t = 0; t < kChains; ++t) {
      if (op::helper_sub_chunk(r + t) < chunks[op::helper_chain(j, r + t)]) return r + t;
    }
    return -1;
  };
  for (int j = 0; j < op::kHelperBuilders; ++j) helpers[j].round = next_round(j, 0);
  for (int64_t now = 0; now < 400000; ++now) {
    bool all_done = true;
    for (int i = 0; i < kChains; ++i) all_done = all_done && chain[i].c >= chunks[i];
    if (all_done) {
      out.ticks = now;
      return out;
    }
    for (auto it = landings.begin(); it != landings.end();) {
      if (it->at <= now) {
        chain[it->chain].full[it->slot].arrive();
        for (Helper& h : helpers) {
          if (h.last_chain == it->chain && h.last_c == it->c) h.copy_landed = true;
        }
        it = landings.erase(it);
      } else {
        ++it;
      }
    }
    for (Local& b : local) {
      Ring& r = chain[b.chain];
      if (b.c >= chunks[b.chain] || now < b.busy_until) continue;
      if (b.building) {  // built: arrive on the buffer's full barrier
        r.full[b.c % kRing].arrive();
        b.building = false;
        b.c += op::kHelperRound;
        continue;
      }
      if (b.c >= kRing && r.done < b.c - kRing + 1) continue;  // the count wait
      write(b.chain, b.c);
      b.building = true;
      b.busy_until = now + build_time(rng);
    }
    for (int j = 0; j < op::kHelperBuilders; ++j) {
      Helper& h = helpers[j];
      if (h.round < 0 || now < h.busy_until) continue;
      const int i = op::helper_chain(j, h.round);
      const int64_t c = op::helper_sub_chunk(h.round);
      if (h.phase == 0) {
        h.build = build_time(rng);
        h.busy_until = now + prefix(h.build);
        h.phase = 1;
      } else if (h.phase == 1 || h.phase == 2) {  // acquire: the last copy's chain is past it
        if (h.last_chain >= 0 && chain[h.last_chain].done < h.last_c + 1) {
          h.phase = 2;
          continue;
        }
        if (!h.copy_landed) ++out.violations;  // its record buffer still being read
        h.busy_until = now + h.build - prefix(h.build);
        h.phase = 3;
      } else if (h.phase == 3 || h.phase == 4) {  // thread 0: the chain's buffer, the copy
        if (c >= kRing && chain[i].done < c - kRing + 1) {
          h.phase = 4;
          continue;
        }
        const int slot = write(i, c);
        landings.push_back({now + copy_time(rng), i, slot, c});
        h.copy_landed = false;
        h.last_chain = i;
        h.last_c = c;
        h.phase = 0;
        h.round = next_round(j, h.round + 1);
      }
    }
    for (int i = 0; i < kChains; ++i) {
      Ring& r = chain[i];
      if (r.c >= chunks[i] || now < r.busy_until) continue;
      const int slot = static_cast<int>(r.c % kRing);
      if (r.stepping) {
        r.stepping = false;
        r.done = ++r.c;
        continue;
      }
      if (r.full[slot].try_wait_parity(r.c / kRing)) {
        if (r.holds[slot] != r.c) ++out.violations;
        r.stepping = true;
        r.busy_until = now + step_time(rng);
      }
    }
  }
  out.deadlock = true;
  return out;
}

// Every schedule of the helper cluster's hand-over at random build, step and copy times (copies
// up to longer than a build, so that a helper taking its record buffer back too early would show),
// chains equal, ragged and missing: no buffer written before its chain is done with it, no record
// read before it is in, no record buffer of the helper reused before its copy landed, no deadlock.
TEST(OnePassHandover, HelperClusterIsSafe) {
  const std::vector<std::vector<int64_t>> lengths = {
      {97, 97, 97}, {512, 40, 3}, {5, 0, 0}, {1, 2, 3}, {64, 64, 0}, {4, 8, 301}};
  for (const auto& chunks : lengths) {
    SCOPED_TRACE(::testing::PrintToString(chunks));
    for (uint32_t seed = 1; seed <= 60; ++seed) {
      for (const int step_hi : {10, 60}) {  // chain-bound and builder-bound
        const HelperOutcome o = simulate_helpers(chunks, seed, 60, 140, step_hi, 200);
        ASSERT_FALSE(o.deadlock) << "seed " << seed;
        ASSERT_EQ(o.violations, 0) << "seed " << seed;
      }
    }
  }
}

// With short steps the chains get four builders' worth of records: the step within 12 % of a
// quarter of the mean build (100 ticks), where one CTA's three builders give a third.
TEST(OnePassHandover, HelperClusterGivesFourBuilders) {
  double ticks = 0;
  constexpr int kSeeds = 20;
  constexpr int64_t kChunks = 400;
  for (uint32_t seed = 1; seed <= kSeeds; ++seed) {
    const HelperOutcome o = simulate_helpers({kChunks, kChunks, kChunks}, seed, 90, 110, 20, 12);
    ASSERT_FALSE(o.deadlock);
    ticks += static_cast<double>(o.ticks);
  }
  const double step = ticks / kSeeds / kChunks;
  EXPECT_LT(step, 1.12 * 100.0 / 4) << step;
  EXPECT_GT(step, 100.0 / 4 * 0.95) << step;  // not faster than four builders can build
}

// The value halves' raw inputs (halves.cuh PairCarry): sub-chunk c is built in CTA c % 2 by
// builder (c % 6) / 2 of it (c = rank + 2 j, + 6, ...) into both CTAs' ring buffer c % kRing
// after both chains finished c - kRing (counts), its prologue first reading the previous
// sub-chunk's row (chunk positions 1-3, from its CTA's receive ring: the peer's copy landed) and
// at position 3 its own CTA's row two back (its own ring, after that row's arrival); the prologue
// then writes its row into its own ring (slot (c / 2) % kOwnSlots) and, for positions 0-2 but the
// last sub-chunk, copies it into the peer's receive ring (slot k % kPeerSlots, k the sending CTA's
// index of the row), landing some ticks later. Checks: no own slot rewritten while its row's copy
// is in flight or a reader has not read it, no receive slot written before its row was read, no
// read of a row that is not there, no deadlock.
struct CarryOutcome {
  int64_t violations = 0;
  bool deadlock = false;
};
CarryOutcome simulate_pair_carry(int64_t chunks, uint32_t seed, int copy_hi) {
  constexpr int kRing = op::kHalvesRingBuffers, kOwn = op::kHalvesCarryOwnSlots,
                kPeer = op::kHalvesCarryPeerSlots;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> build_time(60, 140), step_time(5, 60), copy_time(1, copy_hi);
  const auto sent = [&](int64_t c) { return (c & 3) != 3 && c + 1 < chunks; };
  const auto index = [](int64_t c) { return (c & 1) == 0 ? c / 2 : c / 4; };
  // Per row: read by c + 1 (when sent) and by c + 2 (position 1 rows), and its copy landed.
  std::vector<bool> read_next(chunks, false), read_two(chunks, false), landed(chunks, false);
  const auto readers_done = [&](int64_t c) {
    const bool next = !sent(c) || read_next[c];
    const bool two = (c & 3) != 1 || c + 2 >= chunks || read_two[c];
    return next && two && (!sent(c) || landed[c]);
  };
  std::vector<std::vector<int64_t>> own(2, std::vector<int64_t>(kOwn, -1));
  std::vector<std::vector<int64_t>> received(2, std::vector<int64_t>(kPeer, -1));
  struct Landing {
    int64_t at, c;
  };
  std::vector<Landing> landings;
  struct Builder {
    int64_t c;
    int64_t busy_until = 0;
    bool building = false;
  };
  std::vector<Builder> builders;
  for (int rank = 0; rank < 2; ++rank) {
    for (int j = 0; j < op::kHalvesBuilders / 2; ++j) builders.push_back({rank + 2 * j});
  }
  std::vector<int64_t> ring_holds(kRing, -1);
  std::vector<bool> built(chunks, false);
  int64_t done[2] = {0, 0};
  int64_t busy[2] = {0, 0};
  bool stepping[2] = {false, false};
  CarryOutcome out;
  for (int64_t now = 0; now < 400000; ++now) {
    if (done[0] >= chunks && done[1] >= chunks) return out;
    for (auto it = landings.begin(); it != landings.end();) {
      if (it->at <= now) {
        landed[it->c] = true;
        it = landings.erase(it);
      } else {
        ++it;
      }
    }
    for (Builder& b : builders) {
      if (b.c >= chunks || now < b.busy_until) continue;
      if (b.building) {  // the record is in both CTAs' buffer
        built[b.c] = true;
        b.building = false;
        b.c += op::kHalvesBuilders;
        continue;
      }
      const int64_t c = b.c;
      const int cta = static_cast<int>(c & 1);
      if (c >= kRing && (done[0] < c - kRing + 1 || done[1] < c - kRing + 1)) continue;
      const int position = static_cast<int>(c & 3);
      if (position != 0) {  // c - 1's row: copied into this CTA's receive ring
        const int slot = static_cast<int>(index(c - 1) % kPeer);
        if (!landed[c - 1]) continue;
        if (received[cta][slot] != c - 1) ++out.violations;
      }
      if (position == 3 && own[cta][(c - 2) / 2 % kOwn] != c - 2) ++out.violations;
      if (position != 0) read_next[c - 1] = true;
      if (position == 3) read_two[c - 2] = true;
      // This build's row: its own slot (the previous row's readers and copy done), then the copy.
      const int own_slot = static_cast<int>(c / 2 % kOwn);
      const int64_t previous = own[cta][own_slot];
      if (previous >= 0 && !readers_done(previous)) ++out.violations;
      own[cta][own_slot] = c;
      if (sent(c)) {
        const int peer = cta ^ 1, slot = static_cast<int>(index(c) % kPeer);
        const int64_t before = received[peer][slot];
        if (before >= 0 && !read_next[before]) ++out.violations;
        received[peer][slot] = c;
        landings.push_back({now + copy_time(rng), c});
      }
      b.building = true;
      b.busy_until = now + build_time(rng);
    }
    for (int cta = 0; cta < 2; ++cta) {
      if (done[cta] >= chunks || now < busy[cta]) continue;
      if (stepping[cta]) {
        stepping[cta] = false;
        ++done[cta];
        continue;
      }
      if (built[done[cta]]) {
        stepping[cta] = true;
        busy[cta] = now + step_time(rng);
      }
    }
  }
  out.deadlock = true;
  return out;
}

// Every schedule of the raw value halves' carry at random build, step and copy times (copies up
// to longer than a build), chains of every length mod 4 and short ones: safe, no deadlock.
TEST(OnePassHandover, ValueHalvesCarryIsSafe) {
  for (const int64_t chunks : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5},
                               int64_t{7}, int64_t{62}, int64_t{63}, int64_t{97}, int64_t{256}}) {
    for (uint32_t seed = 1; seed <= 40; ++seed) {
      for (const int copy_hi : {3, 200}) {
        const CarryOutcome o = simulate_pair_carry(chunks, seed, copy_hi);
        ASSERT_FALSE(o.deadlock) << chunks << " sub-chunks, seed " << seed;
        ASSERT_EQ(o.violations, 0) << chunks << " sub-chunks, seed " << seed;
      }
    }
  }
}

// The L2 helpers (l2_helpers.cuh): chains of `chunks[i]` sub-chunks, each with its CTA's
// kLibraryBuilders own builders and ring of kL2HelperRing buffers, and `helper_builders` helper
// builders over all chains, which start at `helper_start` (never, when it is past the end: no
// helper resident). Every builder claims sub-chunks two builds ahead from the chain's counter
// (its first two at its start, then one when its build reaches the loads ahead, if the next one
// is a sub-chunk), taking `claim_latency` ticks to learn the claim, and builds its claims in
// order; an own builder waits for the chain to finish c - kRing before it writes buffer c % kRing;
// a helper builds into one of its kL2HelperRecords record slots once one is free (empty, or its
// record's chain is past it), then waits for the chain to finish c - kL2HelperMailbox and names
// the slot in the chain's mailbox entry c % kL2HelperMailbox, `publish` ticks later. The chain
// takes record c from its buffer (an own build) or copies it from the named slot (`copy` ticks;
// issued a step early when the entry was seen during the previous step). A helper's claim after
// chain q tries q + helper_builders first, a refused claim the next chain. Checks: no buffer,
// slot or entry written while its previous record is unfinished, every record read is the one
// claimed for it, no deadlock.
struct L2Outcome {
  int64_t violations = 0;
  bool deadlock = false;
  int64_t ticks = 0;
};
struct L2Timing {
  int build_lo = 90, build_hi = 110;  // a build
  int step_lo = 20, step_hi = 30;     // a chain step
  int claim_latency = 5, copy = 10, publish = 8;
  int load_ahead_at = 60;  // percent of a build before its loads ahead (and the claim)
  int64_t helper_start = 0;
  // Raw inputs: each build's prologue (the first tenth of it) reads the gate rows of c - 1 (chunk
  // positions 1-3) and c - 2 (position 3) and then writes row c into slot c % kL2HelperCarryRows,
  // once the chain is past c - kL2HelperCarryRows + 2 (l2_helpers.cuh L2GateCarry).
  bool raw = false;
  // The chain stores its count of finished sub-chunks after its last step too (l2_helpers.cuh):
  // without it a helper's slot holding a chain's last record is never free again.
  bool last_count = true;
};
L2Outcome simulate_l2_helpers(const std::vector<int64_t>& chunks, int helper_builders,
                              const L2Timing& t, uint32_t seed) {
  constexpr int kRing = op::kL2HelperRing, kMailbox = op::kL2HelperMailbox,
                kOwnSlots = op::kL2HelperRecords;
  const int chains = static_cast<int>(chunks.size());
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> build_time(t.build_lo, t.build_hi),
      step_time(t.step_lo, t.step_hi);
  std::vector<int64_t> claims(chains, 0);  // the global counters
  struct Chain {
    std::vector<int64_t> buffer = std::vector<int64_t>(kRing, -1);  // complete record, -1: none
    std::vector<int64_t> landing = std::vector<int64_t>(kRing, 0);  // a copy's arrival
    // The mailbox: sub-chunk c's entry (c % kMailbox) names the helper slot holding record c.
    std::vector<int64_t> mail_c = std::vector<int64_t>(kMailbox, -1);
    std::vector<int> mail_slot = std::vector<int>(kMailbox, -1);
    int64_t c = 0, done = 0, busy_until = 0;
    int64_t copied = -1;     // the record whose copy the chain issued
    bool seen_next = false;  // slot (c + 1)'s flag seen during the previous step
    bool stepping = false;
    // Raw inputs: the row each carry slot holds, and which rows their readers have read.
    std::vector<int64_t> row = std::vector<int64_t>(op::kL2HelperCarryRows, -1);
    std::vector<bool> read_next, read_two;
  };
  std::vector<Chain> chain(chains);
  for (int i = 0; i < chains; ++i) {
    chain[i].read_next.assign(static_cast<size_t>(chunks[i]), false);
    chain[i].read_two.assign(static_cast<size_t>(chunks[i]), false);
  }
  struct Claim {
    int chain;
    int64_t c;
    int64_t known_at;
  };
  enum class Phase { idle, building, publishing, stopped };
  // The helpers' global record slots (kOwnSlots a helper builder): the record (chain, c) each
  // holds, or -1.
  std::vector<int> slot_chain(static_cast<size_t>(helper_builders) * kOwnSlots, -1);
  std::vector<int64_t> slot_c(static_cast<size_t>(helper_builders) * kOwnSlots, -1);
  struct Builder {
    bool helper = false;
    int own_chain = -1;
    int cursor = 0;
    int index = 0;     // a helper's: its slots are index * kOwnSlots ..
    int slot = -1;     // the slot of the build in progress
    int64_t start = 0;
    bool started = false;
    std::vector<Claim> queue;  // claims in the order made; front: the one being built
    Phase phase = Phase::idle;
    int64_t busy_until = 0, ahead_at = 0, rest = 0;
    bool claimed_ahead = false;
    bool prologue_done = true;
  };
  std::vector<Builder> builders;
  for (int i = 0; i < chains; ++i) {
    for (int j = 0; j < op::kLibraryBuilders; ++j) {
      Builder b;
      b.helper = false;
      b.own_chain = i;
      builders.push_back(b);
    }
  }
  for (int j = 0; j < helper_builders; ++j) {
    Builder b;
    b.helper = true;
    b.index = j;
    b.cursor = j % std::max(chains, 1);
    b.start = t.helper_start;
    builders.push_back(b);
  }
  // A claim as the kernel makes it: an own builder's on its chain; a helper's from its cursor on,
  // each refused claim one more round trip.
  const auto claim = [&](Builder& b, int64_t now) {
    if (!b.helper) {
      const int64_t c = claims[b.own_chain]++;
      if (c < chunks[b.own_chain]) b.queue.push_back({b.own_chain, c, now + t.claim_latency});
      return;
    }
    for (int tried = 0; tried < chains; ++tried) {
      const int i = b.cursor;
      b.cursor = (b.cursor + 1) % chains;
      const int64_t c = claims[i]++;
      if (c < chunks[i]) {
        b.queue.push_back({i, c, now + int64_t{t.claim_latency} * (tried + 1)});
        b.cursor = (i + helper_builders) % chains;
        return;
      }
    }
  };
  L2Outcome out;
  for (int64_t now = 0; now < 4000000; ++now) {
    bool all_done = true;
    for (int i = 0; i < chains; ++i) all_done = all_done && chain[i].c >= chunks[i];
    if (all_done) {
      out.ticks = now;
      return out;
    }
    for (Builder& b : builders) {
      if (b.phase == Phase::stopped || now < b.start) continue;
      if (!b.started) {  // the first two claims
        b.started = true;
        claim(b, now);
        if (!b.queue.empty()) claim(b, now);
      }
      if (b.phase == Phase::building && !b.claimed_ahead && now >= b.ahead_at) {
        b.claimed_ahead = true;  // the claim after next, when next is a sub-chunk
        if (b.queue.size() >= 2) claim(b, now);
      }
      if (now < b.busy_until) continue;
      if (b.phase == Phase::idle) {
        if (b.queue.empty()) {
          b.phase = Phase::stopped;
          continue;
        }
        const Claim& job = b.queue.front();
        Chain& ch = chain[job.chain];
        if (now < job.known_at) continue;
        if (!b.helper) {  // the ring wait; the buffer is then written in place
          if (job.c >= kRing && ch.done < job.c - kRing + 1) continue;
          const int buf = static_cast<int>(job.c % kRing);
          if (ch.buffer[buf] >= ch.done) ++out.violations;  // its record not yet finished
          ch.buffer[buf] = -1;
        } else {  // a free slot of its own: empty, or its record's chain is past it
          int free = -1;
          for (int s = b.index * kOwnSlots; s < (b.index + 1) * kOwnSlots && free < 0; ++s) {
            if (slot_c[s] < 0 || chain[slot_chain[s]].done >= slot_c[s] + 1) free = s;
          }
          if (free < 0) continue;
          slot_chain[free] = job.chain;
          slot_c[free] = -1;  // being written
          b.slot = free;
        }
        const int d = build_time(rng);
        b.busy_until = now + d;
        b.ahead_at = now + int64_t{d} * t.load_ahead_at / 100;
        b.claimed_ahead = false;
        b.phase = Phase::building;
        if (t.raw) {  // the prologue first, then the rest of the build
          b.busy_until = now + d / 10;
          b.rest = d - d / 10;
          b.prologue_done = false;
        }
      } else if (b.phase == Phase::building) {
        const Claim job = b.queue.front();
        Chain& ch = chain[job.chain];
        if (!b.prologue_done) {  // raw: the rows it reads, then its own row
          const int64_t c = job.c;
          const int position = static_cast<int>(c & 3);
          constexpr int kRows = op::kL2HelperCarryRows;
          if (position != 0 && ch.row[(c - 1) % kRows] != c - 1) continue;
          if (position == 3 && ch.row[(c - 2) % kRows] != c - 2) continue;
          if (c >= kRows && ch.done < c - kRows + 3) continue;
          if (position != 0) ch.read_next[c - 1] = true;
          if (position == 3) ch.read_two[c - 2] = true;
          const int64_t before = ch.row[c % kRows];
          if (before >= 0) {  // its readers c + 1 and (position 1) c + 2 have read it
            const bool next = before + 1 >= chunks[job.chain] || ((before + 1) & 3) == 0 ||
                              ch.read_next[before];
            const bool two = (before & 3) != 1 || before + 2 >= chunks[job.chain] ||
                             ch.read_two[before];
            if (!next || !two) ++out.violations;
          }
          ch.row[c % kRows] = c;
          b.prologue_done = true;
          b.busy_until = now + b.rest;
          continue;
        }
        if (!b.helper) {
          ch.buffer[job.c % kRing] = job.c;
          b.queue.erase(b.queue.begin());
          b.phase = Phase::idle;
          continue;
        }
        // A helper: the record is in its slot; its mailbox entry (once the chain is past the
        // entry's previous sub-chunk) lands `publish` ticks later.
        slot_c[b.slot] = job.c;
        if (job.c >= kMailbox && ch.done < job.c - kMailbox + 1) continue;
        const int m = static_cast<int>(job.c % kMailbox);
        if (ch.mail_c[m] >= ch.done) ++out.violations;  // its sub-chunk not yet taken
        b.busy_until = now + t.publish;
        b.phase = Phase::publishing;
      } else if (b.phase == Phase::publishing) {
        const Claim job = b.queue.front();
        chain[job.chain].mail_c[job.c % kMailbox] = job.c;
        chain[job.chain].mail_slot[job.c % kMailbox] = b.slot;
        b.queue.erase(b.queue.begin());
        b.phase = Phase::idle;
      }
    }
    for (int i = 0; i < chains; ++i) {
      Chain& ch = chain[i];
      if (ch.c >= chunks[i] || now < ch.busy_until) continue;
      if (ch.stepping) {
        ch.stepping = false;
        ++ch.c;
        if (ch.c < chunks[i] || t.last_count) ch.done = ch.c;
        continue;
      }
      const int64_t c = ch.c;
      const int buf = static_cast<int>(c % kRing);
      const auto published = [&](int64_t x) { return ch.mail_c[x % kMailbox] == x; };
      const auto copy_in = [&](int64_t x) {  // into buffer x % kRing, landing `copy` ticks later
        const int bx = static_cast<int>(x % kRing);
        const int from = ch.mail_slot[x % kMailbox];
        if (ch.buffer[bx] >= ch.done) ++out.violations;
        if (slot_chain[from] != i || slot_c[from] != x) ++out.violations;  // overwritten
        ch.buffer[bx] = x;
        ch.landing[bx] = now + t.copy;
        ch.copied = x;
      };
      if (ch.copied != c) {
        if (ch.buffer[buf] != c) {
          if (!published(c)) continue;  // warp 0 polls the mark and the flag
          copy_in(c);
        }
      }
      // Record c + 1's copy when its flag was seen during the previous step; slot (c + 2)'s
      // flag loaded for the next.
      if (ch.seen_next && c + 1 < chunks[i] && ch.copied != c + 1) copy_in(c + 1);
      ch.seen_next = c + 2 < chunks[i] && published(c + 2);
      if (ch.buffer[buf] != c) ++out.violations;
      ch.stepping = true;  // the full barrier: the copy landed, then the step
      ch.busy_until = std::max(now, ch.copied == c ? ch.landing[buf] : now) + step_time(rng);
    }
  }
  out.deadlock = true;
  return out;
}

// The L2 helpers' claims at random build and step times, chains equal, ragged and empty, with
// helpers from the start, late, never (no helper resident) and more helpers than chains; slow
// copies and publications; contract and raw inputs (the gate rows between builds): no buffer,
// slot or carry row written before its chain finished its previous record or row, no record read
// but the one claimed for it, no deadlock.
TEST(OnePassHandover, L2HelpersAreSafe) {
  const std::vector<std::vector<int64_t>> lengths = {
      {97, 97, 97, 97}, {512, 40, 3, 0}, {5, 0, 0}, {1, 2, 3}, {64, 64, 0, 7, 300}, {0}};
  for (const auto& chunks : lengths) {
    SCOPED_TRACE(::testing::PrintToString(chunks));
    for (uint32_t seed = 1; seed <= 24; ++seed) {
      for (const int helpers : {0, 1, 5, 12}) {
        for (const int64_t start : {int64_t{0}, int64_t{700}, int64_t{1} << 40}) {
          L2Timing t;
          t.helper_start = start;
          t.step_lo = seed % 2 ? 5 : 30;  // chain-bound and builder-bound
          t.step_hi = seed % 2 ? 15 : 60;
          t.copy = seed % 3 == 0 ? 150 : 10;
          t.publish = seed % 4 == 0 ? 120 : 8;
          t.claim_latency = seed % 5 == 0 ? 60 : 5;
          t.raw = seed > 12;  // raw inputs: the gate rows between builds
          const L2Outcome o = simulate_l2_helpers(chunks, helpers, t, seed);
          ASSERT_FALSE(o.deadlock) << "seed " << seed << ", helpers " << helpers;
          ASSERT_EQ(o.violations, 0) << "seed " << seed << ", helpers " << helpers;
        }
      }
    }
  }
}

// Without the chain's count after its last step, a helper whose two slots hold chains' last
// records waits forever for a free slot, and the chain whose sub-chunk it has claimed with it:
// the simulation finds such a deadlock (the kernel stores the last count: l2_helpers.cuh).
TEST(OnePassHandover, L2HelpersNeedTheLastCount) {
  bool deadlock = false;
  for (uint32_t seed = 1; seed <= 40 && !deadlock; ++seed) {
    L2Timing t;
    t.last_count = false;
    deadlock = simulate_l2_helpers({12, 14, 16, 300, 18, 13, 250, 20}, 16, t, seed).deadlock;
  }
  EXPECT_TRUE(deadlock);
}

// h96-fixed in miniature: 8 chains, 12 helper builders (96 chains and 36 helper CTAs' 144), a
// build 90-110 ticks (~4.8 us), a chain step 24-30 (~1.3 us), a copy 15 and a claim 5. The
// chains alone are builder-bound (a third of a build a step, ~33 ticks, 34 with the simulation's
// tick a step); with the helpers within 10 % of their own step (27, 29 with its ticks): 30.3
// (29.8 with three record slots a helper builder, 53.5 with one).
TEST(OnePassHandover, L2HelpersMakeFewChainsChainBound) {
  const std::vector<int64_t> chunks(8, 400);
  L2Timing t;
  t.step_lo = 24;
  t.step_hi = 30;
  t.copy = 15;
  double alone = 0, helped = 0;
  constexpr int kSeeds = 6;
  for (uint32_t seed = 1; seed <= kSeeds; ++seed) {
    const L2Outcome a = simulate_l2_helpers(chunks, 0, t, seed);
    const L2Outcome h = simulate_l2_helpers(chunks, 12, t, seed);
    ASSERT_FALSE(a.deadlock || h.deadlock);
    alone += static_cast<double>(a.ticks) / kSeeds / 400;
    helped += static_cast<double>(h.ticks) / kSeeds / 400;
  }
  EXPECT_GT(alone, 100.0 / 3 * 0.98) << alone;  // no faster than three builders
  EXPECT_LT(helped, 29.0 * 1.10) << helped << " against " << alone << " alone";
}

}  // namespace
