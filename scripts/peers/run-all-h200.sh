#!/usr/bin/env bash
# Every Hopper peer side by side with ours in ONE device call (issue 17), over a copy of the
# checkout with .whl/ (fla-core 0.6.0 and nvidia-cudnn-frontend 1.32.0 wheels), .peers/ (the
# FlashKDA tarballs from ../shared/peers), the lead's binaries in $BIN (kda-check, kda-bench) with
# libkda_c.so ($KDA_C_LIBRARY, default $BIN/../lib/libkda_c.so: ours in Python is python/kda_torch
# over it), and, when an earlier call left them, .peers-cache/ (FlashKDA builds and Triton's cache;
# scripts/peers/README.md):
#
#   BIN=.device/new/bin bash scripts/peers/run-all-h200.sh
#
# Schedule (16 cores, one H200; every step time-limited, skipped near its deadline, its wall time
# in steps.txt as "rc, seconds (t=start-end)"):
#   A  builds start in the background (cuDNN-FE objects + launcher, FlashKDA x3; a carried build
#      cache makes FlashKDA's instant, else vfk's one big TU is the long pole, ~5 min) with the
#      load check of ours (kda_torch + libkda_c.so: nothing to build);
#      our dumps (kda-check --dump: long-memory, and CHECK_SHAPES, default check-shapes.yaml:
#      h64-ragged6's lengths at 16 heads in mixed and contract gates);
#   B  while the builds run, accuracy only (no timing): on the CPU the references every check
#      shares (peers_check --prepare-refs, parallel processes); queue 1: FLA's check on the
#      long-memory dump; queue 2: ours and cuDNN-FE on both dumps, then each FlashKDA build as it
#      is ready. Both queues must end by CHECKS_DONE (default 400 s) and the builds by BUILD_WAIT
#      (380 s): what still runs then is killed and says so;
#   C  timing, nothing else running: kda-bench (fused, raw), then peers_bench on contract.yaml and
#      contract-mixed.yaml: ours (kda_torch), cuDNN-FE and vLLM's FlashKDA in one process on the
#      same tensors, FlashKDA stock and Flash-Flash-KDA in a process each (all three FlashKDA
#      builds are the package flash_kda: one per process); if the shared process dies of a signal
#      or loses the CUDA context, its peers run again one per process (said in steps.txt);
#      kda-bench compare of each (ours in PyTorch against kda-bench's fused and raw: the wrapper's cost);
#      FLA's timing last (FLA_FILES, default "contract contract-mixed": its kernels do the same
#      work whatever the gate, so the second file is the first to drop at the deadline);
#      TIMING=0 skips phase C (an accuracy-only call, e.g. with the build caches carried);
#      PEERS (default "cudnn vllm-flashkda flashkda flash-flash-kda") names the peers built,
#      checked and timed beside ours, e.g. PEERS=cudnn for a short call (no FlashKDA build);
#   D  the report; $OUT gets peers-report.md, peers-summary.txt, peers.tar.gz (every CSV, log,
#      the steps' wall times) and the caches for the next call: <fk|ffk|vfk>-build.tar.gz when a
#      FlashKDA was built here, triton-cache.tar.gz.part0.. (copy them into .peers-cache/ and carry it).
set -uo pipefail
OUT=${OUT:?OUT must be set (the device tool sets it)}
r=$OUT/peers
mkdir -p "$r"
export BIN=${BIN:-.device/new/bin}
# Ours through kda_torch (peer_adapters.OursPeer) loads this library; absolute, as every step that
# imports kda_torch (from python/ of this checkout) may run in another directory.
KDA_C_LIBRARY=$(realpath -m "${KDA_C_LIBRARY:-$BIN/../lib/libkda_c.so}")
export KDA_C_LIBRARY
B=${PEERS_BUILD:-/tmp/peers-build}
DEADLINE=${DEADLINE:-560}
BUILD_WAIT=${BUILD_WAIT:-380}
CHECKS_DONE=${CHECKS_DONE:-400}
CACHE=${PEERS_BUILD_CACHE:-.peers-cache}
export PEERS_BUILD_CACHE=$CACHE PEERS_CACHE_OUT=$OUT PYTHONUNBUFFERED=1
steps=$r/steps.txt
: > "$steps"
step() {  # step SECONDS NAME CMD...: time-limited (by $STEP_DEADLINE, default $DEADLINE), logged;
  # STEP_RC = its exit code (empty when skipped), for the caller in the same shell
  local limit=$1 name=$2 deadline=${STEP_DEADLINE:-$DEADLINE}; shift 2
  STEP_RC=
  if (( SECONDS + limit > deadline )); then
    limit=$(( deadline - SECONDS ))
    if (( limit < 10 )); then echo "$name skipped (deadline ${deadline}s, t=${SECONDS}s)" >> "$steps"; return 0; fi
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" > "$r/$name.log" 2>&1
  local rc=$?
  STEP_RC=$rc
  echo "$name rc=$rc $(( SECONDS - t0 ))s (t=${t0}-${SECONDS}s)$( ((rc == 124)) && echo ' TIMED OUT')" >> "$steps"
  return 0
}
alive() {  # alive PID...: true while any of them runs
  local p
  for p; do kill -0 "$p" 2>/dev/null && return 0; done
  return 1
}
built() {  # built TARGET: waits (until BUILD_WAIT) for build_peers.sh TARGET; true iff it is ok
  while [[ ! -f $B/$1.status || $(cat "$B/$1.status") == running ]] && (( SECONDS < BUILD_WAIT )); do sleep 2; done
  [[ -f $B/$1.status && $(cat "$B/$1.status") == ok ]]
}

# --- A. the machine, FLA from its wheel, the caches, the builds, our dumps ----------------------
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/fla_core-*.whl > "$r/pip.log" 2>&1 || echo "pip install of fla-core failed (see pip.log)" >> "$steps"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
mkdir -p "$TRITON_CACHE_DIR"
# Triton's cache comes back in parts of at most 15 MB (the device tool returns files of at most
# 16 MiB; a whole cache after FLA's autotuning is ~24 MB): triton-cache.tar.gz.part0, part1, ...
if compgen -G "$CACHE/triton-cache.tar.gz.part*" > /dev/null; then
  cat $(ls "$CACHE"/triton-cache.tar.gz.part* | sort -V) | tar -C "$TRITON_CACHE_DIR" -xz 2>/dev/null \
    && echo "triton cache restored from $CACHE/triton-cache.tar.gz.part*" >> "$steps"
else
  for c in "$CACHE/triton-cache.tar.gz" .triton-cache.tar.gz; do
    [[ -f $c ]] && tar -C "$TRITON_CACHE_DIR" -xzf "$c" 2>/dev/null && echo "triton cache restored from $c" >> "$steps" && break
  done
fi
{
  date -u +"utc: %Y-%m-%dT%H:%M:%SZ"
  # The binaries' own commit (build_info): the checkout's git metadata on the device may be stale.
  # (grep -m1 ends the pipe early, so strings may die of SIGPIPE: judge the match, not the status)
  commit=$(strings "$BIN/kda-check" 2>/dev/null | grep -m1 -E '^[0-9a-f]{40}(-dirty)?$')
  echo "binaries: ${commit:-?}  BIN=$BIN"
  echo "checkout: $(git rev-parse HEAD 2>/dev/null || echo '?') (git metadata of the copy; may be stale)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 2>&1
  nvcc --version 2>&1 | tail -n 1
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1
  nproc
} > "$r/machine.txt" 2>&1
have_bin=1
for b in kda-check kda-bench; do [[ -x $BIN/$b ]] || { have_bin=0; echo "no $BIN/$b: our steps are skipped (carry the lead's build)" >> "$steps"; }; done
[[ -f $KDA_C_LIBRARY ]] || echo "no $KDA_C_LIBRARY: ours in PyTorch (kda_torch) is unavailable, its rows say so (carry the lead's build/release/lib/libkda_c.so as \$BIN/../lib/libkda_c.so, or set KDA_C_LIBRARY)" >> "$steps"

declare -A peer_of=([cudnn]=cudnn [fk]=flashkda [ffk]=flash-flash-kda [vfk]=vllm-flashkda [ours]=ours)
peers_wanted=" ours ${PEERS:-cudnn vllm-flashkda flashkda flash-flash-kda} "
peer_wanted() { [[ $peers_wanted == *" $1 "* ]]; }  # peer_wanted NAME (peers_bench's names)
mkdir -p "$B"
bpids=()
for t in ours cudnn vfk fk ffk; do
  peer_wanted "${peer_of[$t]}" || continue
  setsid scripts/peers/build_peers.sh "$t" "$B" > /dev/null 2>&1 & bpids+=($!)
done

dumps=()
if (( have_bin )); then
  rm -rf /tmp/dump-long-memory && step 90 dump-long-memory "$BIN/kda-check" --shapes shapes/long-memory.yaml \
    --dump /tmp/dump-long-memory --csv "$r/ours-check-long-memory.csv" --md "$r/ours-check-long-memory.md" --force
  [[ -d /tmp/dump-long-memory ]] && dumps+=(long-memory)
  cs=${CHECK_SHAPES:-scripts/peers/check-shapes.yaml}
  if [[ $cs != none ]]; then
    rm -rf /tmp/dump-check && step 90 dump-check "$BIN/kda-check" --shapes "$cs" --dump /tmp/dump-check \
      --csv "$r/ours-check-check.csv" --md "$r/ours-check-check.md" --force
    [[ -d /tmp/dump-check ]] && dumps+=(check)
  fi
fi

# --- B. accuracy while the builds run -------------------------------------------------------------
# References every check shares, on the CPU, one process per (dump, reference set): with the
# dump's raw files every raw peer shares one set, without them each input dtype has its own.
declare -A refpids
for dname in "${dumps[@]}"; do
  sets=(contract ours cudnn flashkda)
  n_problems=$(compgen -G "/tmp/dump-$dname/*/q.npy" | wc -l)
  (( n_problems > 0 && $(compgen -G "/tmp/dump-$dname/*/k_raw.npy" | wc -l) == n_problems )) && sets=(contract ours)
  for set in "${sets[@]}"; do
    STEP_DEADLINE=$CHECKS_DONE step 200 "refs-$dname-$set" python3 scripts/peers/peers_check.py \
      "/tmp/dump-$dname" --prepare-refs "$set" &
    refpids[$dname]+=" $!"
  done
done
qpids=()
if [[ ${FLA:-1} != 0 && " ${dumps[*]} " == *" long-memory "* ]]; then
  ( STEP_DEADLINE=$CHECKS_DONE step 300 fla-check-long-memory python3 scripts/peers/fla_check.py /tmp/dump-long-memory \
      --rows prenorm,l2norm-in-kernel --csv "$r/fla-check-long-memory.csv" --md "$r/fla-check-long-memory.md" --force
    [[ ${FLA_CHECK_CONTRACT:-0} != 0 && -d /tmp/dump-check ]] && STEP_DEADLINE=$CHECKS_DONE step 200 fla-check-check \
      python3 scripts/peers/fla_check.py /tmp/dump-check --rows prenorm --csv "$r/fla-check-check.csv" \
      --md "$r/fla-check-check.md" --force ) &
  qpids+=($!)
fi
check_peer() {  # check_peer PEER: peers_check on every dump (after that dump's references)
  local dname
  for dname in "${dumps[@]}"; do
    STEP_DEADLINE=$CHECKS_DONE step 120 "check-$1-$dname" python3 scripts/peers/peers_check.py "/tmp/dump-$dname" \
      --peer "$1" --build-dir "$B" --with-ours --csv "$r/check-$1-$dname.csv" --md "$r/check-$1-$dname.md" --force
  done
}
(
  allrefs=()
  # shellcheck disable=SC2206  # the pids are a space-separated list
  for dname in "${dumps[@]}"; do allrefs+=(${refpids[$dname]}); done
  while alive "${allrefs[@]}"; do sleep 1; done  # not our children: poll
  # A peer whose build failed is still "checked": its rows carry the exact error.
  built ours; check_peer ours
  for t in cudnn ffk fk vfk; do  # the order they finish building in
    peer_wanted "${peer_of[$t]}" || continue
    built "$t"; check_peer "${peer_of[$t]}"
  done
) &
qpids+=($!)

# Wait for the queues (they wait for the builds; every step in them ends by CHECKS_DONE), then
# for any build still running; what runs past its deadline is stopped, by pid, and said so.
while (( SECONDS < CHECKS_DONE )) && alive "${qpids[@]}"; do sleep 2; done
for p in "${qpids[@]}"; do
  alive "$p" && { pkill -TERM -P "$p"; kill "$p"; echo "a check queue (pid $p) was still running at t=${SECONDS}s: stopped" >> "$steps"; }
done
while (( SECONDS < BUILD_WAIT )) && alive "${bpids[@]}"; do sleep 2; done
for p in "${bpids[@]}"; do kill -- "-$p" 2>/dev/null && echo "a build (pid $p) was still running at t=${SECONDS}s: killed" >> "$steps"; done
wait 2>/dev/null
for t in fk ffk vfk; do [[ -f $B/$t.status && $(cat "$B/$t.status") == running ]] && echo "failed: killed at the build deadline (t=${BUILD_WAIT}s)" > "$B/$t.status"; done
for s in "$B"/*.status; do
  t=$(basename "$s" .status)
  what=build; [[ $t == ours ]] && what="load check"  # ours has nothing to build (kda_torch)
  echo "$what $t: $(cat "$s")$(tail -n 1 "$B/$t.log" 2>/dev/null | sed -n 's/^== [a-z]*: [^(]*\(([0-9]* s)\)$/ \1/p')$([[ -s $B/$t.cache ]] && echo "; cache: $(tr '\n' ' ' < "$B/$t.cache")")" >> "$steps"
done
cp "$B"/*.log "$r/" 2>/dev/null
if [[ ${TIMING:-1} == 0 ]]; then
  echo "phase C (timing) skipped: TIMING=0" >> "$steps"
else
echo "phase C (timing) starts at t=${SECONDS}s" >> "$steps"

# --- C. timing, nothing else running ----------------------------------------------------------------
files=(shapes/contract.yaml shapes/contract-mixed.yaml)
if (( have_bin )); then
  for f in "${files[@]}"; do
    stem=$(basename "$f" .yaml)
    step 90 "ours-bench-$stem" "$BIN/kda-bench" --shapes "$f" --no-verify --paths fused,raw \
      --csv "$r/ours-bench-$stem.csv" --md "$r/ours-bench-$stem.md" --force
  done
fi
peers=()  # every peer timed (the compares below)
for p in ours cudnn flashkda flash-flash-kda vllm-flashkda; do peer_wanted "$p" && peers+=("$p"); done
# Ours, cuDNN-FE and vLLM's FlashKDA (the build engines ship) in ONE process: per shape the inputs
# are drawn once and all three are timed on the same tensors (peers_bench --peer a,b,c). FlashKDA
# stock and Flash-Flash-KDA each in a process of its own: all three FlashKDA builds are the Python
# package flash_kda with the same extension, so a process can hold only one of them.
groups=("ours,cudnn,vllm-flashkda" flashkda flash-flash-kda)
bench_args=(--build-dir "$B" --shapes "${files[0]}" --shapes "${files[1]}" --out-dir "$r" --force
            --warmup 5 --min-samples 30 --min-time 0.25 --timeout 5)
for g in "${groups[@]}"; do
  IFS=, read -ra all <<< "$g"
  members=()  # the group's peers that this call times (PEERS)
  for p in "${all[@]}"; do peer_wanted "$p" && members+=("$p"); done
  (( ${#members[@]} > 0 )) || continue
  g=$(IFS=,; echo "${members[*]}")
  step $(( 70 * ${#members[@]} )) "bench-${g//,/+}" python3 scripts/peers/peers_bench.py --peer "$g" "${bench_args[@]}"
  # A shared process that died of a signal (rc >= 128: a crash in one peer's code) or lost the
  # CUDA context (rc 5: a peer's sticky CUDA error; its rows after that say "not run") could cost
  # every peer's rows: its peers run again, one process each, and rewrite their files.
  if (( ${#members[@]} > 1 )) && [[ -n $STEP_RC ]] && (( STEP_RC >= 128 || STEP_RC == 5 )); then
    why="died of signal $(( STEP_RC - 128 ))"
    (( STEP_RC == 5 )) && why="lost the CUDA context"
    echo "bench-${g//,/+} $why (rc=$STEP_RC, log bench-${g//,/+}.log): its peers again, one process each: ${members[*]}" >> "$steps"
    for p in "${members[@]}"; do
      step 70 "bench-$p" python3 scripts/peers/peers_bench.py --peer "$p" "${bench_args[@]}"
    done
  fi
done
if (( have_bin )); then
  for f in "${files[@]}"; do
    stem=$(basename "$f" .yaml)
    for p in "${peers[@]}"; do
      for c in plain raw; do
        # Plain rows against kda-bench's fused; raw peers against ours-raw of peers_bench (the same
        # Python loop); ours itself against kda-bench's fused and raw (the kda_torch wrapper's cost).
        a=ours-bench-$stem.csv ap=fused
        if [[ $c == raw ]]; then
          if [[ $p == ours ]]; then ap=raw; else a=ours-$stem.csv ap=ours-raw; fi
        fi
        [[ -f $r/$a && -f $r/$p-$stem.csv ]] && grep -q ",$p-$c," "$r/$p-$stem.csv" || continue
        step 10 "compare-$p-$c-$stem" "$BIN/kda-bench" compare "$r/$a" "$r/$p-$stem.csv" --mode warm \
          --a-path "$ap" --b-path "$p-$c" --md "$r/compare-$p-$c-$stem.md" --force
      done
    done
  done
fi
if [[ ${FLA:-1} != 0 ]]; then
  for stem in ${FLA_FILES:-contract contract-mixed}; do
    step 150 "fla-bench-$stem" python3 scripts/peers/fla_bench.py --shapes "shapes/$stem.yaml" --rows prenorm,full \
      --no-kernel-list --timeout 5 --csv "$r/fla-bench-$stem.csv" --md "$r/fla-bench-$stem.md" --force
    [[ -f $r/fla-bench-$stem.csv && -f $r/ours-bench-$stem.csv ]] && (( have_bin )) && \
      step 10 "compare-fla-$stem" "$BIN/kda-bench" compare "$r/ours-bench-$stem.csv" "$r/fla-bench-$stem.csv" \
        --mode warm --a-path fused --b-path fla-prenorm --md "$r/compare-fla-prenorm-$stem.md" --force
  done
fi

fi  # TIMING
# --- D. report, caches, pack --------------------------------------------------------------------------
DEADLINE=$(( DEADLINE + 30 )) step 30 report python3 scripts/peers/peers_report.py "$r" --build-dir "$B" --md "$r/report.md" --force
cp "$r/report.md" "$OUT/peers-report.md" 2>/dev/null
tar -C "$TRITON_CACHE_DIR" -czf /tmp/triton-cache.tar.gz . 2>/dev/null
size=$(stat -c %s /tmp/triton-cache.tar.gz 2>/dev/null || echo 0)
if (( size > 40000000 )); then  # more than 3 parts would crowd out the reports (8 files at most)
  echo "triton cache not returned: $size B > 40 MB" >> "$steps"
elif (( size > 0 )); then
  split -b 15000000 -d -a 1 /tmp/triton-cache.tar.gz "$OUT/triton-cache.tar.gz.part"
  echo "returned for the next call: triton-cache.tar.gz.part* ($size B in $(ls "$OUT"/triton-cache.tar.gz.part* | wc -l) parts)" >> "$steps"
fi
for c in "$OUT"/*-build.tar.gz; do [[ -f $c ]] && echo "returned for the next call: $(basename "$c") ($(stat -c %s "$c") B)" >> "$steps"; done
echo "total t=${SECONDS}s" >> "$steps"
{ cat "$r/report-summary.txt" 2>/dev/null; echo "== steps (wall time; t = seconds since the call started)"; cat "$steps"; } > "$OUT/peers-summary.txt"
tar -C "$OUT" -czf "$OUT/peers.tar.gz" peers && rm -rf "$r"
cat "$OUT/peers-summary.txt"
