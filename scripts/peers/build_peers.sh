#!/usr/bin/env bash
# Builds the Hopper peers for scripts/peers on the GPU machine (or compile-checks them anywhere
# nvcc is): one target per call, so run-all-h200.sh can start them in the background in parallel.
#
#   scripts/peers/build_peers.sh TARGET BUILD_DIR
#
# TARGET:
#   cudnn     cuDNN-FE 1.32.0's sm90 kda_fused, extracted from the wheel in $WHEEL_DIR (.whl/),
#             compiled twice (plain, flags 0; raw, flags 7) with its NVRTC options, linked with
#             native/cudnn_kda_launch.cu into BUILD_DIR/cudnn/libkdapeer_cudnn.so
#   ours      no build: checks that python/kda_torch imports and loads $KDA_C_LIBRARY (the lead's
#             libkda_c.so), the way peer_adapters.OursPeer will
#   fk|ffk|vfk  FlashKDA stock / Flash-Flash-KDA / vLLM's fork from the tarballs in $PEERS_SRC
#             (.peers/ or ../shared/peers), CUTLASS taken from the stock tarball, built in place
#             with its setup.py (FLASH_KDA_CUDA_ARCHS=90a) in BUILD_DIR/<target>/src
#
# Writes BUILD_DIR/<target>.status: "ok" or "failed: <step> (rc N)", and BUILD_DIR/<target>.log.
# Nothing of any peer is kept in the repository: the sources come from the wheel and tarballs.
#
# FlashKDA builds are cached (fk 2 min, vfk 5 min on the H200's 16 cores): a build's extension
# files, debug info stripped, go to $PEERS_CACHE_OUT/<target>-build.tar.gz (when set), under a key
# of the source tarballs' sha256, python, torch, CUDA and nvcc versions and this recipe. A later
# call that finds <target>-build.tar.gz with the same key in $PEERS_BUILD_CACHE (default
# .peers-cache/, git-ignored, carried) unpacks the sources and those files instead of compiling;
# BUILD_DIR/<target>.cache says which happened ("hit KEY", "built", or why not cached).
set -uo pipefail
target=${1:?usage: build_peers.sh cudnn|ours|fk|ffk|vfk BUILD_DIR}
build=${2:?usage: build_peers.sh cudnn|ours|fk|ffk|vfk BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$build"
build=$(cd "$build" && pwd)
log=$build/$target.log
status=$build/$target.status
: > "$log"
echo "running" > "$status"
NVCC=${NVCC:-nvcc}
ARCH=(-gencode arch=compute_90a,code=sm_90a)
t0=$SECONDS

finish() {  # finish STATUS
  echo "$1" > "$status"
  echo "== $target: $1 ($(( SECONDS - t0 )) s)" >> "$log"
  [[ $1 == ok ]]
  exit $?
}
run() {  # run STEP CMD...: logged; a failure ends the build with its step named
  local step=$1; shift
  echo "+ $*" >> "$log"
  "$@" >> "$log" 2>&1
  local rc=$?
  (( rc == 0 )) || finish "failed: $step (rc $rc; last lines of $target.log: $(tail -n 3 "$log" | tr '\n' ' ' | cut -c1-400))"
}

find_tarball() {  # find_tarball NAME: the first of $PEERS_SRC, .peers/, ../shared/peers holding it
  local d
  for d in ${PEERS_SRC:-} "$root/.peers" "$root/../shared/peers" "$root/shared/peers"; do
    [[ -n $d && -f $d/$1 ]] && { echo "$d/$1"; return 0; }
  done
  return 1
}

case $target in
cudnn)
  wheel=$(ls "${WHEEL_DIR:-$root/.whl}"/nvidia_cudnn_frontend-1.32.0-*.whl 2>/dev/null | head -n 1)
  [[ -n $wheel ]] || finish "failed: no nvidia_cudnn_frontend-1.32.0 wheel in ${WHEEL_DIR:-$root/.whl} (pip download it there: scripts/peers/README.md)"
  out=$build/cudnn
  mkdir -p "$out"
  body=cudnn/linear_attention/hopper/cuda_kernels/kda_fused_sm90.cu
  run extract python3 -c "import sys, zipfile; open(sys.argv[2], 'wb').write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[3]))" \
    "$wheel" "$out/kda_fused_sm90.cu" "$body"
  # NVRTC-only workaround in the body: it typedefs uint32_t/uint64_t itself (NVRTC has no
  # <cstdint>); under nvcc the CUDA headers already define uint64_t as unsigned long, a conflict.
  run patch-typedefs sed -i -e 's/^typedef unsigned int uint32_t;/#include <cstdint>/' \
    -e '/^typedef unsigned long long uint64_t;/d' "$out/kda_fused_sm90.cu"
  # The options of the wheel's NVRTC path (cake/compiler.py): -O2-like, fast math, NDEBUG.
  opts=(-O2 -std=c++20 "${ARCH[@]}" --use_fast_math -DNDEBUG -Xcompiler -fPIC -DKDA_FUSED_SMEM_BYTES=94464)
  run compile-plain "$NVCC" "${opts[@]}" -Dkda_fused=kdapeer_cudnn_plain -DKDA_FUSED_FLAGS=0 \
    -c "$out/kda_fused_sm90.cu" -o "$out/plain.o" &
  run compile-raw "$NVCC" "${opts[@]}" -Dkda_fused=kdapeer_cudnn_raw -DKDA_FUSED_FLAGS=7 \
    -c "$out/kda_fused_sm90.cu" -o "$out/raw.o" &
  run compile-launcher "$NVCC" -O2 -std=c++20 "${ARCH[@]}" -Xcompiler -fPIC \
    -c "$here/native/cudnn_kda_launch.cu" -o "$out/launch.o"
  wait
  [[ -f $out/plain.o && -f $out/raw.o ]] || finish "failed: compile (see $target.log)"
  run link "$NVCC" -shared "${ARCH[@]}" -o "$out/libkdapeer_cudnn.so" "$out/launch.o" "$out/plain.o" "$out/raw.o"
  finish ok
  ;;
ours)
  # Nothing to build: ours is python/kda_torch over the lead's libkda_c.so ($KDA_C_LIBRARY). This
  # target only checks, in a process of its own, that both load here (torch import, ABI version),
  # so that a library that is missing, stale or does not load shows in the status table with
  # kda_torch's own message before any check or timing step needs it.
  [[ -n ${KDA_C_LIBRARY:-} ]] || finish "failed: KDA_C_LIBRARY is not set (point it at the lead's build/release/lib/libkda_c.so, carried e.g. as .device/new/lib/libkda_c.so)"
  [[ -f $KDA_C_LIBRARY ]] || finish "failed: KDA_C_LIBRARY=$KDA_C_LIBRARY does not exist (carry the lead's libkda_c.so there)"
  run load-kda-torch python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import peer_adapters as pa; print(pa.ours_load_check())' "$here"
  finish ok
  ;;
fk|ffk|vfk)
  stock=$(find_tarball flashkda-src.tar.gz) || finish "failed: flashkda-src.tar.gz not found (copy ../shared/peers/*.tar.gz to .peers/ and carry it)"
  forks=""
  [[ $target == fk ]] || forks=$(find_tarball flashkda-forks.tar.gz) || finish "failed: flashkda-forks.tar.gz not found"
  recipe="FLASH_KDA_CUDA_ARCHS=90a build_ext --inplace; setup.py's git call neutralised; v1"
  key=$( { echo "$target $recipe"; sha256sum "$stock" ${forks:+"$forks"} | cut -d' ' -f1
           python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda)' 2>/dev/null || echo no-torch
           "$NVCC" --version 2>/dev/null | tail -n 1; } | sha256sum | cut -c1-16)
  # Relative cache paths are the checkout's (the build below runs in another directory).
  cache_dir=${PEERS_BUILD_CACHE:-.peers-cache}
  [[ $cache_dir == /* ]] || cache_dir=$root/$cache_dir
  cache_in=$cache_dir/$target-build.tar.gz
  : > "$build/$target.cache"
  src=$build/$target/src
  rm -rf "$build/$target"
  mkdir -p "$build/$target"
  if [[ $target == fk ]]; then
    run unpack tar -C "$build/$target" -xzf "$stock" fk
    mv "$build/$target/fk" "$src"
  else
    run unpack tar -C "$build/$target" -xzf "$forks" "$target"
    mv "$build/$target/$target" "$src"
    # The forks ship without CUTLASS; they pin the stock's (same headers, same include paths).
    run unpack-cutlass tar -C "$build/$target" -xzf "$stock" fk/cutlass
    mv "$build/$target/fk/cutlass" "$src/cutlass" && rmdir "$build/$target/fk"
  fi
  cd "$src" || finish "failed: no $src"
  if [[ -f $cache_in ]] && [[ $(tar -xzOf "$cache_in" ./KEY 2>/dev/null) == "$key" ]]; then
    run unpack-cached-build tar -C "$src" -xzf "$cache_in" --exclude KEY
    echo "hit $key ($cache_in)" > "$build/$target.cache"
    finish ok
  fi
  [[ -f $cache_in ]] && echo "stale: $cache_in has key $(tar -xzOf "$cache_in" ./KEY 2>/dev/null), wanted $key" > "$build/$target.cache"
  # The stock setup.py runs `git submodule update --init cutlass` (the forks' copies say `pass`);
  # CUTLASS is already unpacked and the GPU machine may have no git: neutralise the call.
  run patch-setup sed -i 's/^subprocess.run(\["git", "submodule".*$/pass  # CUTLASS comes from the tarball/' setup.py
  # Two translation units per build (flash_kda.cpp, fwd_launch.cu; vfk adds torch_api.cpp): three
  # builds and the cuDNN objects share the 16 cores. fwd_launch.cu is the long pole (all the
  # kernel instantiations in one TU: ~5 min for vfk), so more jobs do not shorten it.
  run setup.py env FLASH_KDA_CUDA_ARCHS=90a MAX_JOBS=${MAX_JOBS:-2} NVCC_THREADS=${NVCC_THREADS:-2} \
    python3 setup.py build_ext --inplace
  if [[ -n ${PEERS_CACHE_OUT:-} ]]; then
    # The extension files only (the sources come from the tarballs each time), debug info
    # stripped (the device returns files of at most 16 MiB).
    stage=$build/$target/cache && rm -rf "$stage" && mkdir -p "$stage" && echo "$key" > "$stage/KEY"
    (find . -name '*.so' -not -path './build/*' | while read -r f; do
       mkdir -p "$stage/$(dirname "$f")" && cp "$f" "$stage/$f" && strip --strip-debug "$stage/$f" 2>/dev/null; done)
    if tar -C "$stage" -czf "$PEERS_CACHE_OUT/$target-build.tar.gz" . 2>> "$log"; then
      echo "built; cached as $PEERS_CACHE_OUT/$target-build.tar.gz ($(stat -c %s "$PEERS_CACHE_OUT/$target-build.tar.gz") B, key $key)" >> "$build/$target.cache"
    fi
  else
    echo "built (PEERS_CACHE_OUT unset: not cached)" >> "$build/$target.cache"
  fi
  finish ok
  ;;
*)
  echo "build_peers.sh: unknown target '$target' (expected cudnn, ours, fk, ffk or vfk)" >&2
  exit 2
  ;;
esac
