#!/usr/bin/env bash
# The chain's operands as bf16 pairs (one_pass16_pairs) and 87033d9's batched fused q norm, on the
# library of ff48ca9 (v2w_mma: the one pass for fused contract calls whose chains fill the SMs):
# GPU tests (LibraryTakesTheOnePassWhenChainsFillTheSms among them), kda-check of the pairs
# kernel, the forced one pass and the library on every small shape file and contract-mixed at the
# long-memory bar (4e-3), kda-bench of the library (stages, raw included) against the pairs kernel,
# the forced one pass (the fixed shapes too) and the two kernels, and the batched q norm's build
# (.device/qn: ff48ca9 + 87033d9's build16.cuh hunk) against the library, both gate regimes:
#   run(command="bash results/h200/2026-12-06-ff48ca9-pairs-qn/call.sh",
#       carry=[".device/new", ".device/qn"])
set -u
B=.device/new/bin
Q=.device/qn/bin
DEADLINE=${DEADLINE:-575}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check); qn: $(binary_commit $Q/kda-bench)"
step 120 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
step 60 test_bench_gpu $B/test_bench_gpu --gtest_brief=1
V=(--variant one_pass16_pairs --variant one_pass16 --variant v2w_mma)
for s in smoke edge long-memory; do
  step 90 check-$s $B/kda-check "${V[@]}" --rms-limit 4e-3 --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --json $r/check-$s.json --force
done
P=(--paths fused,explicit,l2norm,raw --no-verify)
for s in contract contract-mixed; do
  step 90 bench-$s $B/kda-bench --variant v2w_mma --shapes shapes/$s.yaml "${P[@]}" --stages \
    --md $r/bench-$s.md --csv $r/bench-$s.csv --force
  for v in one_pass16_pairs one_pass16; do
    step 60 bench-$s-$v $B/kda-bench --variant $v --shapes shapes/$s.yaml "${P[@]}" \
      --csv $r/bench-$s-$v.csv --force
    step 20 compare-$s-$v $B/kda-bench compare $r/bench-$s.csv $r/bench-$s-$v.csv \
      --md $r/compare-$s-$v.md
  done
  step 60 bench-$s-qn $Q/kda-bench --shapes shapes/$s.yaml "${P[@]}" --csv $r/bench-$s-qn.csv --force
  step 20 compare-$s-qn $B/kda-bench compare $r/bench-$s.csv $r/bench-$s-qn.csv --md $r/compare-$s-qn.md
done
step 60 bench-contract-two-kernel $B/kda-bench --variant v2w_two_kernel --shapes shapes/contract.yaml \
  "${P[@]}" --csv $r/bench-contract-two-kernel.csv --force
step 20 compare-contract-two-kernel $B/kda-bench compare $r/bench-contract-two-kernel.csv \
  $r/bench-contract.csv --md $r/compare-contract-two-kernel.md
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
step 170 check-contract-mixed $B/kda-check --variant one_pass16_pairs --variant v2w_mma \
  --rms-limit 4e-3 --shapes shapes/contract-mixed.yaml \
  --md $r/check-contract-mixed.md --csv $r/check-contract-mixed.csv --force
for tool in memcheck synccheck; do
  step 40 sanitizer-$tool compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/kda-check --variant one_pass16_pairs --shapes shapes/smoke.yaml
done
step 30 lab-check $B/kda-lab-factors16 --check-only
finish
