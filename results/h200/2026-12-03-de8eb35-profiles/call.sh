#!/usr/bin/env bash
# Why the two changes of de8eb35's call missed: Nsight Compute (full set, source counters) of one
# h96-fixed PREP launch each: the library's contract kernel (fc53d7a), the rowpair variant's
# (de8eb35, --variant v2w_rowpair_grams), and the raw kernel before (fc53d7a) and after (de8eb35)
# the raw gate moved to the load region.
set -u
NEW=.device/ab/bin
DEADLINE=${DEADLINE:-300}
. scripts/device-steps.sh
record_machine "binaries: $(binary_commit $NEW/kda-check); base: $(binary_commit $NEW/kda-bench-fc53d7a)"
prof() {  # NAME KERNEL-REGEX BINARY PATH ARGS...
  local name=$1 kernel=$2 bin=$3 path=$4; shift 4
  step 60 "ncu-$name" ncu --clock-control none -k "regex:$kernel" -c 1 --set full --import-source yes \
    -o "$r/$name" "$bin" --no-blocking-kernel --shapes shapes/contract.yaml --only h96-fixed \
    --paths "$path" --no-verify --min-samples 1 --min-time 0 --warmup 0 -q "$@"
  step 20 "ncu-$name-source" bash -c "ncu -i '$r/$name.ncu-rep' --page source --csv --print-source sass | gzip > '$r/ncu-$name-source.csv.gz'"
  step 20 "ncu-$name-details" ncu -i "$r/$name.ncu-rep" --page details
  rm -f "$r/$name.ncu-rep"
}
prof spread 'prep_kernel' $NEW/kda-bench-fc53d7a fused
prof rowpair 'prep_rowpairs_kernel' $NEW/kda-bench fused --variant v2w_rowpair_grams
prof raw-base 'prep_raw_kernel' $NEW/kda-bench-fc53d7a raw
prof raw-ahead 'prep_raw_kernel' $NEW/kda-bench raw
finish
