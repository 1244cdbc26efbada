#!/usr/bin/env bash
# The library on the raw value halves (kernel_choice.h kValueHalvesRawStepUs; docs/perf-notes.md
# "The library takes the raw value halves for few chains": h64-fixed raw 0.853 -> ~0.69 ms
# predicted, the other shapes unchanged) and the L2 helpers' miss taken apart: one device call.
#   run(command="bash scripts/h200-raw-halves-call.sh", carry=[".device/new"], timeout_s=600)
# Steps: the GPU tests (LibraryTakesTheRawValueHalvesForFewLongChains among them), kda-check of
# the raw path at 4e-3 on smoke, edge, long memory and contract's h64-fixed (the shape that moves),
# the library's contract and state rows (fused, raw), then Nsight Compute's full set on h96-uniform8
# (fused) for one_pass16_l2_chains_alone and one_pass16_bf16 (the chains-alone form measured 1.32x
# the one pass there with no helper CTA: which stalls its chain or builders gained).
# Then move $OUT's files into results/h200/<date>-<commit>-<name>/ with this script as call.sh.
set -u
B=.device/new/bin
DEADLINE=${DEADLINE:-480}
# SHORT=1 (a call on the session's last device minutes): the GPU tests that cover these changes,
# then the steps in order of need, no profiles.
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
if [[ ${MINIMAL:-0} == 1 ]]; then
  # MINIMAL=1 (~80 s): the library's raw halves (its plan and bits, h64-fixed's raw row and check)
  # and the chains-alone form's row on h96-uniform8, nothing else.
  step 30 test_kda_gpu $B/test_kda_gpu --gtest_brief=1 \
    --gtest_filter='*LibraryTakes*:*KernelChoice*:*OnePassL2Helpers*'
  step 40 check-raw-h64-fixed $B/kda-check --backend raw --rms-limit 4e-3 \
    --shapes shapes/contract.yaml --only h64-fixed --md $r/check-raw-h64-fixed.md \
    --csv $r/check-raw-h64-fixed.csv --force
  step 15 bench-min $B/kda-bench --shapes shapes/contract.yaml --only h64-fixed,h96-uniform8 \
    --paths fused,raw --no-verify --min-time 0.1 --md $r/bench-min.md --csv $r/bench-min.csv --force
  for v in one_pass16_bf16 one_pass16_l2_chains_alone; do
    step 10 bench-$v $B/kda-bench --variant $v --shapes shapes/contract.yaml --only h96-uniform8 \
      --paths fused --no-verify --min-time 0.1 --csv $r/bench-$v.csv --force
  done
  step 5 compare-l2-alone $B/kda-bench compare $r/bench-one_pass16_bf16.csv \
    $r/bench-one_pass16_l2_chains_alone.csv --md $r/compare-l2-alone.md
  finish
  exit 0
elif [[ ${SHORT:-0} == 1 ]]; then
  step 40 test_kda_gpu $B/test_kda_gpu --gtest_brief=1 \
    --gtest_filter='*LibraryTakes*:*OnePassValueHalves*:*OnePassL2Helpers*:*KernelChoice*'
else
  step 90 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
fi
for s in smoke edge long-memory; do
  step 30 check-raw-$s $B/kda-check --backend raw --rms-limit 4e-3 --shapes shapes/$s.yaml \
    --md $r/check-raw-$s.md --csv $r/check-raw-$s.csv --force
done
step 60 check-raw-h64-fixed $B/kda-check --backend raw --rms-limit 4e-3 \
  --shapes shapes/contract.yaml --only h64-fixed --md $r/check-raw-h64-fixed.md \
  --csv $r/check-raw-h64-fixed.csv --force
step 40 bench-contract $B/kda-bench --shapes shapes/contract.yaml --paths fused,raw --no-verify \
  --min-time 0.25 --md $r/bench-contract.md --csv $r/bench-contract.csv --force
step 20 bench-contract-states $B/kda-bench --shapes shapes/contract-states.yaml --paths fused,raw \
  --no-verify --min-time 0.25 --md $r/bench-contract-states.md --csv $r/bench-contract-states.csv \
  --force
# The chains-alone form without its per-step global count (a MEMBAR.GPU on the chain's path;
# perf-notes: 0.887 -> ~0.68-0.72 ms on h96-uniform8 if that was the cost), beside the one pass.
for v in one_pass16_bf16 one_pass16_l2_chains_alone one_pass16_l2_helpers; do
  step 20 bench-$v $B/kda-bench --variant $v --shapes shapes/contract.yaml \
    --only h96-fixed,h96-uniform8 --paths fused --no-verify --min-time 0.12 \
    --csv $r/bench-$v.csv --force
done
step 5 compare-l2-alone $B/kda-bench compare $r/bench-one_pass16_bf16.csv \
  $r/bench-one_pass16_l2_chains_alone.csv --md $r/compare-l2-alone.md
step 5 compare-l2-helpers $B/kda-bench compare $r/bench-one_pass16_bf16.csv \
  $r/bench-one_pass16_l2_helpers.csv --md $r/compare-l2-helpers.md
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
for v in one_pass16_l2_chains_alone one_pass16_bf16; do
  [[ ${SHORT:-0} == 1 ]] && break
  (( SECONDS + 80 < DEADLINE )) || { echo "profile $v skipped (deadline)" >> "$S"; continue; }
  BIN=$B KERNELS=onepass VARIANT=$v BACKEND=fused KEEP_REPORTS=0 TAG=$v \
    timeout 80 bash scripts/h200-profile.sh h96-uniform8 > "$r/profile-$v.log" 2>&1
  echo "profile $v rc=$? (t=$SECONDS)" >> "$S"
done
finish
