#!/usr/bin/env bash
# Every Hopper peer side by side with ours in ONE device call (issue 17), over a copy of the
# checkout with .whl/ (fla-core 0.6.0 and nvidia-cudnn-frontend 1.32.0 wheels), .peers/ (the
# FlashKDA tarballs from ../shared/peers) and the lead's binaries in $BIN (kda-check, kda-bench)
# with libkda.a in $BIN/../lib carried (scripts/peers/README.md):
#
#   BIN=.device/new/bin bash scripts/peers/run-all-h200.sh
#
# Timeline (16 cores, one H200), each step time-limited and skipped near $DEADLINE (default 560 s):
#   t=0     builds start in the background: cuDNN-FE's kernel body + our launcher, our ctypes
#           library (libkda.a), FlashKDA stock, Flash-Flash-KDA, vLLM's fork (build_peers.sh);
#   then    our dumps (kda-check --dump: long-memory, and one contract shape, CONTRACT_CHECK=ID|none,
#           default h64-ragged6, from CONTRACT_CHECK_FILES, default contract-mixed: the regime where
#           the carried state matters; "contract contract-mixed" for both) and FLA's check on the
#           long-memory dump (fla_check.py; FLA_CHECK_CONTRACT=1 adds the contract dumps) while the
#           builds run;
#   builds  waited for (BUILD_WAIT, default until t=330 s; a build still running is killed and
#           its log says where it was);
#   timing  ours (kda-bench --no-verify) and every peer (peers_bench.py, which checks a slice of
#           each output first) on contract.yaml and contract-mixed.yaml, nothing else running;
#           kda-bench compare of every peer CSV against ours;
#   checks  every peer on the dumps (peers_check.py), ours next to it;
#   FLA     fla_bench.py (prenorm = plain, full = raw) on both files if time is left (FLA=0: never);
#   report  peers_report.py: $OUT/peers-report.md + $OUT/peers-summary.txt, all files in
#           $OUT/peers.tar.gz (the device returns at most 8 files).
# A peer that fails to build or run leaves its exact error in its CSV rows and the report.
set -uo pipefail
OUT=${OUT:?OUT must be set (the device tool sets it)}
r=$OUT/peers
mkdir -p "$r"
export BIN=${BIN:-.device/new/bin}
B=${PEERS_BUILD:-/tmp/peers-build}
DEADLINE=${DEADLINE:-560}
BUILD_WAIT=${BUILD_WAIT:-330}
export PYTHONUNBUFFERED=1
steps=$r/steps.txt
: > "$steps"
step() {  # step SECONDS NAME CMD...: time-limited, logged to $r/NAME.log, exit code recorded
  local limit=$1 name=$2; shift 2
  if (( SECONDS + limit > DEADLINE )); then
    limit=$(( DEADLINE - SECONDS ))
    if (( limit < 15 )); then echo "$name skipped (deadline, t=${SECONDS}s)" | tee -a "$steps"; return 0; fi
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" > "$r/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( SECONDS - t0 ))s (t=${SECONDS}s)$( ((rc == 124)) && echo ' TIMED OUT')" | tee -a "$steps"
  return 0
}

# --- 0. the machine, FLA from its wheel (the cuDNN-FE wheel is only unzipped, never installed)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/fla_core-*.whl > "$r/pip.log" 2>&1 || echo "pip install of fla-core failed (see pip.log)" | tee -a "$steps"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
{
  date -u +"utc: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo '?')  BIN=$BIN"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1
  nvcc --version 2>&1 | tail -n 1
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  nproc
} > "$r/machine.txt" 2>&1
have_bin=1
for b in kda-check kda-bench; do [[ -x $BIN/$b ]] || { have_bin=0; echo "no $BIN/$b: our steps are skipped (carry the lead's build)" | tee -a "$steps"; }; done

# --- 1. builds in the background (three FlashKDA builds, two TUs each, and the cuDNN objects)
mkdir -p "$B"
pids=()
setsid bash -c "scripts/peers/build_peers.sh cudnn $B; scripts/peers/build_peers.sh ours $B" > /dev/null 2>&1 & pids+=($!)
for t in fk ffk vfk; do setsid scripts/peers/build_peers.sh "$t" "$B" > /dev/null 2>&1 & pids+=($!); done

# --- 2. our dumps and FLA's check on them while the builds run
cc=${CONTRACT_CHECK:-h64-ragged6}
dumps=()
if (( have_bin )); then
  rm -rf /tmp/dump-long-memory && step 90 dump-long-memory "$BIN/kda-check" --shapes shapes/long-memory.yaml \
    --dump /tmp/dump-long-memory --csv "$r/ours-check-long-memory.csv" --md "$r/ours-check-long-memory.md" --force
  [[ -d /tmp/dump-long-memory ]] && dumps+=(long-memory)
  if [[ $cc != none ]]; then
    for f in ${CONTRACT_CHECK_FILES:-contract-mixed}; do
      rm -rf "/tmp/dump-$f" && step 120 "dump-$f" "$BIN/kda-check" --shapes "shapes/$f.yaml" --only "$cc" \
        --dump "/tmp/dump-$f" --csv "$r/ours-check-$f.csv" --force
      [[ -d /tmp/dump-$f ]] && dumps+=("$f")
    done
  fi
fi
if [[ ${FLA:-1} != 0 ]]; then
  for dname in "${dumps[@]}"; do
    rows=prenorm,l2norm-in-kernel; [[ $dname != long-memory ]] && rows=prenorm
    [[ $dname != long-memory && ${FLA_CHECK_CONTRACT:-0} == 0 ]] && continue
    (( SECONDS < BUILD_WAIT )) && step $(( BUILD_WAIT - SECONDS )) "fla-check-$dname" python3 scripts/peers/fla_check.py \
      "/tmp/dump-$dname" --rows "$rows" --csv "$r/fla-check-$dname.csv" --md "$r/fla-check-$dname.md" --force
  done
fi

# --- 3. wait for the builds, then nothing else runs while we time
while (( SECONDS < BUILD_WAIT )) && jobs -r | grep -q .; do sleep 2; done
for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null && echo "a build (pid $p) was still running at t=${SECONDS}s: killed" | tee -a "$steps"; done
wait 2>/dev/null
for s in "$B"/*.status; do echo "build $(basename "$s" .status): $(cat "$s")" | tee -a "$steps"; done
cp "$B"/*.log "$r/" 2>/dev/null
for t in fk ffk vfk; do [[ -f $B/$t.status && $(cat "$B/$t.status") == running ]] && echo "failed: killed at the build deadline (t=${BUILD_WAIT}s)" > "$B/$t.status"; done

# --- 4. timing: ours and every peer on both gate regimes, both contracts
files=(shapes/contract.yaml shapes/contract-mixed.yaml)
if (( have_bin )); then
  for f in "${files[@]}"; do
    stem=$(basename "$f" .yaml)
    step 60 "ours-bench-$stem" "$BIN/kda-bench" --shapes "$f" --no-verify --paths fused \
      --csv "$r/ours-bench-$stem.csv" --md "$r/ours-bench-$stem.md" --force
  done
fi
peers=(ours cudnn flashkda flash-flash-kda vllm-flashkda)
for p in "${peers[@]}"; do
  step 70 "bench-$p" python3 scripts/peers/peers_bench.py --peer "$p" --build-dir "$B" \
    --shapes "${files[0]}" --shapes "${files[1]}" --out-dir "$r" --force \
    --warmup 5 --min-samples 30 --min-time 0.25 --timeout 5
done
if (( have_bin )); then
  for f in "${files[@]}"; do
    stem=$(basename "$f" .yaml)
    for p in "${peers[@]}"; do
      for c in plain raw; do
        a=ours-bench-$stem.csv ap=fused; [[ $c == raw ]] && { a=ours-$stem.csv; ap=ours-raw; }
        [[ -f $r/$a && -f $r/$p-$stem.csv ]] && grep -q ",$p-$c," "$r/$p-$stem.csv" || continue
        [[ $p == ours && $c == raw ]] && continue
        step 10 "compare-$p-$c-$stem" "$BIN/kda-bench" compare "$r/$a" "$r/$p-$stem.csv" --mode warm \
          --a-path "$ap" --b-path "$p-$c" --md "$r/compare-$p-$c-$stem.md" --force
      done
    done
  done
fi

# --- 5. every peer judged on our dumps, ours next to it
for dname in "${dumps[@]}"; do
  for p in "${peers[@]}"; do
    step 60 "check-$p-$dname" python3 scripts/peers/peers_check.py "/tmp/dump-$dname" --peer "$p" \
      --build-dir "$B" --with-ours --csv "$r/check-$p-$dname.csv" --md "$r/check-$p-$dname.md" --force
  done
done

# --- 6. FLA's timing if time is left (its first call per shape compiles and autotunes)
if [[ ${FLA:-1} != 0 ]]; then
  for f in "${files[@]}"; do
    stem=$(basename "$f" .yaml)
    step 150 "fla-bench-$stem" python3 scripts/peers/fla_bench.py --shapes "$f" --rows prenorm,full \
      --no-kernel-list --timeout 5 --csv "$r/fla-bench-$stem.csv" --md "$r/fla-bench-$stem.md" --force
    [[ -f $r/fla-bench-$stem.csv && -f $r/ours-bench-$stem.csv ]] && (( have_bin )) && \
      step 10 "compare-fla-$stem" "$BIN/kda-bench" compare "$r/ours-bench-$stem.csv" "$r/fla-bench-$stem.csv" \
        --mode warm --a-path fused --b-path fla-prenorm --md "$r/compare-fla-prenorm-$stem.md" --force
  done
fi

# --- 7. one report, packed
DEADLINE=$(( DEADLINE + 30 )) step 30 report python3 scripts/peers/peers_report.py "$r" --build-dir "$B" --md "$r/report.md" --force
cp "$r/report.md" "$OUT/peers-report.md" 2>/dev/null
{ cat "$r/report-summary.txt" 2>/dev/null; echo "== steps"; cat "$steps"; } > "$OUT/peers-summary.txt"
tar -C "$OUT" -czf "$OUT/peers.tar.gz" peers && rm -rf "$r"
cat "$OUT/peers-summary.txt"
