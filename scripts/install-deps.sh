#!/usr/bin/env bash
# Installs every build, test and benchmark dependency of vramd from Debian bookworm's packages.
# Run as root (or with sudo). Safe to run again: apt skips what is already there.
# --build-only: only what a Release build of vramd, vramctl and the backends needs
# (-DVRAMD_BUILD_TESTS=OFF -DVRAMD_BUILD_BENCH=OFF; deploy/Dockerfile's build stage).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
build_packages=(
  # build
  build-essential cmake ninja-build pkg-config
  # libraries (see docs/dependencies in README)
  protobuf-compiler libprotobuf-dev libboost-dev rapidjson-dev
  # the gRPC front end (protobuf-compiler-grpc also makes the Python stubs the tests use)
  libgrpc++-dev protobuf-compiler-grpc
  # gRPC's TLS (--grpc-use-ssl): vramd checks the certificate files with OpenSSL itself
  libssl-dev
  # HTTP request and response compression
  zlib1g-dev
  libspdlog-dev libfmt-dev libcli11-dev libopenblas-dev
  # the pytorch backend (CPU LibTorch)
  libtorch-dev
  # the python backend (embedded CPython; numpy's headers for its ledger of numpy arrays)
  python3-dev pybind11-dev python3-numpy
)
test_packages=(
  # the Python gRPC client the tests use, and the TorchScript models they make at test time
  python3-grpcio python3-protobuf python3-torch
  # tests and benchmarks (python3-yaml: scripts/validate_deploy.py, tests/deploy)
  libgtest-dev libgmock-dev libbenchmark-dev python3-pytest python3-pytest-xdist python3-yaml
  # the sanitizer build and the fuzz targets (clang's ASan, UBSan and libFuzzer runtimes)
  clang-14 libclang-rt-14-dev
  nginx-light wrk curl
  # the TLS tests make their certificates at test time
  openssl
)
packages=("${build_packages[@]}")
[ "${1:-}" = "--build-only" ] || packages+=("${test_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
