#!/usr/bin/env bash
# The one command run on the H200 machine (device tool) over a copy of the checkout, with
# build/release/bin carried from the development machine. Writes everything under $OUT/r and
# packs it as $OUT/h200.tar.gz (the device tool returns at most 8 files), plus a short summary.
#   scripts/h200-run.sh [full|quick|sanitize]
#     full: everything below; quick: no contract kda-check, no sanitizers; sanitize: only the
#     compute-sanitizer runs (SAN_TOOLS, SANITIZE_SHAPES; SAN_TESTS=ops|all|0: test_kda_gpu's
#     gate_cumsum and l2norm tests (default), all of it, or none)
# Environment: VARIANTS (kernel variants, default "v2_mma v2w_mma": the last one, the library's
# default, is benched with stages), STATES=1 (also time shapes/contract-states.yaml, verified:
# the state-overhead rows of performance target 4), REPEAT=1 (a
# second kda-bench contract run, stages included, and `compare` against the first: SAME on every
# row expected), ALLMODES=0 (skip the all-modes run), GBENCH=0 (skip the kda-gbench JSON run),
# SOAK=SECONDS (kda-check --soak on the contract: 18 shape-paths x SECONDS; in full mode the
# contract check itself soaks),
# DEADLINE (seconds; later steps are skipped, not killed), BENCH_ARGS (extra kda-bench options for
# the contract run and its repeat, e.g. --warmup 300 so the SM clock settles before sampling),
# CHECK_FILES (shape files kda-check runs in every mode, default "smoke edge long-memory"),
# CONTRACT_FILES (the full-mode kda-check files, default "contract contract-mixed"), CHECK_ARGS
# (extra kda-check options, e.g. --rms-limit 4e-3), BENCH_FILES (the files kda-bench times with
# the last variant, default "contract contract-mixed"; the first gets the stages), BASE_BIN (a
# directory with an earlier build's kda-bench: it times BASE_FILES, default contract, in the same
# call and `compare` puts each against this build's run of the same file).
#   e.g. VARIANTS=v2_mma REPEAT=1 ALLMODES=0 scripts/h200-run.sh quick
set -uo pipefail
mode=${1:-full}
OUT=${OUT:?OUT must be set}
bin=${BIN:-build/release/bin}
DEADLINE=${DEADLINE:-570}
SUMMARY=$OUT/summary.txt  # beside the archive: the device tool returns it as a file of its own
. "$(dirname "$0")/device-steps.sh"  # r, step, record_machine
record_machine "binaries built from: $(binary_commit "$bin/kda-check" || echo unknown)"
variants=(${VARIANTS:-v2_mma v2w_mma})
vargs=()
for v in "${variants[@]}"; do vargs+=(--variant "$v"); done
if [[ $mode != sanitize ]]; then
for t in "$bin"/test_kda_gpu "$bin"/test_bench_gpu "$bin"/test_kda_validate; do
  [[ -x $t ]] && step 120 "$(basename "$t")" "$t" --gtest_brief=1
done
check_args=(${CHECK_ARGS:-})
for s in ${CHECK_FILES:-smoke edge long-memory}; do
  step 120 "check-$s" "$bin/kda-check" "${vargs[@]}" "${check_args[@]}" --shapes shapes/$s.yaml \
    --md "$r/check-$s.md" --csv "$r/check-$s.csv" --json "$r/check-$s.json" --force
done
if [[ $mode == full ]]; then  # with SOAK, the contract check is also the soak (one reference pass)
  soak=(); [[ ${SOAK:-0} != 0 ]] && soak=(--soak "$SOAK")
  for s in ${CONTRACT_FILES:-contract contract-mixed}; do
    step $(( 240 + 18 * ${SOAK:-0} )) "check-$s" "$bin/kda-check" "${vargs[@]}" "${check_args[@]}" \
      --shapes shapes/$s.yaml "${soak[@]}" --md "$r/check-$s.md" --csv "$r/check-$s.csv" \
      --json "$r/check-$s.json" --force
  done
fi
main=${variants[-1]}
if [[ -x $bin/kda-bench ]]; then
  # The last variant (the newest) with per-stage rows and verification; then each other variant
  # without stages, and `compare` of every other variant against the newest one.
  stages=(--stages)
  for s in ${BENCH_FILES:-contract contract-mixed}; do
    step 240 "bench-$s" "$bin/kda-bench" --variant "$main" --shapes shapes/$s.yaml "${stages[@]}" ${BENCH_ARGS:-} \
      --md "$r/bench-$s.md" --csv "$r/bench-$s.csv" --json "$r/bench-$s.json" --force
    stages=()
  done
  if [[ -n ${BASE_BIN:-} && -x $BASE_BIN/kda-bench ]]; then  # an earlier build, same call
    for s in ${BASE_FILES:-contract}; do  # e.g. BASE_FILES="contract contract-mixed"
      step 150 "bench-$s-base" "$BASE_BIN/kda-bench" --shapes shapes/$s.yaml --no-verify \
        ${BENCH_ARGS:-} --csv "$r/bench-$s-base.csv" --force
      step 30 "bench-compare-$s-base" "$bin/kda-bench" compare "$r/bench-$s-base.csv" "$r/bench-$s.csv"
    done
  fi
  for v in "${variants[@]}"; do
    [[ $v == "$main" ]] && continue
    step 150 "bench-contract-$v" "$bin/kda-bench" --variant "$v" --shapes shapes/contract.yaml \
      --no-verify --csv "$r/bench-contract-$v.csv" --force
    step 30 "bench-compare-$v" "$bin/kda-bench" compare "$r/bench-contract-$v.csv" "$r/bench-contract.csv"
  done
  if [[ ${STATES:-0} == 1 ]]; then  # the fixed shapes with initial and final state
    step 150 bench-states "$bin/kda-bench" --variant "$main" --shapes shapes/contract-states.yaml \
      ${BENCH_ARGS:-} --md "$r/bench-states.md" --csv "$r/bench-states.csv" --force
  fi
  if [[ ${REPEAT:-0} == 1 ]]; then  # run B of the same binary: compare must say SAME everywhere
    step 150 bench-contract-repeat "$bin/kda-bench" --variant "$main" --shapes shapes/contract.yaml \
      --stages --no-verify ${BENCH_ARGS:-} --csv "$r/bench-contract-repeat.csv" --force
    step 30 bench-compare-repeat "$bin/kda-bench" compare "$r/bench-contract.csv" "$r/bench-contract-repeat.csv"
  fi
  if [[ ${ALLMODES:-1} == 1 ]]; then  # every timing mode once, on one shape
    step 90 bench-modes "$bin/kda-bench" --variant "$main" --only h64-fixed --no-verify \
      --mode warm,cold,graph,triton --md "$r/bench-modes.md" --csv "$r/bench-modes.csv" --force
  fi
  cp "$r/bench-contract.md" "$OUT"/ 2>/dev/null
fi
if [[ ${GBENCH:-1} == 1 && -x $bin/kda-gbench ]]; then  # Google Benchmark JSON, verified first
  step 240 gbench-contract "$bin/kda-gbench" --variant "$main" --shapes shapes/contract.yaml \
    --benchmark_out="$r/gbench-contract.json" --benchmark_out_format=json
fi
if [[ ${SOAK:-0} != 0 && $mode != full ]]; then  # every contract shape and path re-run for SOAK seconds
  step $(( 18 * SOAK + 120 )) soak-contract "$bin/kda-check" --variant "${variants[-1]}" \
    --shapes shapes/contract.yaml --soak "$SOAK" --md "$r/soak-contract.md" --csv "$r/soak-contract.csv" --force
fi
fi  # mode != sanitize
if [[ $mode == full || $mode == sanitize ]] && command -v compute-sanitizer >/dev/null; then
  # kda-check runs l2norm and both forward paths per shape; test_kda_gpu adds gate_cumsum and the
  # API edge cases, so together they cover every op.
  for tool in ${SAN_TOOLS:-memcheck racecheck initcheck synccheck}; do
    for s in ${SANITIZE_SHAPES:-smoke edge}; do
      # Every variant on smoke; the default variant on the (larger) edge file.
      sargs=("${vargs[@]}")
      [[ $s == smoke ]] || sargs=()
      step 200 "sanitizer-$tool-$s" compute-sanitizer --tool "$tool" --error-exitcode 9 \
        "$bin/kda-check" "${sargs[@]}" --shapes shapes/$s.yaml
    done
    # gate_cumsum is an op kda-check does not run: its GPU tests (and l2norm's) go through every
    # tool by default (SAN_TESTS=ops, seconds); SAN_TESTS=all runs the whole test_kda_gpu.
    case ${SAN_TESTS:-ops} in
      ops) step 120 "sanitizer-$tool-ops" compute-sanitizer --tool "$tool" --error-exitcode 9 \
             "$bin/test_kda_gpu" --gtest_brief=1 --gtest_filter='KdaGpu.GateCumsum*:KdaGpu.L2Norm*' ;;
      all|1) step 200 "sanitizer-$tool-test_kda_gpu" compute-sanitizer --tool "$tool" \
             --error-exitcode 9 "$bin/test_kda_gpu" --gtest_brief=1 ;;
    esac
  done
fi
tar -C "$OUT" -czf "$OUT/h200.tar.gz" r
cp "$r"/check-*.md "$OUT"/ 2>/dev/null
rm -rf "$r"  # only a few files come back from $OUT: the tarball holds everything
cat "$S"
