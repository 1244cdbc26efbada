#!/usr/bin/env bash
# f06b1cc (the SCAN in value halves when 2 x chains <= SMs: h64-fixed's 64 chains on 128 SMs)
# against 29f0516's kernels (binary built from 87e6bbd + the review diff), one call: GPU tests,
# benches in both gate regimes, stage times, kda-check (value halves on every small shape, the
# whole-chain variant beside the library on smoke), memcheck / racecheck / synccheck of the bitwise
# test, and a source-level Nsight Compute profile of the contract PREP (for the diet).
set -u
NEW=.device/ab/bin
DEADLINE=${DEADLINE:-450}
. scripts/device-steps.sh
record_machine "binaries: $(binary_commit $NEW/kda-check); base: $(binary_commit $NEW/kda-bench-base)"
step 60 test_kda_gpu $NEW/test_kda_gpu --gtest_brief=1
bench() {  # TAG BINARY FILE PATHS
  step 90 "bench-$3-$1" "$2" --shapes "shapes/$3.yaml" --no-verify --paths "$4" \
    --csv "$r/bench-$3-$1.csv" --md "$r/bench-$3-$1.md" --force
}
cmp() { step 10 "compare-$1" $NEW/kda-bench compare "$r/bench-$2.csv" "$r/bench-$3.csv" --mode warm --md "$r/compare-$1.md" --force; }
bench base $NEW/kda-bench-base contract fused,raw,explicit
bench new $NEW/kda-bench contract fused,raw,explicit
cmp contract-new-vs-base contract-base contract-new
bench base $NEW/kda-bench-base contract-mixed fused,raw
bench new $NEW/kda-bench contract-mixed fused,raw
cmp contract-mixed-new-vs-base contract-mixed-base contract-mixed-new
step 40 stages-new $NEW/kda-bench --shapes shapes/contract.yaml --only h64-fixed h96-fixed --no-verify \
  --paths fused,raw --stages --csv "$r/stages-new.csv" --md "$r/stages-new.md" --force
t=ScanValueHalvesAreTheWholeChainScanBitForBit
for tool in memcheck racecheck synccheck; do
  step 60 "$tool" compute-sanitizer --tool $tool --error-exitcode 9 $NEW/test_kda_gpu --gtest_filter="*$t*"
done
for c in smoke edge edge:raw long-memory long-memory:raw; do
  file=${c%%:*}; name=check-$file; backend=()
  [[ $c == *:raw ]] && { backend=(--backend raw); name=check-$file-raw; }
  step 60 "$name" $NEW/kda-check --rms-limit 4e-3 "${backend[@]}" --shapes "shapes/$file.yaml" \
    --md "$r/$name.md" --csv "$r/$name.csv" --force
done
step 60 check-smoke-variants $NEW/kda-check --rms-limit 4e-3 --shapes shapes/smoke.yaml \
  --variant v2w_mma v2w_whole_chains --md "$r/check-smoke-variants.md" --force
step 60 check-contract-h64 $NEW/kda-check --rms-limit 4e-3 --shapes shapes/contract.yaml --only h64-fixed \
  --md "$r/check-contract-h64.md" --csv "$r/check-contract-h64.csv" --force
step 60 check-contract-h64-raw $NEW/kda-check --rms-limit 4e-3 --backend raw --shapes shapes/contract.yaml \
  --only h64-fixed --md "$r/check-contract-h64-raw.md" --force
step 60 check-contract-mixed-h64 $NEW/kda-check --rms-limit 4e-3 --shapes shapes/contract-mixed.yaml \
  --only h64-fixed --md "$r/check-contract-mixed-h64.md" --force
step 60 ncu-prep ncu --clock-control none -k regex:prep_kernel -c 1 --set full --import-source yes \
  -o "$r/prep" $NEW/kda-bench --no-blocking-kernel --shapes shapes/contract.yaml --only h96-fixed \
  --paths fused --no-verify --min-samples 1 --min-time 0 --warmup 0 -q
step 20 ncu-source ncu -i "$r/prep.ncu-rep" --page source --csv --print-source sass
step 20 ncu-details ncu -i "$r/prep.ncu-rep" --page details
rm -f "$r/prep.ncu-rep"
gzip -f "$r/ncu-source.log" 2>/dev/null
finish
