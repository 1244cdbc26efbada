# Helpers for a device call's A/B script (source it: `. scripts/device-steps.sh`), the pattern of
# results/h200/*/call.sh: every step time-limited inside the call's deadline, its log and exit
# code recorded, later steps skipped (not killed) once the deadline is near.
#   OUT (set by the device tool), DEADLINE (seconds from the script's start; default 540),
#   SUMMARY (the summary file; default $r/summary.txt, inside the archive).
# Defines r (the report folder under $OUT), S (the summary file) and:
#   step SECONDS NAME CMD...   run CMD with a limit, output to $r/NAME.log, "NAME rc=.. Ns" to $S
#   binary_commit BINARY       the commit a binary of this tree was built from (its embedded hash)
#   record_machine LINE        LINE, the date and the GPU's clocks into $r/machine.txt and $S
#   finish                     the summary's geomean and pass lines, $OUT/h200.tar.gz, the summary
# Locally, scripts/results-pack.sh then keeps a folder's headline reports and packs the rest.
: "${OUT:?OUT must be set (the device tool sets it)}"
r=$OUT/r
mkdir -p "$r"
S=${SUMMARY:-$r/summary.txt}
: > "$S"
step() {
  local limit=$1 name=$2
  shift 2
  local left=$(( ${DEADLINE:-540} - SECONDS ))
  if (( left < 5 )); then
    echo "$name skipped (deadline)" | tee -a "$S"
    return 0
  fi
  (( limit > left )) && limit=$left
  local t0=$SECONDS
  timeout "$limit" "$@" > "$r/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0))s (t=$SECONDS)" | tee -a "$S"
}
binary_commit() {  # reads the whole pipe (no early exit: no SIGPIPE status under pipefail)
  local c
  c=$(strings "$1" 2>/dev/null | grep -E '^[0-9a-f]{40}(-dirty)?$' | sed -n 1p)
  [[ -n $c ]] && echo "$c"
}
record_machine() {
  { echo "$1"; date -u
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
      --format=csv; } > "$r/machine.txt" 2>&1
  cat "$r/machine.txt" >> "$S"
}
finish() {
  grep -h "geomean\|rows:" "$r"/compare-*.md "$r"/check-*.md 2>/dev/null | head -40 >> "$S"
  tar -C "$OUT" -czf "$OUT/h200.tar.gz" r
  cat "$S"
  rm -rf "$r"
}
