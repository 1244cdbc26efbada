// kda-lab-l2-ring: runs the L2-ring experiment (l2_ring.h) over ring sizes and cache policies and
// prints one row per configuration: the kernel's median time against the time the inputs and
// outputs alone need, and against the two-kernel design's traffic (the records written and read
// back through DRAM). Exit codes: 0 done (every record read back intact), 1 a record came back
// wrong, 2 bad usage, 3 no usable GPU or a CUDA error.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "l2_ring.h"

namespace {

using kda::lab::l2ring::RingBuffers;
using kda::lab::l2ring::RingShape;

[[noreturn]] void cuda_fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "kda-lab-l2-ring: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(3);
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) cuda_fail(what, e);
}

struct Row {
  int slots;
  bool hints;
  double median_ms, min_ms;
  unsigned long long mismatched;
};

Row measure(RingShape shape, int slots, bool hints, const RingBuffers& buffers, int warmup,
            int runs, cudaStream_t stream) {
  shape.slots = slots;
  shape.cache_hints = hints;
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> ms;
  unsigned long long mismatched = 0;
  for (int i = 0; i < warmup + runs; ++i) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    check(kda::lab::l2ring::run_ring(shape, buffers, stream), "ring kernel launch");
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "ring kernel");
    unsigned long long stats[2] = {};
    check(cudaMemcpy(stats, buffers.stats, sizeof(stats), cudaMemcpyDeviceToHost), "stats copy");
    mismatched += stats[0];
    float t = 0.0f;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    if (i >= warmup) ms.push_back(t);
  }
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  std::sort(ms.begin(), ms.end());
  return {slots, hints, ms[ms.size() / 2], ms.front(), mismatched};
}

}  // namespace

int main(int argc, char** argv) {
  RingShape shape;
  std::vector<int> slot_list = {2, 4, 8};
  int warmup = 2, runs = 10, device = 0;
  bool with_unreused = true;
  CLI::App app{
      "kda-lab-l2-ring: does a per-chain record ring between PREP and SCAN stay in L2? "
      "(lab/README.md, docs/perf-notes.md)"};
  app.add_option("--chains", shape.chains, "(sequence, head) chains (h96-fixed: 96, h64-fixed: 64)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--chunks", shape.chunks, "64-token chunks per chain")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--slots", slot_list, "ring sizes to try, records per chain")
      ->check(CLI::Range(1, 1 << 16));
  app.add_flag("!--no-unreused", with_unreused,
               "skip the row with slots = chunks (no reuse: the two-kernel design's traffic)");
  app.add_option("--input-bytes", shape.input_bytes, "input bytes per chunk");
  app.add_option("--record-bytes", shape.record_bytes, "record bytes per chunk");
  app.add_option("--output-bytes", shape.output_bytes, "output bytes per chunk");
  app.add_option("--producer-delay-ns", shape.producer_delay_ns, "extra producer time per chunk");
  app.add_option("--warmup", warmup, "untimed runs per configuration")->check(CLI::Range(0, 100));
  app.add_option("--runs", runs, "timed runs per configuration")->check(CLI::Range(1, 1000));
  app.add_option("--device", device, "CUDA device index")->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (with_unreused) slot_list.push_back(shape.chunks);
  check(cudaSetDevice(device), "cudaSetDevice");
  for (const int slots : slot_list) {
    RingShape s = shape;
    s.slots = slots;
    if (const std::string why = kda::lab::l2ring::ring_refusal(s); !why.empty()) {
      std::fprintf(stderr, "kda-lab-l2-ring: --slots %d: %s\n", slots, why.c_str());
      return 2;
    }
  }
  RingShape largest = shape;
  largest.slots = *std::max_element(slot_list.begin(), slot_list.end());
  const auto sizes = kda::lab::l2ring::ring_buffer_bytes(largest);
  RingBuffers b;
  check(cudaMalloc(&b.input, sizes.input), "cudaMalloc input");
  check(cudaMalloc(&b.records, sizes.records), "cudaMalloc records");
  check(cudaMalloc(&b.output, sizes.output), "cudaMalloc output");
  check(cudaMalloc(reinterpret_cast<void**>(&b.counters), sizes.counters), "cudaMalloc counters");
  check(cudaMalloc(reinterpret_cast<void**>(&b.stats), sizes.stats), "cudaMalloc stats");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  kda::lab::l2ring::fill_input(shape, b, stream);
  check(cudaGetLastError(), "fill kernel launch");
  check(cudaStreamSynchronize(stream), "fill kernel");

  const double in_out = static_cast<double>(sizes.input + sizes.output);
  const double records =
      static_cast<double>(static_cast<int64_t>(shape.chains) * shape.chunks * shape.record_bytes);
  std::printf(
      "chains %d, chunks %d; per chunk: input %lld B, record %lld B, output %lld B; "
      "producer delay %d ns\n",
      shape.chains, shape.chunks, static_cast<long long>(shape.input_bytes),
      static_cast<long long>(shape.record_bytes), static_cast<long long>(shape.output_bytes),
      shape.producer_delay_ns);
  std::printf("inputs + outputs %.3f GB; records written and read back %.3f GB each\n\n",
              in_out * 1e-9, records * 1e-9);
  std::printf(
      "| slots | ring (MB) | cache hints | median (ms) | min (ms) | (in + out) / median "
      "(TB/s) | (in + out + 2 records) / median (TB/s) | records wrong |\n");
  std::printf("|---:|---:|---|---:|---:|---:|---:|---:|\n");
  unsigned long long wrong = 0;
  for (const int slots : slot_list) {
    for (const bool hints : {true, false}) {
      const Row r = measure(shape, slots, hints, b, warmup, runs, stream);
      wrong += r.mismatched;
      const double ring_mb =
          static_cast<double>(static_cast<int64_t>(shape.chains) * slots * shape.record_bytes) *
          1e-6;
      std::printf("| %d | %.1f | %s | %.3f | %.3f | %.2f | %.2f | %llu |\n", r.slots, ring_mb,
                  r.hints ? "evict_last ring" : "none", r.median_ms, r.min_ms,
                  in_out / (r.median_ms * 1e-3) * 1e-12,
                  (in_out + 2 * records) / (r.median_ms * 1e-3) * 1e-12, r.mismatched);
    }
  }
  std::printf(
      "\nA ring that stays in L2 runs near the inputs-and-outputs time (first bandwidth "
      "column near the ~4 TB/s the H200 streams); one that spills runs near the second.\n");
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  for (void* q : {b.input, b.records, b.output, static_cast<void*>(b.counters),
                  static_cast<void*>(b.stats)}) {
    check(cudaFree(q), "cudaFree");
  }
  if (wrong != 0)
    std::fprintf(stderr, "kda-lab-l2-ring: %llu record units came back wrong\n", wrong);
  return wrong == 0 ? 0 : 1;
}
