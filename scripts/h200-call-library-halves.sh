#!/usr/bin/env bash
# The library with the value halves (4b9a76c; binaries of 7aba5a8), one device call (~330 s of command time):
#   GPU tests (the library takes the halves for few long chains, bit for bit); kda-check of the
#   library (every path) on smoke, edge, long-memory and contract-mixed at 4e-3; memcheck of the
#   library on smoke; kda-bench of the library on contract and contract-mixed (fused, explicit,
#   l2norm, raw); then the peers beside it (cuDNN-FE 1.32 sm90, both gate regimes).
#   run(command="bash scripts/h200-call-library-halves.sh", carry=[".device/new", ".whl"],
#       timeout_s=480)
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-300}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
step 40 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
for s in contract contract-mixed; do
  step 40 bench-$s $B/kda-bench --shapes shapes/$s.yaml --paths fused,explicit,l2norm,raw \
    --no-verify --min-time 0.25 --md $r/bench-$s.md --csv $r/bench-$s.csv --force
done
for s in smoke edge long-memory contract-mixed; do
  step 100 check-$s $B/kda-check --rms-limit 4e-3 --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --force
done
# The halves' raw path reported as unsupported (7aba5a8), every other row at the 5e-3 gate.
step 20 check-halves-smoke $B/kda-check --variant one_pass16_halves --shapes shapes/smoke.yaml \
  --md $r/check-halves-smoke.md --force
step 40 sanitizer-library-memcheck compute-sanitizer --tool memcheck --error-exitcode 9 \
  $B/kda-check --shapes shapes/smoke.yaml
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
finish
PEERS=cudnn FLA=0 CHECK_SHAPES=none DEADLINE=140 BUILD_WAIT=30 CHECKS_DONE=50 BIN=$B \
  bash scripts/peers/run-all-h200.sh > /dev/null 2>&1
cat "$OUT/peers-summary.txt" 2>/dev/null | head -40
