// The one pass's record hand-over (lib/kda/src/onepass/kernel.cuh, halves.cuh), simulated on the
// CPU with random build and step times: builders build sub-chunks c = builder, builder + B, ...
// into ring buffer c % R of every CTA of the chain (the value halves: into their own CTA's and,
// by bulk copy, the peer's), and each CTA's chain consumes them in order.
// A builder may write buffer b only once every chain has finished the buffer's previous record
// (c - R), and a chain may read record c only once it is built. The waits are modelled as the
// kernels do them: an mbarrier's try_wait.parity (true when the phase in progress has the other
// parity, so a waiter two phases behind is let through), or the value halves' monotonic counts
// of finished sub-chunks. Each configuration of the kernels is safe with its wait; the value
// halves would not be with parity waits (the reason for halves.cuh kSDone).
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

}  // namespace
