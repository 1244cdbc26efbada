#!/usr/bin/env bash
# PREPARED (2026-12-07; binaries to stage from the tree's HEAD, 7aba5a8 or later). The next device
# call, in order of what matters most (the deadline skips what does not fit):
#   GPU tests (the library takes the value halves for few long chains, bit for bit
#   one_pass16_halves; the halves' raw refusal at validation); kda-check of the library (every
#   path) on smoke, edge, long-memory and contract-mixed at the 4e-3 bar, and of the halves on
#   smoke (raw rows "unsupported"); kda-bench of the library on contract and contract-mixed
#   (fused, explicit, l2norm, raw) beside v2w_two_kernel's fused rows (h64-fixed: the halves
#   against the two kernels the library ran before, predicted ~545 against ~700 us on an H200,
#   ~776 on an H100); memcheck of the library; then the peers (cuDNN-FE 1.32 sm90, both gate
#   regimes, through scripts/peers/run-all-h200.sh).
#   Full: ~330 s of command time plus the peers' ~110 and a profile's ~80 (timeout_s=600). Short (~150 s, no
#   contract-mixed check, no memcheck): SHORT=1.
# Stage first (stripped, to keep the carry under the device tool's 64 MiB with the tree; rebuild
# after committing, the binaries carry the commit):
#   cmake --build --preset release -j 2 && scripts/stage-device.sh new   (.whl: scripts/peers/README.md)
#   run(command="bash scripts/h200-next-call.sh", carry=[".device/new", ".whl"], timeout_s=560)
# then move $OUT's files into results/h200/<date>-<commit>-<name>/ with this script as call.sh.
# (A 450-s call of this plan on 2026-12-07 was taken back mid-run: nothing came back.)
set -u
B=.device/new/bin
SHORT=${SHORT:-0}
DEADLINE=${DEADLINE:-$([[ $SHORT == 1 ]] && echo 60 || echo 320)}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
if [[ $SHORT == 1 ]]; then
  step 25 test_kda_gpu $B/test_kda_gpu --gtest_brief=1 --gtest_filter='*ValueHalves*:*LibraryTakes*'
else
  step 40 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
  for s in contract contract-mixed; do
    step 40 bench-$s $B/kda-bench --shapes shapes/$s.yaml --paths fused,explicit,l2norm,raw \
      --no-verify --min-time 0.25 --md $r/bench-$s.md --csv $r/bench-$s.csv --force
  done
  step 30 bench-contract-two-kernel $B/kda-bench --variant v2w_two_kernel \
    --shapes shapes/contract.yaml --paths fused --no-verify --min-time 0.25 \
    --csv $r/bench-contract-two-kernel.csv --force
  step 10 compare-contract-two-kernel $B/kda-bench compare $r/bench-contract-two-kernel.csv \
    $r/bench-contract.csv --md $r/compare-contract-two-kernel.md
fi
checks=(smoke edge)
[[ $SHORT == 1 ]] || checks+=(long-memory contract-mixed)
for s in "${checks[@]}"; do
  step 100 check-$s $B/kda-check --rms-limit 4e-3 --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --force
done
# The halves' raw path reported as unsupported (7aba5a8), every other row at the 5e-3 gate.
step 10 check-halves-smoke $B/kda-check --variant one_pass16_halves --shapes shapes/smoke.yaml \
  --md $r/check-halves-smoke.md --force
[[ $SHORT == 1 ]] || step 40 sanitizer-library-memcheck compute-sanitizer --tool memcheck \
  --error-exitcode 9 $B/kda-check --shapes shapes/smoke.yaml
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
finish
# The peers beside this build: ours (kda-bench fused and raw, kda_torch) and cuDNN-FE, both files.
[[ ${RUN_PEERS:-1} == 1 ]] || exit 0
PEERS=cudnn FLA=0 CHECK_SHAPES=none DEADLINE=130 BUILD_WAIT=30 CHECKS_DONE=$([[ $SHORT == 1 ]] && echo 10 || echo 50) \
  BIN=$B bash scripts/peers/run-all-h200.sh > /dev/null 2>&1
cat "$OUT/peers-summary.txt" 2>/dev/null | head -40
# The builders on a many-chain shape (the geomean's bulk: ~1.7 us a sub-chunk per SM): the one
# pass the library runs there, profiled for the next step (text pages only).
[[ ${PROFILE:-1} == 1 ]] || exit 0
BIN=$B KERNELS=onepass VARIANT=one_pass16_bf16 KEEP_REPORTS=0 TAG=onepass-uniform8 \
  timeout 110 bash scripts/h200-profile.sh h64-uniform8 > /dev/null 2>&1
echo "profile rc=$?"
