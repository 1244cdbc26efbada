#!/usr/bin/env bash
# The library with the value halves (4b9a76c; binaries of 7aba5a8), one device call. A 450-s
# call of this script was taken back mid-run (no results), leaving ~450 s of the session's device
# time, so it runs short (~150 s of command time):
#   the GPU tests of the value halves and the library's choice; kda-check of the library on
#   smoke and edge at 4e-3, and of the halves on smoke (their raw rows reported unsupported);
#   then the peers beside the library (ours fused and raw through kda-bench and kda_torch,
#   cuDNN-FE 1.32 sm90; contract and contract-mixed).
#   run(command="bash scripts/h200-call-library-halves.sh", carry=[".device/new", ".whl"],
#       timeout_s=300)
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-60}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
step 25 test_kda_gpu-halves $B/test_kda_gpu --gtest_brief=1 \
  --gtest_filter='*ValueHalves*:*LibraryTakes*'
for s in smoke edge; do
  step 10 check-$s $B/kda-check --rms-limit 4e-3 --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --force
done
step 10 check-halves-smoke $B/kda-check --variant one_pass16_halves --shapes shapes/smoke.yaml \
  --md $r/check-halves-smoke.md --force
finish
PEERS=cudnn FLA=0 CHECK_SHAPES=none DEADLINE=130 BUILD_WAIT=30 CHECKS_DONE=10 BIN=$B \
  bash scripts/peers/run-all-h200.sh > /dev/null 2>&1
cat "$OUT/peers-summary.txt" 2>/dev/null | head -40
