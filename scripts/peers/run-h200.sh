#!/usr/bin/env bash
# The FLA peer run on the H200 machine (device tool), over a copy of the checkout with .whl/ and
# build/snapbin/ carried from the development machine (see scripts/peers/README.md):
#   bash scripts/peers/run-h200.sh            # bench (FLA + ours, one run) + checks
#   ROWS=all bash scripts/peers/run-h200.sh   # also fla-prenorm-safegate and fla-full
#   CONTRACT_CHECK=all|none|ID ...            # which contract shapes fla_check sees (default h64-ragged6)
#   STEPS=bench|check ...                     # only the timing part, or only the correctness part
# Writes everything under $OUT/peers and packs it as $OUT/peers.tar.gz (the device tool returns
# at most 8 files), plus $OUT/peers-summary.txt. Steps that would pass the deadline are skipped.
set -uo pipefail
OUT=${OUT:?OUT must be set (the device tool sets it)}
r=$OUT/peers
mkdir -p "$r"
bin=${BIN:-build/snapbin}
summary=$OUT/peers-summary.txt
: > "$summary"
export PYTHONUNBUFFERED=1
DEADLINE=${DEADLINE:-570}
step() {  # step SECONDS NAME CMD...: time-limited, logged to $r/NAME.log, exit code recorded
  local limit=$1 name=$2; shift 2
  if (( SECONDS + limit > DEADLINE )); then
    limit=$(( DEADLINE - SECONDS ))
    if (( limit < 20 )); then echo "$name skipped (deadline)" | tee -a "$summary"; return; fi
  fi
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$r/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$summary"
}

# Triton's compile and autotune cache: FLA autotunes every kernel for every new shape key, which
# costs minutes on a fresh machine (fla_check on the smoke dumps: ~80 s per new shape). A cache
# carried from an earlier call (.triton-cache.tar.gz in the repo root, git-ignored: copy the one
# this script leaves in $OUT there and name it in carry) is restored, and the updated cache goes
# back out as $OUT/triton-cache.tar.gz.
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
mkdir -p "$TRITON_CACHE_DIR"
[[ -f .triton-cache.tar.gz ]] && tar -C "$TRITON_CACHE_DIR" -xzf .triton-cache.tar.gz 2>/dev/null

# 1. FLA from the carried wheel (the GPU machine has no network); torch, triton, einops are there.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/fla_core-*.whl > "$r/pip.log" 2>&1 || { echo "pip install failed" | tee -a "$summary"; }
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
{
  date -u +"utc: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  python3 -c 'import sys, torch, triton, fla; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "fla", fla.__version__, "cuda", torch.cuda.is_available())'
  python3 -m pip list 2>/dev/null | grep -iE '^(torch|triton|einops|numpy|pyyaml|nvidia-ml-py|flash.kda|tilelang) ' || true
} > "$r/machine.txt" 2>&1
cat "$r/machine.txt" >> "$summary"

rows=${ROWS:-prenorm,l2norm-in-kernel}
[[ $rows == all ]] && rows=prenorm,l2norm-in-kernel,prenorm-safegate,full

steps=${STEPS:-all}

# 2. Timing: FLA, then ours, in the same run (ratios only within one run: performance.md).
if [[ $steps != check ]]; then
step 360 fla-bench-contract python3 scripts/peers/fla_bench.py --shapes shapes/contract.yaml --rows "$rows" \
  --csv "$r/fla-bench-contract.csv" --json "$r/fla-bench-contract.json" --md "$r/fla-bench-contract.md" --force
if [[ -x $bin/kda-bench ]]; then
  step 150 ours-bench-contract "$bin/kda-bench" --shapes shapes/contract.yaml --no-verify \
    --csv "$r/ours-bench-contract.csv" --md "$r/ours-bench-contract.md" --force
  for a in fla-prenorm fla-l2norm-in-kernel fla-prenorm-safegate fla-full; do
    grep -q ",$a," "$r/fla-bench-contract.csv" 2>/dev/null || continue
    for b in fused explicit; do
      step 30 "compare-$a-vs-$b" "$bin/kda-bench" compare "$r/fla-bench-contract.csv" "$r/ours-bench-contract.csv" \
        --mode warm --a-path "$a" --b-path "$b" --md "$r/compare-$a-vs-$b.md" --force
    done
  done
fi
fi

# 3. Correctness on identical inputs: dumps of our GPU run, then FLA on them.
if [[ $steps == bench ]]; then
  :
elif [[ -x $bin/kda-check ]]; then
  for s in smoke edge; do
    rm -rf "/tmp/dump-$s"
    step 120 "dump-$s" "$bin/kda-check" --shapes "shapes/$s.yaml" --dump "/tmp/dump-$s" \
      --csv "$r/ours-check-$s.csv" --force
    step 240 "fla-check-$s" python3 scripts/peers/fla_check.py "/tmp/dump-$s" \
      --md "$r/fla-check-$s.md" --csv "$r/fla-check-$s.csv" --json "$r/fla-check-$s.json" --force
  done
  cc=${CONTRACT_CHECK:-h64-ragged6}
  if [[ $cc != none ]]; then
    only=(); [[ $cc != all ]] && only=(--only "$cc")
    rm -rf /tmp/dump-contract
    step 240 dump-contract "$bin/kda-check" --shapes shapes/contract.yaml "${only[@]}" \
      --dump /tmp/dump-contract --csv "$r/ours-check-contract.csv" --force
    step 300 fla-check-contract python3 scripts/peers/fla_check.py /tmp/dump-contract \
      --md "$r/fla-check-contract.md" --csv "$r/fla-check-contract.csv" --force
    rm -rf /tmp/dump-contract
  fi
else
  echo "no $bin/kda-check: checks skipped (carry build/snapbin)" | tee -a "$summary"
fi

for f in "$r"/fla-check-*.md; do
  [[ -f $f ]] && { echo "== $(basename "$f")"; tail -n 3 "$f"; } >> "$summary"
done
[[ -f $r/fla-bench-contract.md ]] && { echo "== fla-bench-contract.md"; grep -A12 '^Geomean' "$r/fla-bench-contract.md"; } >> "$summary"
for f in "$r"/compare-*.md; do
  [[ -f $f ]] && { echo "== $(basename "$f")"; grep -iE 'geomean|same|faster|slower' "$f" | tail -n 4; } >> "$summary"
done
tar -C "$OUT" -czf "$OUT/peers.tar.gz" peers && rm -rf "$r"
tar -C "$TRITON_CACHE_DIR" -czf "$OUT/triton-cache.tar.gz" . 2>/dev/null
cat "$summary"
