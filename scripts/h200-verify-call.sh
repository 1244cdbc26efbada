#!/usr/bin/env bash
# A short verification call (2026-12-07, fourth session; ~60 s of steps): the helper cluster's
# empty-sequence fix and the library's raw path on the V_new-pair one pass, bit for bit (GPU tests),
# kda-check of the library's raw path at the 4e-3 bar, and its raw rows timed (kda-bench, contract).
#   run(command="bash scripts/h200-verify-call.sh", carry=[".device/new"], timeout_s=120)
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-90}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
step 35 test_kda_gpu $B/test_kda_gpu --gtest_brief=1 \
  --gtest_filter='*Helpers*:*LibraryTakes*:*one_pass16_helpers*:*one_pass16_vpairs*'
step 20 check-raw $B/kda-check --backend raw --rms-limit 4e-3 --shapes shapes/smoke.yaml \
  shapes/long-memory.yaml --md $r/check-raw.md --force
step 25 bench-contract-raw $B/kda-bench --shapes shapes/contract.yaml --paths raw,fused \
  --no-verify --min-time 0.1 --md $r/bench-contract-raw.md --csv $r/bench-contract-raw.csv --force
finish
