#!/usr/bin/env bash
# Nsight Compute profile of the forward's kernels on the H200 (device tool), clocks left alone.
#   BIN=build/snapbin scripts/h200-profile.sh [SHAPE...]    (default: h96-fixed h64-uniform8)
# TAG names the tarball ($OUT/prof-TAG.tar.gz, default prof.tar.gz) so several builds can be
# profiled in one call; KEEP_REPORTS=0 leaves the .ncu-rep files out of it (they are large; the
# text pages are what scripts/ncu_regions.py reads).
# Writes $OUT/prof.tar.gz: per shape and kernel the ncu report, the details page (text) and the
# source page per CUDA line (kda-check drives the kernels: kda-bench's blocking kernel deadlocks
# under ncu's serialized replay)
# and and per SASS instruction (CSV), for reading on the development machine.
set -uo pipefail
OUT=${OUT:?OUT must be set}
bin=${BIN:-build/release/bin}
# KERNELS: ncu kernel-name regexes, one profile each; "prep" and "scan" match the PREP and SCAN of
# whichever VARIANT runs (the library's prep_kernel / scan_kernel, the lab's prep_v0_kernel ...).
# BACKEND: kda-check's path (fused, explicit, raw; default fused). The one pass: KERNELS=onepass
# (onepass_kernel, onepass_halves_kernel), e.g. VARIANT=one_pass16_bf16 BACKEND=raw.
kernels=${KERNELS:-prep scan}
shapes=("$@"); (( ${#shapes[@]} )) || shapes=(h96-fixed h64-uniform8)
p=$OUT/prof; mkdir -p "$p"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$p/machine.txt" 2>&1
for s in "${shapes[@]}"; do
  for k in $kernels; do
    name=$s-$k
    timeout 150 ncu --clock-control none -k "regex:$k" -c 1 --set full \
      --import-source yes -o "$p/$name" -f \
      "$bin/kda-check" --only "$s" --backend "${BACKEND:-fused}" --variant "${VARIANT:-v2w_mma}" \
      > "$p/$name.log" 2>&1
    echo "$name rc=$?"
    ncu -i "$p/$name.ncu-rep" --page details > "$p/$name-details.txt" 2>&1
    ncu -i "$p/$name.ncu-rep" --page source --csv --print-source cuda > "$p/$name-src-cuda.csv" 2>&1
    ncu -i "$p/$name.ncu-rep" --page source --csv --print-source sass > "$p/$name-src-sass.csv" 2>&1
  done
done
[[ ${KEEP_REPORTS:-1} == 0 ]] && rm -f "$p"/*.ncu-rep
tar -C "$OUT" -czf "$OUT/prof${TAG:+-$TAG}.tar.gz" prof && rm -rf "$p"
