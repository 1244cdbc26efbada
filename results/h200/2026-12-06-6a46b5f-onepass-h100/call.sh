#!/usr/bin/env bash
# The one-pass forward in the library (6a46b5f): GPU tests, kda-check of the library (v2w_mma: the
# one pass on the many-chain shapes) and of the forced one pass (one_pass16) on every shape file,
# kda-bench of the library against its two kernels on every call (v2w_two_kernel) in both gate
# regimes (fused, explicit, raw), sanitizers on the one pass (contract and raw), the lab's bit-for-bit checks (delayed hand-overs):
#   run(command="bash results/h200/2026-12-06-6a46b5f-onepass-h100/call.sh", carry=[".device/new"])
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-570}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
step 200 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
step 60 test_bench_gpu $B/test_bench_gpu --gtest_brief=1
V=(--variant one_pass16 --variant v2w_mma)
for s in smoke edge long-memory; do
  step 90 check-$s $B/kda-check "${V[@]}" --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --json $r/check-$s.json --force
done
for s in contract contract-mixed; do
  step 90 bench-$s $B/kda-bench --variant v2w_mma --shapes shapes/$s.yaml --stages \
    --md $r/bench-$s.md --csv $r/bench-$s.csv --json $r/bench-$s.json --force
  step 60 bench-$s-two-kernel $B/kda-bench --variant v2w_two_kernel --shapes shapes/$s.yaml \
    --no-verify --csv $r/bench-$s-two-kernel.csv --force
  step 20 compare-$s $B/kda-bench compare $r/bench-$s-two-kernel.csv $r/bench-$s.csv \
    --md $r/compare-$s.md
done
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
for s in contract contract-mixed; do
  step 170 check-$s $B/kda-check "${V[@]}" --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --json $r/check-$s.json --force
done
for tool in memcheck racecheck synccheck; do
  step 60 sanitizer-$tool compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/kda-check --variant one_pass16 --shapes shapes/smoke.yaml
done
step 60 lab-check $B/kda-lab-factors16 --check-only
finish
