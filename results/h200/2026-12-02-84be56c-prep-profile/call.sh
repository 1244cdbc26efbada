#!/usr/bin/env bash
# Call 4 (stop 25): where the raw path's +9 % goes: Nsight Compute (full set, clocks left alone)
# of PREP on h96-fixed, contract (prep_kernel) and raw (prep_raw_kernel), HEAD's binaries.
set -u
B=.device/new/bin; p=$OUT/prof; mkdir -p $p
{ echo "binaries: $(strings $B/kda-check | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$')"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } > $p/machine.txt 2>&1
for b in fused raw; do
  name=h96-fixed-prep-$b
  timeout 200 ncu --clock-control none -k regex:prep -c 1 --set full --import-source yes -o $p/$name -f \
    $B/kda-check --only h96-fixed --backend $b > $p/$name.log 2>&1
  echo "$name rc=$?"
  ncu -i $p/$name.ncu-rep --page details > $p/$name-details.txt 2>&1
  ncu -i $p/$name.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $p/$name-src-sass.csv.gz
  rm -f $p/$name.ncu-rep
done
tar -C $OUT -czf $OUT/prof.tar.gz prof; rm -rf $p
