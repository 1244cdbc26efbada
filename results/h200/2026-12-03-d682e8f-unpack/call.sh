#!/usr/bin/env bash
# d682e8f (bf16 pairs unpacked by a shift and a mask) against fc53d7a's kernels, one call: GPU
# tests (the unpack against CUDA's conversion for every pattern among them), benches in both gate
# regimes (contract twice, ABBA), kda-check --dump of smoke, edge and long-memory by both binaries
# with every output compared byte for byte, kda-check of the new binary on edge (+ raw),
# long-memory (+ raw) and two contract-mixed shapes.
set -u
NEW=.device/ab/bin
DEADLINE=${DEADLINE:-300}
. scripts/device-steps.sh
record_machine "binaries: $(binary_commit $NEW/kda-check); base: $(binary_commit $NEW/kda-bench-fc53d7a)"
step 40 test_kda_gpu $NEW/test_kda_gpu --gtest_brief=1
bench() {  # TAG BINARY FILE
  step 60 "bench-$3-$1" "$2" --shapes "shapes/$3.yaml" --no-verify --paths fused,raw \
    --csv "$r/bench-$3-$1.csv" --md "$r/bench-$3-$1.md" --force
}
cmp_bench() { step 10 "compare-$1" $NEW/kda-bench compare "$r/bench-$2.csv" "$r/bench-$3.csv" --mode warm --md "$r/compare-$1.md" --force; }
bench base $NEW/kda-bench-fc53d7a contract
bench new $NEW/kda-bench contract
bench new2 $NEW/kda-bench contract
bench base2 $NEW/kda-bench-fc53d7a contract
cmp_bench contract-new-vs-base contract-base contract-new
cmp_bench contract-new2-vs-base2 contract-base2 contract-new2
bench base $NEW/kda-bench-fc53d7a contract-mixed
bench new $NEW/kda-bench contract-mixed
cmp_bench contract-mixed-new-vs-base contract-mixed-base contract-mixed-new
# The same outputs, bit for bit: every GPU path's out_* (and final states) of both binaries.
for file in smoke edge long-memory; do
  step 40 "dump-$file-base" $NEW/kda-check-fc53d7a --shapes "shapes/$file.yaml" --dump "/tmp/dump-base/$file" --force
  step 40 "dump-$file-new" $NEW/kda-check --shapes "shapes/$file.yaml" --dump "/tmp/dump-new/$file" --force
done
( cd /tmp/dump-base && n=0 && bad=0 && for f in $(find . -name 'out_*.npy' ! -name 'out_reference*' -o -name 'final*.npy'); do
    n=$((n + 1)); cmp -s "$f" "/tmp/dump-new/$f" || { bad=$((bad + 1)); echo "DIFFERS $f"; }; done
  echo "bitwise: $n output files compared, $bad differ" ) > "$r/bitwise.txt" 2>&1
cat "$r/bitwise.txt" | tail -1 >> "$S"
for c in edge edge:raw long-memory:raw; do
  file=${c%%:*}; name=check-$file; backend=()
  [[ $c == *:raw ]] && { backend=(--backend raw); name=check-$file-raw; }
  step 40 "$name" $NEW/kda-check --rms-limit 4e-3 "${backend[@]}" --shapes "shapes/$file.yaml" \
    --md "$r/$name.md" --csv "$r/$name.csv" --force
done
step 90 check-contract-mixed-2 $NEW/kda-check --rms-limit 4e-3 --shapes shapes/contract-mixed.yaml \
  --only h96-fixed h64-ragged6 --md "$r/check-contract-mixed-2.md" --csv "$r/check-contract-mixed-2.csv" --force
finish
