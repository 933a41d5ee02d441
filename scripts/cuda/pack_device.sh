#!/usr/bin/env bash
# Packs what scripts/cuda/device_check.sh needs into .device/ (untracked), after a build:
#   bash scripts/cuda/pack_device.sh [build-dir]     (default: build)
# The binaries (qkv_cuda_tests, qkv, libqkv_cuda.so; the CUDA runtime is linked statically)
# and libs.tar.xz: the shared libraries they load that a stock Ubuntu 24.04 does not have
# (oneDNN, ICU, OpenCL, ...), found with ldd. glibc, libstdc++ and the like stay out: the
# GPU machine's own are newer, and mixing a foreign libc in breaks the loader.
set -euo pipefail
BUILD=${1:-build}
DEV=.device
rm -rf "$DEV"
mkdir -p "$DEV"
# The binaries must be newer than every source: a stale one (say build/qkv when only the
# libraries were rebuilt) would time code that is gone. Build them with
#   cmake --build build --target qkv_cli qkv_cuda_tests qkv_cuda_capi
for f in qkv_cuda_tests qkv libqkv_cuda.so; do
  # The build's own output first: build/python/qkv/ keeps a copy of libqkv_cuda.so that is
  # only refreshed when the Python module is rebuilt, and find's order is the directory's.
  src=$BUILD/$f
  [ -f "$src" ] || src=$(find "$BUILD" -maxdepth 3 -name "$f" -type f | head -1)
  [ -n "$src" ] || { echo "pack_device: $f not found under $BUILD (build first)" >&2; exit 1; }
  case $f in qkv) dirs="src include tools" ;; qkv_cuda_tests) dirs="src include tests" ;; *) dirs="src include" ;; esac
  newer=$(find $dirs -type f -newer "$src" | head -3)
  [ -z "$newer" ] || { echo "pack_device: $src is older than $(echo $newer | tr '\n' ' ')(rebuild first)" >&2; exit 1; }
  cp "$src" "$DEV/$f"
  strip --strip-debug "$DEV/$f" 2>/dev/null || true
done
# Libraries of the system's base (present on any Ubuntu): not packed.
BASE='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+\.so|libgcc_s\.so|libz\.so|liblzma\.so|libzstd\.so|libbz2\.so)'
mkdir -p "$DEV/libs"
for f in "$DEV"/qkv_cuda_tests "$DEV"/qkv "$DEV"/libqkv_cuda.so; do
  ldd "$f" | awk '/=> \// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! [[ $name =~ $BASE ]]; then cp -L "$path" "$DEV/libs/$name"; fi
done
echo "packed libraries: $(ls "$DEV/libs" | tr '\n' ' ')"
tar -cJf "$DEV/libs.tar.xz" -C "$DEV/libs" .
rm -rf "$DEV/libs"
grep -qx '/.device/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null ||
  echo '/.device/' >> "$(git rev-parse --git-common-dir)/info/exclude"
du -sh "$DEV"
ls -la "$DEV"
