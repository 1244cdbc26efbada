#!/usr/bin/env bash
# Call 1 (stop 25): HEAD on the H200 (fe3690b's host dispatch), the L2 record-ring experiment,
# and the caches for the peers call (FlashKDA x3 builds, FLA's Triton cache). Deadline inside.
set -u
B=.device/new/bin; r=$OUT/r; mkdir -p $r; S=$r/summary.txt; : > $S
DL=${DEADLINE:-520}
step() { local lim=$1 name=$2; shift 2
  (( SECONDS + lim > DL )) && lim=$(( DL - SECONDS )); (( lim < 5 )) && { echo "$name skipped (deadline)" >> $S; return; }
  local t0=$SECONDS; timeout $lim "$@" > $r/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s (t=$SECONDS)" | tee -a $S; }
{ echo "binaries: $(strings $B/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$')"; date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; nproc; python3 -c 'import torch; print("torch", torch.__version__)'; } > $r/machine.txt 2>&1
head -1 $r/machine.txt >> $S
mkdir -p /tmp/pb
export PEERS_CACHE_OUT=$OUT
for t in vfk fk ffk; do setsid scripts/peers/build_peers.sh $t /tmp/pb > /dev/null 2>&1 & done
for t in test_kda_gpu test_bench_gpu test_kda_validate test_lab_variants; do [[ -x $B/$t ]] && step 60 $t $B/$t --gtest_brief=1; done
step 40 l2-ring-h96 $B/kda-lab-l2-ring
step 40 l2-ring-h64 $B/kda-lab-l2-ring --chains 64
# FLA: warm Triton's cache (the timings here are not the deliverable: checks run beside them)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fla_core-*.whl > $r/pip.log 2>&1
export TRITON_CACHE_DIR=/tmp/triton-cache; mkdir -p $TRITON_CACHE_DIR
( PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 DL=$((DL-40)) bash -c '
  for s in contract contract-mixed; do lim=$(( DL - SECONDS - '$SECONDS' )); (( lim > 10 )) || break
    timeout $lim python3 scripts/peers/fla_bench.py --shapes shapes/$s.yaml --rows prenorm,full --no-kernel-list --timeout 5 --csv '$r'/fla-warm-$s.csv --force > '$r'/fla-warm-$s.log 2>&1; echo "fla-warm-$s rc=$?" >> '$S'; done' ) &
fp=$!
step 60 check-smoke $B/kda-check --rms-limit 4e-3 --shapes shapes/smoke.yaml --md $r/check-smoke.md --csv $r/check-smoke.csv --force
step 60 check-edge $B/kda-check --rms-limit 4e-3 --shapes shapes/edge.yaml --md $r/check-edge.md --csv $r/check-edge.csv --force
step 60 check-edge-raw $B/kda-check --rms-limit 4e-3 --backend raw --shapes shapes/edge.yaml --md $r/check-edge-raw.md --csv $r/check-edge-raw.csv --force
step 60 check-long-memory $B/kda-check --rms-limit 4e-3 --shapes shapes/long-memory.yaml --md $r/check-long-memory.md --csv $r/check-long-memory.csv --force
step 40 san-memcheck-smoke compute-sanitizer --tool memcheck --error-exitcode 9 $B/kda-check --shapes shapes/smoke.yaml
step 200 check-contract $B/kda-check --rms-limit 4e-3 --shapes shapes/contract.yaml --md $r/check-contract.md --csv $r/check-contract.csv --force
step 120 check-contract-mixed-raw $B/kda-check --rms-limit 4e-3 --backend raw --shapes shapes/contract-mixed.yaml --md $r/check-contract-mixed-raw.md --csv $r/check-contract-mixed-raw.csv --force
while kill -0 $fp 2>/dev/null && (( SECONDS < DL - 30 )); do sleep 2; done; kill -- -$fp 2>/dev/null; pkill -f fla_bench.py
for t in vfk fk ffk; do echo "build $t: $(cat /tmp/pb/$t.status 2>/dev/null) $(cat /tmp/pb/$t.cache 2>/dev/null | tr '\n' ' ')" >> $S; cp /tmp/pb/$t.log $r/build-$t.log 2>/dev/null; done
tar -C $TRITON_CACHE_DIR -czf /tmp/triton-cache.tar.gz . 2>/dev/null
size=$(stat -c %s /tmp/triton-cache.tar.gz 2>/dev/null || echo 0)
(( size > 0 && size < 45000000 )) && split -b 15000000 -d -a 1 /tmp/triton-cache.tar.gz $OUT/triton-cache.tar.gz.part
echo "triton cache $size B; OUT: $(ls $OUT | tr '\n' ' ')" >> $S
cat $r/l2-ring-h96.log $r/l2-ring-h64.log | tail -n 40
tar -C $OUT -czf $OUT/h200.tar.gz r; cat $S; rm -rf $r
