#!/usr/bin/env bash
# A development iteration on the H200 (device tool), cheaper than scripts/h200-run.sh: the GPU
# unit tests, kda-check on smoke and edge, kda-bench on the contract (no stage rows), stage rows
# on two shapes, and an ncu profile of PREP on h96-fixed. Writes $OUT/iter.tar.gz.
#   BIN=build/snapbin VARIANT=v2_mma scripts/h200-iterate.sh
set -uo pipefail
OUT=${OUT:?OUT must be set}
bin=${BIN:-build/release/bin}
v=${VARIANT:-v2w_mma}
r=$OUT/iter; mkdir -p "$r"
run() { local name=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$r/$name.log" 2>&1; echo "$name rc=$? $((SECONDS - t0))s" | tee -a "$r/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$r/machine.txt" 2>&1
strings "$bin/kda-check" | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$' >> "$r/machine.txt"
run test_kda_gpu "$bin/test_kda_gpu" --gtest_brief=1
for s in smoke edge; do
  run check-$s "$bin/kda-check" --variant "$v" --shapes shapes/$s.yaml --md "$r/check-$s.md" --csv "$r/check-$s.csv" --force
done
run bench "$bin/kda-bench" --variant "$v" --shapes shapes/contract.yaml --no-verify \
  --md "$r/bench.md" --csv "$r/bench.csv" --force ${BENCH_ARGS:-}
run stages "$bin/kda-bench" --variant "$v" --shapes shapes/contract.yaml --only h96-fixed h64-uniform8 \
  --paths fused,explicit --stages --no-verify --md "$r/stages.md" --csv "$r/stages.csv" --force
if [[ ${PROFILE:-1} == 1 ]]; then
  BIN=$bin VARIANT=$v KERNELS=prep OUT=$r scripts/h200-profile.sh h96-fixed >> "$r/summary.txt" 2>&1
fi
tar -C "$OUT" -czf "$OUT/iter.tar.gz" iter
cp "$r/summary.txt" "$r/bench.md" "$OUT"/ 2>/dev/null
