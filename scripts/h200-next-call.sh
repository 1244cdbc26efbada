#!/usr/bin/env bash
# RAN at f067e65 (results/h200/2026-12-07-f067e65-helpers-vpairs-h100). Next session: first
# scripts/h200-verify-call.sh (the helpers' empty-sequence fix, the library's raw path on V_new's
# pair, bit for bit), then this call again for the library's raw rows beside cuDNN-FE's. In order of
# what matters most (the deadline skips what does not fit):
#   GPU tests (the library takes the value halves for few long chains; the helper cluster bit for
#   bit one_pass16_bf16; the clusters' raw refusal); kda-bench of the library on contract (fused,
#   explicit, l2norm, raw) beside one_pass16_helpers (fused, explicit: h96-fixed predicted
#   0.64-0.71 ms against the two kernels' ~0.83 on an H100) and v2w_two_kernel's fused rows;
#   kda-check of the library (every path) and of the helpers (fused) on smoke, edge and
#   long-memory at the 4e-3 bar, the library on contract-mixed; the helpers under memcheck,
#   synccheck and racecheck; the peers (cuDNN-FE 1.32 sm90, both gate regimes, ours beside them
#   through scripts/peers/run-all-h200.sh); PROFILE=1: then a profile of the one pass on
#   h64-uniform8. Also V_new as a bf16 pair (one_pass16_vpairs) against the bf16 chain on every
#   path, timed and checked; the library's h64-fixed fused row is the value halves with their
#   decays read in flight (predicted 505-525 us against 4f12d43's 545, another call). Full: ~340 s
#   of steps (the edge and contract-mixed checks last, skipped at the deadline) and the peers'
#   ~130 (timeout_s=600). Short
#   (~170 s: tests, the benches, smoke and long-memory checks; no peers): SHORT=1.
# Stage first (stripped, to keep the carry under the device tool's 64 MiB with the tree; rebuild
# after committing, the binaries carry the commit):
#   cmake --build --preset release -j 2 && scripts/stage-device.sh new   (.whl: scripts/peers/README.md)
#   run(command="bash scripts/h200-next-call.sh", carry=[".device/new", ".whl"], timeout_s=600)
# then move $OUT's files into results/h200/<date>-<commit>-<name>/ with this script as call.sh.
set -u
B=.device/new/bin
SHORT=${SHORT:-0}
DEADLINE=${DEADLINE:-$([[ $SHORT == 1 ]] && echo 200 || echo 340)}
. scripts/device-steps.sh
record_machine "binaries built from: $(binary_commit $B/kda-check)"
H=(--variant one_pass16_helpers)
if [[ $SHORT == 1 ]]; then
  step 30 test_kda_gpu $B/test_kda_gpu --gtest_brief=1 \
    --gtest_filter='*ValueHalves*:*LibraryTakes*:*Helpers*'
else
  step 45 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
fi
step 40 bench-contract $B/kda-bench --shapes shapes/contract.yaml --paths fused,explicit,l2norm,raw \
  --no-verify --min-time 0.25 --md $r/bench-contract.md --csv $r/bench-contract.csv --force
step 30 bench-contract-helpers $B/kda-bench "${H[@]}" --shapes shapes/contract.yaml \
  --paths fused,explicit --no-verify --min-time 0.25 --csv $r/bench-contract-helpers.csv --force
step 10 compare-helpers-library $B/kda-bench compare $r/bench-contract.csv \
  $r/bench-contract-helpers.csv --md $r/compare-helpers-library.md
# V_new as a bf16 pair (one_pass16_vpairs) against the bf16 chain, every path: within ~3 % on the
# builder-bound shapes (the chain's slack) is the prediction; if so the library takes it for the
# explicit and raw paths.
step 40 bench-contract-vpairs $B/kda-bench --variant one_pass16_vpairs --shapes shapes/contract.yaml \
  --paths fused,explicit,raw --no-verify --min-time 0.25 --csv $r/bench-contract-vpairs.csv --force
step 40 bench-contract-bf16 $B/kda-bench --variant one_pass16_bf16 --shapes shapes/contract.yaml \
  --paths fused,explicit,raw --no-verify --min-time 0.25 --csv $r/bench-contract-bf16.csv --force
step 10 compare-vpairs-bf16 $B/kda-bench compare $r/bench-contract-bf16.csv \
  $r/bench-contract-vpairs.csv --md $r/compare-vpairs-bf16.md
step 25 bench-contract-two-kernel $B/kda-bench --variant v2w_two_kernel \
  --shapes shapes/contract.yaml --paths fused --no-verify --min-time 0.25 \
  --csv $r/bench-contract-two-kernel.csv --force
step 10 compare-contract-two-kernel $B/kda-bench compare $r/bench-contract-two-kernel.csv \
  $r/bench-contract.csv --md $r/compare-contract-two-kernel.md
check_shapes() {
  for s in "$@"; do
  step 60 check-$s $B/kda-check --rms-limit 4e-3 --shapes shapes/$s.yaml \
    --md $r/check-$s.md --csv $r/check-$s.csv --force
  step 30 check-helpers-$s $B/kda-check "${H[@]}" --backend fused --rms-limit 4e-3 \
    --shapes shapes/$s.yaml --md $r/check-helpers-$s.md --force
  step 40 check-vpairs-$s $B/kda-check --variant one_pass16_vpairs --rms-limit 4e-3 \
    --shapes shapes/$s.yaml --md $r/check-vpairs-$s.md --force
  done
}
check_shapes smoke long-memory
if [[ $SHORT != 1 ]]; then
  for tool in memcheck synccheck racecheck; do
    step 30 sanitizer-helpers-$tool compute-sanitizer --tool $tool --error-exitcode 9 \
      $B/kda-check "${H[@]}" --backend fused --shapes shapes/smoke.yaml
  done
  check_shapes edge
  step 60 check-contract-mixed $B/kda-check --rms-limit 4e-3 --shapes shapes/contract-mixed.yaml \
    --md $r/check-contract-mixed.md --csv $r/check-contract-mixed.csv --force
fi
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >> "$S"
finish
[[ $SHORT == 1 ]] && exit 0
# The peers beside this build: ours (kda-bench fused and raw, kda_torch) and cuDNN-FE, both files.
[[ ${RUN_PEERS:-1} == 1 ]] || exit 0
PEERS=cudnn FLA=0 CHECK_SHAPES=none DEADLINE=130 BUILD_WAIT=30 CHECKS_DONE=50 \
  BIN=$B bash scripts/peers/run-all-h200.sh > /dev/null 2>&1
cat "$OUT/peers-summary.txt" 2>/dev/null | head -40
# The builders on a many-chain shape (the geomean's bulk: ~1.7 us a sub-chunk per SM): the one
# pass the library runs there, profiled for the next step (text pages only).
[[ ${PROFILE:-0} == 1 ]] || exit 0
BIN=$B KERNELS=onepass VARIANT=one_pass16_bf16 KEEP_REPORTS=0 TAG=onepass-uniform8 \
  timeout 100 bash scripts/h200-profile.sh h64-uniform8 > /dev/null 2>&1
echo "profile rc=$?"
