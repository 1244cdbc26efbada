#!/usr/bin/env bash
# PREPARED (2026-12-06; last staged 2026-12-07 from 7d4931d; no device machine was lent in either
# 2026-12-07 session). The next device call, in order of what matters most (the deadline skips
# what does not fit):
#   GPU tests (the value halves, staged and not, bit for bit one_pass16_bf16; the library's
#   choice per path; the fp16 chain's row scales); kda-check of the library and of every one-pass
#   variant (bf16, fp16, value halves) on smoke, edge and long-memory at the 4e-3 bar; kda-bench,
#   contract: one_pass16_f16 against one_pass16_bf16 (f2aabb8: the fp16 chain's scale work off
#   its critical path), the value halves against one_pass16_bf16 and staged against unstaged;
#   memcheck and synccheck of the value halves; the library's contract rows; 0f5959d's kda-bench
#   beside this build (the raw one pass's regression); then the peers (cuDNN-FE 1.32 sm90, both
#   gate regimes, through scripts/peers/run-all-h200.sh).
#   Full: ~450 s of command time plus the peers' ~140 (timeout_s=600). Short:
#   CHECKS_LAST=1 DEADLINE=200 RUN_PEERS=0 (~200 s: the GPU tests and the timings first).
# Stage first (stripped, to keep the carry under the device tool's 64 MiB with the tree; rebuild
# after committing, the binaries carry the commit):
#   cmake --build --preset release -j 2 && scripts/stage-device.sh new
#   git worktree add /tmp/wt-base 0f5959d && (cd /tmp/wt-base && cmake --preset release &&
#     cmake --build --preset release -j 2 --target kda-bench) &&
#     BUILD=/tmp/wt-base/build/release scripts/stage-device.sh base kda-bench
#   (.whl: scripts/peers/README.md)
#   run(command="DEADLINE=450 bash scripts/h200-next-call.sh",
#       carry=[".device/new", ".device/base", ".whl"], timeout_s=600)
# then move $OUT's files into results/h200/<date>-<commit>-<name>/ with this script as call.sh.
set -u
B=.device/new/bin
BASE=.device/base/bin
DEADLINE=${DEADLINE:-240}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check); base: $(binary_commit $BASE/kda-bench)"
step 30 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
V=(--variant v2w_mma --variant one_pass16 --variant one_pass16_bf16 --variant one_pass16_f16
   --variant one_pass16_halves --variant one_pass16_halves_staged)
checks() {
  for s in smoke edge long-memory; do
    step 20 check-$s $B/kda-check "${V[@]}" --rms-limit 4e-3 --shapes shapes/$s.yaml \
      --md $r/check-$s.md --csv $r/check-$s.csv --json $r/check-$s.json --force
  done
}
# CHECKS_LAST=1 (a short call): the timings first, the checks after the value halves' benches.
[[ ${CHECKS_LAST:-0} == 1 ]] || checks
P=(--shapes shapes/contract.yaml --paths fused,explicit,l2norm,raw --no-verify --min-time 0.25)
P3=(--shapes shapes/contract.yaml --paths fused,explicit,raw --no-verify --min-time 0.25)
# In order of what matters most, the base builds last (the deadline skips what does not fit).
step 45 bench-contract-f16 $B/kda-bench --variant one_pass16_f16 "${P3[@]}" \
  --csv $r/bench-contract-f16.csv --force
step 45 bench-contract-bf16 $B/kda-bench --variant one_pass16_bf16 "${P3[@]}" \
  --csv $r/bench-contract-bf16.csv --force
step 10 compare-contract-f16-bf16 $B/kda-bench compare $r/bench-contract-bf16.csv \
  $r/bench-contract-f16.csv --md $r/compare-contract-f16-bf16.md
# The value-halves cluster (two CTAs per chain) against the one pass it mirrors (one_pass16_bf16).
P2=(--shapes shapes/contract.yaml --paths fused,explicit --no-verify --min-time 0.25)
step 40 bench-contract-halves $B/kda-bench --variant one_pass16_halves "${P2[@]}" \
  --csv $r/bench-contract-halves.csv --force
step 10 compare-contract-halves-bf16 $B/kda-bench compare $r/bench-contract-bf16.csv \
  $r/bench-contract-halves.csv --md $r/compare-contract-halves-bf16.md
step 40 bench-contract-halves-staged $B/kda-bench --variant one_pass16_halves_staged "${P2[@]}" \
  --csv $r/bench-contract-halves-staged.csv --force
step 10 compare-contract-staged-halves $B/kda-bench compare $r/bench-contract-halves.csv \
  $r/bench-contract-halves-staged.csv --md $r/compare-contract-staged-halves.md
[[ ${CHECKS_LAST:-0} == 1 ]] && checks
# The cluster's hand-overs under the sanitizers (distributed shared memory, remote mbarriers).
for tool in memcheck synccheck; do
  step 40 sanitizer-halves-$tool compute-sanitizer --tool $tool --error-exitcode 9 \
    $B/kda-check --variant one_pass16_halves --variant one_pass16_halves_staged \
    --shapes shapes/smoke.yaml
done
step 60 bench-contract $B/kda-bench "${P[@]}" --md $r/bench-contract.md --csv $r/bench-contract.csv --force
step 45 bench-contract-bf16-base $BASE/kda-bench --variant one_pass16 "${P3[@]}" \
  --csv $r/bench-contract-bf16-base.csv --force
step 10 compare-contract-bf16-base $B/kda-bench compare $r/bench-contract-bf16-base.csv \
  $r/bench-contract-bf16.csv --md $r/compare-contract-bf16-base.md
step 45 bench-contract-base $BASE/kda-bench "${P3[@]}" --csv $r/bench-contract-base.csv --force
step 10 compare-contract-base $B/kda-bench compare $r/bench-contract-base.csv $r/bench-contract.csv \
  --md $r/compare-contract-base.md
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
finish
# The peers beside this build: ours (kda-bench fused and raw, kda_torch) and cuDNN-FE, both files
# (RUN_PEERS=0: not this time, when the session's device time is short).
[[ ${RUN_PEERS:-1} == 1 ]] || exit 0
PEERS=cudnn FLA=0 CHECK_SHAPES=none DEADLINE=140 BUILD_WAIT=30 CHECKS_DONE=50 BIN=$B \
  bash scripts/peers/run-all-h200.sh > /dev/null 2>&1
cat "$OUT/peers-summary.txt" 2>/dev/null | head -60
# run as: DEADLINE=430 bash scripts/h200-next-call.sh, carry .device/new (dd78659) .device/base (0f5959d) .whl; on an H100 (the device tool's pick)
