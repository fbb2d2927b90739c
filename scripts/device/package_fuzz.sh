#!/usr/bin/env bash
# Packs the libFuzzer targets (scripts/fuzz.sh build, in build-fuzz/) for campaigns on the GPU
# machine, whose 16 cores run one campaign in minutes where this machine's spare core takes hours:
#   fuzz-dist/fuzz.tar.gz   bin/<target>_fuzzer (debug info stripped: ASan still names functions,
#                           and a failure is reproduced here with its saved input) and lib/ (the
#                           shared libraries they need that are not glibc's or OpenBLAS's, as
#                           package.sh decides)
# Compressed, because six 16 MB binaries would crowd the 64 MiB the device tool carries.
# Then, on the device: scripts/device/fuzz.sh (carry ["fuzz-dist"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
VRAMD_BUILD_LOCK="${VRAMD_BUILD_LOCK:-}" bash scripts/fuzz.sh build
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for f in build-fuzz/fuzz/*_fuzzer; do
  objcopy --strip-debug "$f" "$stage/bin/$(basename "$f")"
done
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | grep -v -E '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*)\.so|/lib(openblas|gfortran|quadmath)[^/]*\.so' \
  | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
git rev-parse HEAD > "$stage/commit"
rm -rf fuzz-dist
mkdir -p fuzz-dist
tar -C "$stage" -czf fuzz-dist/fuzz.tar.gz .
echo "fuzz-dist: $(ls "$stage/bin" | wc -l) targets, $(ls "$stage/lib" | wc -l) libraries, $(du -sh fuzz-dist | cut -f1) (commit $(cut -c1-7 "$stage/commit"))"
