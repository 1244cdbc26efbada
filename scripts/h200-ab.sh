#!/usr/bin/env bash
# One device call that verifies a build and times it against earlier builds in the same call (the
# A/B pattern of results/h200/*/call.sh): GPU tests, kda-bench of every build alternated over the
# shape files (a repeat of the first file, to see the noise), `kda-bench compare` of the new build
# against each base, then kda-check at --rms-limit 4e-3. Steps stay inside DEADLINE.
#   NEW=.device/new/bin BASES="f097903=.device/new/bin/kda-bench-f097903" scripts/h200-ab.sh
# NEW        folder with the new build's kda-check, kda-bench, test_kda_gpu (default .device/new/bin)
# BASES      space-separated NAME=KDA_BENCH pairs (earlier builds; a base whose harness predates
#            the raw path gets PATHS_<NAME>, e.g. PATHS_3a=fused,explicit)
# FILES      shape files timed (default "contract contract-mixed"); PATHS (default fused,raw,explicit)
# CHECKS     kda-check runs, FILE or FILE:raw (default "smoke edge edge:raw long-memory")
# TESTS      GPU test binaries in NEW (default test_kda_gpu); DEADLINE (default 540); DRY=1: print
# Writes $OUT/h200.tar.gz (folder r/); unpack it into results/h200/<folder>, then
# scripts/results-pack.sh keeps the headline reports.
set -u
NEW=${NEW:-.device/new/bin}
FILES=${FILES:-contract contract-mixed}
PATHS_NEW=${PATHS:-fused,raw,explicit}
CHECKS=${CHECKS:-smoke edge edge:raw long-memory}
TESTS=${TESTS:-test_kda_gpu}
declare -A base_bin
names=()
for pair in ${BASES:-}; do
  name=${pair%%=*}
  bin=${pair#*=}
  if [[ ! $name =~ ^[A-Za-z0-9_]+$ || $name == "$pair" || $name == new ]]; then
    echo "$0: BASES entry '$pair' is not NAME=KDA_BENCH with NAME of letters, digits, _ (not 'new')" >&2
    exit 2
  fi
  if [[ ! -x $bin && ${DRY:-0} != 1 ]]; then
    echo "$0: BASES entry '$pair': $bin is not an executable kda-bench" >&2
    exit 2
  fi
  base_bin[$name]=$bin
  names+=("$name")
done
if [[ ${DRY:-0} == 1 ]]; then
  OUT=${OUT:-$(mktemp -d)}
fi
. "$(dirname "$0")/device-steps.sh"
if [[ ${DRY:-0} == 1 ]]; then
  step() { echo "step $*"; }
  record_machine() { echo "machine: $1"; }
  finish() { rm -rf "$r"; }
fi
line="binaries: $(binary_commit "$NEW/kda-check" 2>/dev/null)"
for name in "${names[@]}"; do line+="; $name: $(binary_commit "${base_bin[$name]}" 2>/dev/null)"; done
record_machine "$line"
for t in $TESTS; do step 90 "$t" "$NEW/$t" --gtest_brief=1; done

bench() {  # bench FILE TAG BINARY PATHS
  step 90 "bench-$1-$2" "$3" --shapes "shapes/$1.yaml" --no-verify --paths "$4" \
    --csv "$r/bench-$1-$2.csv" --md "$r/bench-$1-$2.md" --force
}
first=${FILES%% *}
for f in $FILES; do
  for round in 1 2; do
    [[ $round == 2 && $f != "$first" ]] && continue
    tag=$([[ $round == 2 ]] && echo -2)
    for name in "${names[@]}"; do
      paths_var=PATHS_$name
      bench "$f" "$name$tag" "${base_bin[$name]}" "${!paths_var:-$PATHS_NEW}"
    done
    bench "$f" "new$tag" "$NEW/kda-bench" "$PATHS_NEW"
    for name in "${names[@]}"; do
      step 10 "compare-$f-vs-$name$tag" "$NEW/kda-bench" compare "$r/bench-$f-$name$tag.csv" \
        "$r/bench-$f-new$tag.csv" --mode warm --md "$r/compare-$f-vs-$name$tag.md" --force
    done
  done
done
for c in $CHECKS; do
  file=${c%%:*}
  backend=()
  name=check-$file
  if [[ $c == *:raw ]]; then
    backend=(--backend raw)
    name=check-$file-raw
  fi
  step 200 "$name" "$NEW/kda-check" --rms-limit 4e-3 "${backend[@]}" --shapes "shapes/$file.yaml" \
    --md "$r/$name.md" --csv "$r/$name.csv" --force
done
finish
