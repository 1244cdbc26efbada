#!/usr/bin/env bash
# Nsight Compute (full set, source counters) of the standalone 16-token factor builder after
# round 2 (353c2bb: the conflict-free phase 2), writing its records, on h96-fixed's contract inputs;
# and the 16-token chain on them. Where the build's time goes now, before round 3.
set -u
B=.device/f16/bin
DEADLINE=${DEADLINE:-200}
. scripts/device-steps.sh
record_machine "binary: kda-lab-factors16 built from 353c2bb"
step 90 ncu ncu --clock-control none -k "regex:factors16_kernel|chain_kernel" -c 3 --set full --import-source yes \
  -o "$r/f16" $B/kda-lab-factors16 --time-only --only h96-fixed --contract-only --warmup 0 --runs 1
step 30 ncu-source bash -c "ncu -i '$r/f16.ncu-rep' --page source --csv --print-source sass | gzip > '$r/ncu-source.csv.gz'"
step 30 ncu-details ncu -i "$r/f16.ncu-rep" --page details
rm -f "$r/f16.ncu-rep"
finish
