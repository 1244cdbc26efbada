# 2026-12-07 call 2 (binaries of dd78659): why the value halves run no faster than one CTA a chain
# (h64-fixed 896 us against 812): ncu of the halves and of one_pass16_bf16 on h64-fixed, then the
# checks and sanitizers the first call skipped (kda-check without --backend ran raw inputs,
# which the halves refuse).
B=.device/new/bin
r=$OUT/r; mkdir -p $r
export BIN=$B KERNELS=onepass KEEP_REPORTS=0
VARIANT=one_pass16_halves TAG=halves timeout 200 bash scripts/h200-profile.sh h64-fixed
VARIANT=one_pass16_bf16 TAG=bf16 timeout 200 bash scripts/h200-profile.sh h64-fixed
for s in smoke edge long-memory; do for p in fused explicit; do
  timeout 60 $B/kda-check --variant one_pass16_halves --variant one_pass16_halves_staged --backend $p \
    --rms-limit 4e-3 --shapes shapes/$s.yaml --md $r/check-$s-$p.md --csv $r/check-$s-$p.csv --force > $r/check-$s-$p.log 2>&1
  echo "check-$s-$p rc=$?"
done; done
for tool in memcheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $B/kda-check --variant one_pass16_halves \
    --variant one_pass16_halves_staged --backend fused --shapes shapes/smoke.yaml > $r/sanitizer-$tool.log 2>&1
  echo "sanitizer-$tool rc=$?"
done
tar -C $OUT -czf $OUT/r.tar.gz r && rm -rf $r
