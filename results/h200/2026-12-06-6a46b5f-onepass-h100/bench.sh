#!/usr/bin/env bash
# The timing half of the one-pass call (the first call's kda-bench steps ran past their 90 s):
# the library (v2w_mma) with stages, then its two kernels on every call (v2w_two_kernel), both
# gate regimes, compared row by row (same call, same card).
#   run(command="bash results/h200/2026-12-06-6a46b5f-onepass-h100/bench.sh", carry=[".device/new"])
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-560}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
for s in contract contract-mixed; do
  step 200 bench-$s $B/kda-bench --variant v2w_mma --shapes shapes/$s.yaml --stages \
    --md $r/bench-$s.md --csv $r/bench-$s.csv --force
  step 80 bench-$s-two-kernel $B/kda-bench --variant v2w_two_kernel --shapes shapes/$s.yaml \
    --no-verify --csv $r/bench-$s-two-kernel.csv --force
  step 20 compare-$s $B/kda-bench compare $r/bench-$s-two-kernel.csv $r/bench-$s.csv \
    --md $r/compare-$s.md --force
done
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
find $r -size +4M -print -delete >> "$S"  # the archive must come back (16 MiB a file)
finish
