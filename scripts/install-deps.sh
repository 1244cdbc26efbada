#!/usr/bin/env bash
# Installs the Debian 12 packages kda-bench / kda-check build against. Idempotent: packages that
# are already present are not downloaded again, and nothing is installed outside apt.
# The CUDA toolkit (nvcc 13) is expected at /usr/local/cuda; it does not come from apt.
set -euo pipefail

packages=(
  cmake g++ make ninja-build pkg-config
  libcli11-dev          # command lines
  libeigen3-dev         # float64 reference
  libyaml-cpp-dev       # shape files (linked statically)
  libfmt-dev            # formatting (g++ 12 has no <format>)
  nlohmann-json3-dev    # JSON reports
  libgtest-dev libgmock-dev googletest  # unit tests
  libbenchmark-dev      # kda-gbench
  python3-numpy python3-matplotlib      # plot script and .npy cross-checks
  python3-yaml                          # scripts/peers (shape files) and their tests
  python3-torch python3-pip python3-setuptools python3-wheel  # python/ (kda_torch): the pip
                                          # install and CPU tests in CTest (CPU torch 1.13)
  clang libclang-rt-14-dev libomp-14-dev  # libFuzzer targets (fuzz preset): clang 14, its
                                          # fuzzer/sanitizer runtimes and its OpenMP
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi

if ! command -v nvcc >/dev/null 2>&1 && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install-deps: warning: nvcc not found; configure with -DKDA_ENABLE_CUDA=OFF for a host-only build" >&2
fi
