#!/usr/bin/env bash
# Call 3 (stop 24): the restructured tree (lib/kda + lab/) and the third raw-input layout on the
# H200: GPU tests, kda-check (every variant on smoke; default on edge, long-memory, contract; raw
# path on contract-mixed), sanitizers, and ours + cuDNN-FE + vLLM FlashKDA timed in one process.
set -u
B=.device/new/bin; r=$OUT/r; mkdir -p $r; S=$OUT/summary.txt; : > $S
DL=${DEADLINE:-250}
step() { local lim=$1 name=$2; shift 2
  (( SECONDS + lim > DL )) && lim=$(( DL - SECONDS )); (( lim < 5 )) && { echo "$name skipped (deadline)" >> $S; return; }
  local t0=$SECONDS; timeout $lim "$@" > $r/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s (t=$SECONDS)" | tee -a $S; }
{ echo "binaries: $(strings $B/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$')"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; } > $r/machine.txt 2>&1
cat $r/machine.txt | head -1 >> $S
mkdir -p /tmp/pb
( scripts/peers/build_peers.sh cudnn /tmp/pb; scripts/peers/build_peers.sh vfk /tmp/pb; KDA_C_LIBRARY=$PWD/.device/new/lib/libkda_c.so scripts/peers/build_peers.sh ours /tmp/pb ) > /dev/null 2>&1 &
bp=$!
for t in test_kda_gpu test_bench_gpu test_kda_validate; do [[ -x $B/$t ]] && step 60 $t $B/$t --gtest_brief=1; done
step 60 check-smoke-variants $B/kda-check --rms-limit 4e-3 --variant v0_fp32 --variant v1_mma --variant v2_mma --variant v2t_mma --variant v2w_mma --shapes shapes/smoke.yaml --md $r/check-smoke-variants.md --csv $r/check-smoke-variants.csv --force
for s in smoke edge long-memory; do
  step 60 check-$s $B/kda-check --rms-limit 4e-3 --shapes shapes/$s.yaml --md $r/check-$s.md --csv $r/check-$s.csv --force
done
for tool in memcheck racecheck synccheck; do
  step 40 san-$tool-raw compute-sanitizer --tool $tool --error-exitcode 9 $B/test_kda_gpu --gtest_brief=1 --gtest_filter='*KdaRawForward.PackedTailsAndEmptySequence*:*KdaRawForward.HugeTinyAndZeroKRows*'
  step 40 san-$tool-smoke compute-sanitizer --tool $tool --error-exitcode 9 $B/kda-check --shapes shapes/smoke.yaml
done
wait $bp; for t in cudnn vfk ours; do echo "build $t: $(cat /tmp/pb/$t.status 2>/dev/null)" >> $S; done
step 60 bench-one-process env KDA_C_LIBRARY=$PWD/.device/new/lib/libkda_c.so python3 scripts/peers/peers_bench.py --peer ours,cudnn,vllm-flashkda --build-dir /tmp/pb --shapes shapes/contract.yaml --out-dir $r --force
step 150 check-contract $B/kda-check --rms-limit 4e-3 --shapes shapes/contract.yaml --md $r/check-contract.md --csv $r/check-contract.csv --force
step 100 check-contract-mixed-raw $B/kda-check --rms-limit 4e-3 --backend raw --shapes shapes/contract-mixed.yaml --md $r/check-contract-mixed-raw.md --csv $r/check-contract-mixed-raw.csv --force
cp $r/check-contract.md $r/check-contract-mixed-raw.md $r/check-smoke-variants.md $OUT/ 2>/dev/null
tar -C $OUT -czf $OUT/h200.tar.gz r; rm -rf $r; cat $S
