#!/usr/bin/env bash
# The short form of scripts/h200-next-call.sh, for a session with little device time left
# (2026-12-07: eleven starts found no machine): the GPU tests (the fp16 chain's row scales on
# large, tiny and spread values; the library's kernels and chains bit for bit), kda-check of the
# library and the forced bf16 and fp16 chains at the 4e-3 bar, and the fp16 chain against the
# bf16 one (same build, same call), then the library's contract rows if time is left.
#   run(command="bash scripts/h200-short-call.sh", carry=[".device/new"], timeout_s=150)
# Stage first: scripts/stage-device.sh new
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-130}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
step 25 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
V=(--variant v2w_mma --variant one_pass16_bf16 --variant one_pass16_f16)
for s in smoke edge long-memory; do
  step 15 check-$s $B/kda-check "${V[@]}" --rms-limit 4e-3 --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --force
done
P=(--shapes shapes/contract.yaml --paths fused,explicit --no-verify --min-time 0.2)
step 30 bench-contract-f16 $B/kda-bench --variant one_pass16_f16 "${P[@]}" \
  --csv $r/bench-contract-f16.csv --force
step 30 bench-contract-bf16 $B/kda-bench --variant one_pass16_bf16 "${P[@]}" \
  --csv $r/bench-contract-bf16.csv --force
step 5 compare-contract-f16-bf16 $B/kda-bench compare $r/bench-contract-bf16.csv \
  $r/bench-contract-f16.csv --md $r/compare-contract-f16-bf16.md
step 40 bench-contract $B/kda-bench --shapes shapes/contract.yaml --paths fused,explicit,l2norm,raw \
  --no-verify --min-time 0.2 --md $r/bench-contract.md --csv $r/bench-contract.csv --force
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
finish
