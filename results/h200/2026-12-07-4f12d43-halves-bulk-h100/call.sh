#!/usr/bin/env bash
# The value halves by bulk copy (4f12d43), one device call (~250 s of command time):
#   GPU tests (the halves bit for bit one_pass16_bf16, staged and not); kda-bench on the contract
#   shapes, fused and explicit: one_pass16_bf16, one_pass16_halves, one_pass16_halves_staged in
#   one run each, compared; kda-check of the halves (fused and explicit: they refuse raw inputs)
#   on smoke, edge and long-memory at 4e-3; memcheck, synccheck and racecheck of the halves; then,
#   if the deadline allows, Nsight Compute of the halves on h64-fixed.
#   run(command="bash scripts/h200-call-halves.sh", carry=[".device/new"], timeout_s=420)
#   (this copy is the record; the script left scripts/ once it had run)
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-330}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
step 40 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
P=(--shapes shapes/contract.yaml --paths fused,explicit --no-verify --min-time 0.25)
for v in one_pass16_bf16 one_pass16_halves one_pass16_halves_staged; do
  step 40 bench-$v $B/kda-bench --variant $v "${P[@]}" --csv $r/bench-$v.csv --force
done
step 10 compare-halves-bf16 $B/kda-bench compare $r/bench-one_pass16_bf16.csv \
  $r/bench-one_pass16_halves.csv --md $r/compare-halves-bf16.md
step 10 compare-staged-halves $B/kda-bench compare $r/bench-one_pass16_halves.csv \
  $r/bench-one_pass16_halves_staged.csv --md $r/compare-staged-halves.md
H=(--variant one_pass16_halves --variant one_pass16_halves_staged)
for s in smoke edge long-memory; do
  for p in fused explicit; do
    step 25 check-$s-$p $B/kda-check "${H[@]}" --backend $p --rms-limit 4e-3 \
      --shapes shapes/$s.yaml --md $r/check-$s-$p.md --csv $r/check-$s-$p.csv --force
  done
done
for tool in memcheck synccheck racecheck; do
  step 45 sanitizer-halves-$tool compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/kda-check "${H[@]}" --backend fused --shapes shapes/smoke.yaml
done
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
finish
BIN=$B KERNELS=onepass VARIANT=one_pass16_halves KEEP_REPORTS=0 TAG=halves \
  timeout 120 bash scripts/h200-profile.sh h64-fixed > /dev/null 2>&1
