#!/usr/bin/env bash
# The fp16 chain under row scales (one_pass16_f16), the three builders' loads ahead in place
# (38d2786, raw inputs too) and raw k's batched norm (9f4a45b), on the library of b0125ab: GPU tests (the stage
# skip's LaunchesWorkCountsTheCapturedNodes among them), kda-check of the f16 chain, the forced one
# pass and the library on every small shape file and contract-mixed at the long-memory bar (4e-3:
# also the first GPU check of 6b1d419's batched q norm), kda-bench of the library with stages (the
# stage skip) against the f16 chain, the forced one pass and the two kernels (the same-call
# reference for the loads ahead against ff48ca9's call), both gate regimes; sanitizers on the one
# pass with its loads ahead and on the f16 chain:
#   run(command="bash results/h200/2026-12-06-b0125ab-f16-ahead/call.sh", carry=[".device/new"])
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-575}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
step 120 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
step 60 test_bench_gpu $B/test_bench_gpu --gtest_brief=1
V=(--variant one_pass16_f16 --variant one_pass16 --variant v2w_mma)
for s in smoke edge long-memory; do
  step 90 check-$s $B/kda-check "${V[@]}" --rms-limit 4e-3 --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --json $r/check-$s.json --force
done
P=(--paths fused,explicit,l2norm,raw --no-verify)
step 150 bench-contract $B/kda-bench --variant v2w_mma --shapes shapes/contract.yaml "${P[@]}" \
  --stages --md $r/bench-contract.md --csv $r/bench-contract.csv --json $r/bench-contract.json --force
for s in contract contract-mixed; do
  [[ $s == contract-mixed ]] && step 60 bench-$s $B/kda-bench --variant v2w_mma \
    --shapes shapes/$s.yaml "${P[@]}" --csv $r/bench-$s.csv --force
  for v in one_pass16_f16 one_pass16; do
    step 60 bench-$s-$v $B/kda-bench --variant $v --shapes shapes/$s.yaml "${P[@]}" \
      --csv $r/bench-$s-$v.csv --force
    step 20 compare-$s-$v $B/kda-bench compare $r/bench-$s.csv $r/bench-$s-$v.csv \
      --md $r/compare-$s-$v.md
  done
done
step 60 bench-contract-two-kernel $B/kda-bench --variant v2w_two_kernel --shapes shapes/contract.yaml \
  "${P[@]}" --csv $r/bench-contract-two-kernel.csv --force
step 20 compare-contract-two-kernel $B/kda-bench compare $r/bench-contract-two-kernel.csv \
  $r/bench-contract.csv --md $r/compare-contract-two-kernel.md
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
step 170 check-contract-mixed $B/kda-check "${V[@]}" --rms-limit 4e-3 \
  --shapes shapes/contract-mixed.yaml \
  --md $r/check-contract-mixed.md --csv $r/check-contract-mixed.csv --force
for tool in memcheck synccheck; do
  step 40 sanitizer-$tool compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/kda-check --variant one_pass16 --variant one_pass16_f16 --shapes shapes/smoke.yaml
done
finish
