#!/usr/bin/env bash
# Nsight Compute (full set, clocks left alone) of PREP on h96-fixed's fused path at c1d8204 (the
# channel-halves PREP, three CTAs per SM), through kda-check as in 84be56c-prep-profile (kda-bench
# cannot be profiled: its timing waits on a blocking kernel that ncu's serialization stalls).
set -u
B=.device/new/bin; p=$OUT/prof; mkdir -p $p
{ echo "binaries: $(strings $B/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$')"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } > $p/machine.txt 2>&1
name=h96-fixed-prep-fused
timeout 200 ncu --clock-control none -k regex:prep -c 1 --set full -o $p/$name -f \
  $B/kda-check --only h96-fixed --backend fused > $p/$name.log 2>&1
echo "$name rc=$?"
ncu -i $p/$name.ncu-rep --page details > $p/$name-details.txt 2>&1
rm -f $p/$name.ncu-rep
tar -C $OUT -czf $OUT/prof.tar.gz prof; rm -rf $p
