#!/usr/bin/env bash
# Call 1 (stop 24): verify HEAD's binaries on the H200 and time fused/explicit/raw; the FlashKDA
# peer builds run in the background and come back as caches for the peers call.
set -u
B=.device/new/bin; r=$OUT/r; mkdir -p $r; S=$OUT/summary.txt; : > $S
step() { local lim=$1 name=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $r/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s (t=$SECONDS)" | tee -a $S; }
{ echo "binaries: $(strings $B/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$')"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; } > $r/machine.txt 2>&1
for t in test_kda_gpu test_bench_gpu test_kda_validate; do step 120 $t $B/$t --gtest_brief=1; done
for s in contract contract-mixed; do
  st=(); [[ $s == contract ]] && st=(--stages)
  step 150 bench-$s $B/kda-bench --shapes shapes/$s.yaml "${st[@]}" --paths fused,explicit,l2norm,raw --md $r/bench-$s.md --csv $r/bench-$s.csv --json $r/bench-$s.json --force
done
mkdir -p /tmp/pb
for t in vfk fk ffk; do PEERS_CACHE_OUT=$OUT setsid scripts/peers/build_peers.sh $t /tmp/pb > /dev/null 2>&1 & done
for s in smoke edge long-memory contract contract-mixed; do
  step 300 check-$s $B/kda-check --rms-limit 4e-3 --shapes shapes/$s.yaml --md $r/check-$s.md --csv $r/check-$s.csv --json $r/check-$s.json --force
done
for tool in memcheck racecheck synccheck; do
  step 100 san-$tool-smoke compute-sanitizer --tool $tool --error-exitcode 9 $B/kda-check --shapes shapes/smoke.yaml
  step 60 san-$tool-raw compute-sanitizer --tool $tool --error-exitcode 9 $B/test_kda_gpu --gtest_brief=1 --gtest_filter='V2Variants/KdaRawForward.PackedTailsAndEmptySequence/2:V2Variants/KdaRawForward.HugeTinyAndZeroKRows/0'
done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/fla_core-*.whl > $r/pip.log 2>&1
step 150 kda-torch-gpu env PYTHONPATH=python:/tmp/site KDA_C_LIBRARY=$PWD/.device/new/lib/libkda_c.so python3 python/tests/run.py gpu
while (( SECONDS < 545 )) && grep -qs running /tmp/pb/*.status; do sleep 3; done
for t in vfk fk ffk; do echo "build $t: $(cat /tmp/pb/$t.status 2>/dev/null) $(cat /tmp/pb/$t.cache 2>/dev/null)" | tee -a $S; cp /tmp/pb/$t.log $r/build-$t.log 2>/dev/null; done
cp $r/bench-contract.md $r/bench-contract-mixed.md $OUT/ 2>/dev/null
tar -C $OUT -czf $OUT/h200.tar.gz r; rm -rf $r; cat $S
