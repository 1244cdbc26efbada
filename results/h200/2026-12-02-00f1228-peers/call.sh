#!/usr/bin/env bash
# Call 2 (stop 24): quick GPU checks of the new raw load, kda_torch's GPU tests in the background
# of the peers' accuracy phase, then every peer side by side (scripts/peers/run-all-h200.sh).
set -u
B=.device/new/bin; p=$OUT/pre; mkdir -p $p; S=$OUT/pre-summary.txt; : > $S
step() { local lim=$1 name=$2; shift 2; local t0=$SECONDS; timeout $lim "$@" > $p/$name.log 2>&1; echo "$name rc=$? $((SECONDS-t0))s (t=$SECONDS)" >> $S; }
echo "binaries: $(strings $B/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$')" >> $S
step 60 test_kda_gpu $B/test_kda_gpu --gtest_brief=1
for s in smoke edge long-memory; do
  step 60 check-$s $B/kda-check --rms-limit 4e-3 --shapes shapes/$s.yaml --md $p/check-$s.md --csv $p/check-$s.csv --force
done
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl/fla_core-*.whl > $p/pip.log 2>&1
( step 150 kda-torch-gpu env PYTHONUNBUFFERED=1 PYTHONPATH=python:/tmp/site2 TRITON_CACHE_DIR=/tmp/tc2 \
    KDA_C_LIBRARY=$PWD/.device/new/lib/libkda_c.so python3 python/tests/run.py gpu ) &
tp=$!
BIN=$B DEADLINE=$(( 545 - SECONDS )) bash scripts/peers/run-all-h200.sh > $p/run-all.log 2>&1
wait $tp
tar -C $OUT -czf $OUT/pre.tar.gz pre && rm -rf $p
cat $S; cat $OUT/peers-summary.txt 2>/dev/null | head -60
