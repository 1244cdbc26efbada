# Runs one libFuzzer target for ctest (tests/fuzz/CMakeLists.txt).
#   cmake -DFUZZER=<binary> -DNAME=<target> -DMODE=run -DSEEDS=<dir> -DWORK=<dir>
#         [-DSECONDS=20] [-DDICT=<file>] -P run_fuzz.cmake
#     A bounded run from a fresh copy of the seed corpus: new inputs and crash files land under
#     WORK (in the build tree), never in the source tree. Fixed seed, so a run is repeatable.
#   cmake -DFUZZER=<binary> -DNAME=<target> -DMODE=regressions -DSEEDS=<dir> -P run_fuzz.cmake
#     Runs every file of SEEDS once (inputs that once crashed the target).
if(NOT DEFINED SECONDS)
  set(SECONDS 20)
endif()
# Limits: 5 s per input (a hang is a bug), 2 GiB RSS, and no single allocation over 128 MiB
# (inputs are a few KiB, so anything near that is an unbounded allocation).
set(limits -timeout=5 -rss_limit_mb=2048 -malloc_limit_mb=128)

if(MODE STREQUAL "run")
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
  file(GLOB seeds ${SEEDS}/*)
  file(COPY ${seeds} DESTINATION ${WORK}/corpus)
  set(dict_arg)
  if(DEFINED DICT)
    set(dict_arg -dict=${DICT})
  endif()
  execute_process(
    COMMAND ${FUZZER} ${WORK}/corpus -max_total_time=${SECONDS} -seed=1 ${limits}
            -artifact_prefix=${WORK}/artifacts/ -print_final_stats=1 ${dict_arg}
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    file(GLOB found ${WORK}/artifacts/*)
    message(FATAL_ERROR "fuzz_${NAME} failed (exit ${rc}); input(s): ${found}\n"
            "Reproduce with `${FUZZER} <input>`; once fixed, keep the input in "
            "tests/fuzz/regressions/${NAME}/.")
  endif()
elseif(MODE STREQUAL "regressions")
  file(GLOB inputs LIST_DIRECTORIES false ${SEEDS}/*)
  list(FILTER inputs EXCLUDE REGEX "/README[^/]*$")
  if(NOT inputs)
    message(FATAL_ERROR "no regression inputs in ${SEEDS}")
  endif()
  list(LENGTH inputs count)
  message("fuzz_${NAME}: ${count} regression input(s)")
  execute_process(COMMAND ${FUZZER} ${limits} ${inputs} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fuzz_${NAME} failed on a regression input (exit ${rc})")
  endif()
else()
  message(FATAL_ERROR "MODE must be run or regressions, got '${MODE}'")
endif()
