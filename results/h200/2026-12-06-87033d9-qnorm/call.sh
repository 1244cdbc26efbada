#!/usr/bin/env bash
# 87033d9 (the fused q norm's rows reduced side by side; the one pass for the fused contract path
# only): GPU tests, kda-check of the library and the forced one pass on smoke / edge / long-memory
# and of both on the contract shapes, the lab's bit-for-bit checks, kda-bench of the library
# against its two kernels in the same call (contract gates):
#   run(command="bash results/h200/2026-12-06-87033d9-qnorm/call.sh", carry=[".device/new"])
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-285}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
step 40 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
V=(--variant one_pass16 --variant v2w_mma)
for s in smoke edge long-memory; do
  step 30 check-$s $B/kda-check "${V[@]}" --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --force
done
step 20 lab-check $B/kda-lab-factors16 --check-only
step 80 bench-contract $B/kda-bench --variant v2w_mma --shapes shapes/contract.yaml \
  --md $r/bench-contract.md --csv $r/bench-contract.csv --force
step 40 bench-contract-two-kernel $B/kda-bench --variant v2w_two_kernel --shapes shapes/contract.yaml \
  --no-verify --csv $r/bench-contract-two-kernel.csv --force
step 10 compare-contract $B/kda-bench compare $r/bench-contract-two-kernel.csv $r/bench-contract.csv \
  --md $r/compare-contract.md --force
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
step 150 check-contract $B/kda-check "${V[@]}" --shapes shapes/contract.yaml \
  --md $r/check-contract.md --csv $r/check-contract.csv --force
find $r -size +4M -print -delete >> "$S"
finish
