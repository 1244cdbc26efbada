// How long kda-check's CPU references will take, for the progress lines of long runs (a start
// line and an ETA per shape on stderr). Pure CPU, no I/O.
//
// A shape's cost is taken as proportional to its per-thread work: token-heads x K x V (state
// elements each token touches) over the threads that can work on it (the references run one
// (sequence, head) pair per thread). The rate starts from a calibrated prior and becomes the
// measured one (total seconds over total work of the shapes done so far) after the first shape.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kda/harness/inputs.h"
#include "kda/harness/shapes.h"

namespace kda::harness {

// Per-thread work of one shape: token_heads * key_dim * value_dim / min(threads, pairs), where
// pairs = sequences x heads (at least 1 thread).
double reference_work(int64_t token_heads, int64_t key_dim, int64_t value_dim, int64_t pairs,
                      int threads);

// A shape's token-heads (active tokens x heads) and reference_work, from its spec or its loaded
// inputs, for `threads` threads.
struct ReferenceLoad {
  int64_t token_heads = 0;
  double work = 0.0;
};
ReferenceLoad reference_load(const ShapeSpec& shape, int threads);
ReferenceLoad reference_load(const HostInputs& inputs, int threads);

// Seconds per unit of reference_work for one kda-check shape (inputs, references and checks) on
// the 2-core Xeon of docs/perf-notes.md ("CPU reference speed"; contract shapes, with another
// job sharing the cores): the reference backend took 31-49 s per shape (work 4.3e9-6.4e9), the
// GPU backends' share (inputs + golden) is about a third of that, and the state-carry figure's
// extra float64 recurrence adds about a third to it. Only the first shape's estimate uses them;
// the measured rate takes over after it.
inline constexpr double kGoldenSecondsPerWork = 3.3e-9;
inline constexpr double kReferenceSecondsPerWork = 6.0e-9;

class ReferenceEta {
 public:
  explicit ReferenceEta(double prior_seconds_per_work) : prior_(prior_seconds_per_work) {}
  double seconds_per_work() const { return work_ > 0 ? seconds_ / work_ : prior_; }
  double estimate(double work) const { return work * seconds_per_work(); }
  // A finished shape: its work and the seconds it took.
  void record(double work, double seconds);
  // Sum of the estimates of works[first..].
  double remaining(const std::vector<double>& works, std::size_t first) const;

 private:
  double prior_;
  double seconds_ = 0.0, work_ = 0.0;
};

// Shapes whose references are expected to take longer than this get a start line.
inline constexpr double kAnnounceSeconds = 2.0;

// The start line of shape `index` (0-based) of `count`, or nothing when its estimate is below
// kAnnounceSeconds: "[2/6] h96-ragged6: CPU references for 786432 token-heads, about 12 s"
// plus, when shapes follow, "; about 50 s left in this run" (this shape and the later ones).
std::optional<std::string> reference_start_line(std::size_t index, std::size_t count,
                                                const std::string& id, int64_t token_heads,
                                                double estimate_seconds,
                                                double run_remaining_seconds);

}  // namespace kda::harness
