#!/usr/bin/env bash
# The core and attention layers on a CPU that is not x86-64: cross-built for aarch64 with
# Debian's g++-aarch64-linux-gnu (tests/cross/CMakeLists.txt) and their unit tests run
# under qemu-aarch64-static. There the fused kernel is the portable variant, and every
# fast-against-reference test runs on it. scripts/setup.sh test installs both tools.
#   usage: test_aarch64.sh BUILD_DIR
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
build=$1
for tool in aarch64-linux-gnu-g++ qemu-aarch64-static; do
  command -v "$tool" >/dev/null 2>&1 || { echo "test_aarch64: $tool is missing (scripts/setup.sh test installs it)" >&2; exit 1; }
done

cmake -S "$here" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$here/aarch64.cmake" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target qkv_unit_tests
binary=$build/qkv_unit_tests
# A native binary by mistake would pass without testing anything new.
machine=$(readelf -h "$binary" | sed -n 's/^ *Machine: *//p')
[[ "$machine" == AArch64 ]] || { echo "test_aarch64: $binary is built for '$machine', not AArch64" >&2; exit 1; }
qemu-aarch64-static -L /usr/aarch64-linux-gnu "$binary" --gtest_brief=1
