#!/usr/bin/env bash
# Installs what pipecast needs on Debian 12 (bookworm).
#
#   scripts/setup.sh [main|all]
#
#   main  what the tools need to build and run (the README's main command,
#         scripts/run-example.sh): the compiler, CMake, Ninja and the
#         libraries every tool links (fmt, nlohmann-json, CLI11, Boost's
#         headers); 8 packages that pull in about 110 MB of downloads on a
#         fresh machine (README, "The first run").
#   all   (the default) main, and what the tests, benchmarks and checks add:
#         GoogleTest, toml++, Google Benchmark, OpenMPI (the multi-process validator),
#         clang (sanitizers, libFuzzer), clang-format, Python, Chromium (the
#         HTML report's browser test). scripts/test.sh asks for it.
#
# Idempotent: when every package is already installed it does nothing and
# needs no network, so the other scripts call it on every run. Otherwise it
# runs `apt-get update` and installs the missing packages. Runs as root, or
# through sudo when not root and sudo exists. Messages go to stderr.
#
# CUDA 13 is not installed here: it is optional (PIPECAST_CUDA=AUTO|ON|OFF)
# and lives at the toolkit's standard location where a machine has it.
set -euo pipefail

mode="${1:-all}"

main_packages=(
  build-essential cmake ninja-build g++
  libfmt-dev nlohmann-json3-dev libcli11-dev
  libboost-dev  # Boost.Graph's headers (sim/schedule_graph.cc); nothing of Boost is linked
)
test_packages=(
  libboost-graph-dev
  clang-14 libclang-rt-14-dev  # sanitizers and libFuzzer with clang
  clang-format-14  # scripts/check-format.sh (ctest lint.format)
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libtomlplusplus-dev  # toml++: frameworks_test reads back the torchtitan TOML
  libopenmpi-dev openmpi-bin  # the multi-process validator
  python3
  chromium fonts-dejavu-core  # the HTML report's browser test (tests/browser/)
)
case "${mode}" in
  main) packages=("${main_packages[@]}") ;;
  all) packages=("${main_packages[@]}" "${test_packages[@]}") ;;
  *)
    echo "setup.sh: unknown mode '${mode}': use main or all" >&2
    exit 2
    ;;
esac

log() { echo "setup.sh: $*" >&2; }

# True when dpkg reports the package as installed (for any architecture).
is_installed() {
  dpkg-query -W -f='${db:Status-Status}\n' "$1" 2>/dev/null | grep -qx installed
}

missing=()
for pkg in "${packages[@]}"; do
  is_installed "${pkg}" || missing+=("${pkg}")
done

if ((${#missing[@]} == 0)); then
  log "all ${#packages[@]} packages are installed; nothing to do"
  exit 0
fi

sudo_cmd=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    log "missing packages: ${missing[*]}"
    log "not root and no sudo: install them as root, then run this again"
    exit 1
  fi
fi

# Wait for another apt/dpkg run (unattended upgrades) instead of failing.
apt_opts=(-o DPkg::Lock::Timeout=300)

log "missing packages: ${missing[*]}"
log "running: apt-get update"
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get "${apt_opts[@]}" update >&2
log "running: apt-get install -y --no-install-recommends ${missing[*]}"
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}" >&2

still_missing=()
for pkg in "${missing[@]}"; do
  is_installed "${pkg}" || still_missing+=("${pkg}")
done
if ((${#still_missing[@]} > 0)); then
  log "still not installed after apt-get: ${still_missing[*]}"
  exit 1
fi
log "installed ${#missing[@]} packages"
