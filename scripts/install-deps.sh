#!/usr/bin/env bash
# Installs every build, test and benchmark dependency of vramd from Debian bookworm's packages.
# Run as root (or with sudo). Safe to run again: apt skips what is already there.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
packages=(
  # build
  build-essential cmake ninja-build pkg-config
  # libraries (see docs/dependencies in README)
  protobuf-compiler libprotobuf-dev libboost-dev rapidjson-dev
  # the gRPC front end, and the Python client its tests use
  libgrpc++-dev protobuf-compiler-grpc python3-grpcio python3-protobuf
  # HTTP request and response compression
  zlib1g-dev
  libspdlog-dev libfmt-dev libcli11-dev libopenblas-dev
  # the pytorch backend (CPU LibTorch) and the TorchScript models its tests make at test time
  libtorch-dev python3-torch
  # the python backend (embedded CPython)
  python3-dev pybind11-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev python3-pytest python3-pytest-xdist python3-numpy
  # the sanitizer build and the fuzz targets (clang's ASan, UBSan and libFuzzer runtimes)
  clang-14 libclang-rt-14-dev
  nginx-light wrk curl
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
