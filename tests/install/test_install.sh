#!/usr/bin/env bash
# test_install.sh BUILD_DIR CONSUMER_DIR CMAKE CXX VERSION
# Installs BUILD_DIR into a temporary prefix and builds CONSUMER_DIR/main.cpp against it four
# ways: CMake package with qkv::qkv and with qkv::qkv_static, pkg-config shared and --static.
# Each program must run and pass; the shared ones must load libqkv.so from the prefix and
# the static ones must not load it at all.
set -euo pipefail
build=$1 consumer=$2 cmake=$3 cxx=$4 version=$5

tmp=$(mktemp -d "${TMPDIR:-/tmp}/qkv-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "install test: FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || {
  cat "$tmp/install.log" >&2
  fail "cmake --install failed (build the default target first: cmake --build $build)"
}

# What must be there, and nothing of src/, tests/, bench/ or python/.
config=$(find "$prefix" -path '*/cmake/qkv/qkvConfig.cmake' -print -quit)
[[ -n $config ]] || fail "no lib*/cmake/qkv/qkvConfig.cmake under the prefix"
libdir=$(dirname "$(dirname "$(dirname "$config")")")
for f in include/qkv/qkv.h include/qkv/attention.h include/qkv/nn/transformer.h \
         include/qkv/version.h bin/qkv; do
  [[ -f $prefix/$f ]] || fail "$f was not installed"
done
for f in libqkv.a libqkv.so cmake/qkv/qkvConfigVersion.cmake cmake/qkv/qkvTargets.cmake \
         pkgconfig/qkv.pc; do
  [[ -e $libdir/$f ]] || fail "${libdir#"$prefix"/}/$f was not installed"
done
[[ ! -e $prefix/include/qkv/version.h.in ]] || fail "include/qkv/version.h.in was installed"
stray=$(cd "$prefix" && find . -type f ! -path './include/qkv/*' ! -path './bin/qkv' \
        ! -path "./${libdir#"$prefix"/}/*")
[[ -z $stray ]] || fail "unexpected files installed: $stray"
stray=$(cd "$prefix" && find . -name '*python*' -o -name '*test*' -o -name '*bench*' \
        -o -name 'libqkv_cuda*')
[[ -z $stray ]] || fail "test, bench or Python files installed: $stray"
cli=$("$prefix/bin/qkv" version) || fail "bin/qkv version failed"
grep -Fqx "qkv $version" <<<"$cli" || fail "bin/qkv version does not print 'qkv $version': $cli"

# run NAME BINARY SHARED|STATIC: runs it, then checks which libqkv it loaded (ldd lists what
# the dynamic loader resolves, with RUNPATH and LD_LIBRARY_PATH as the run had them).
run() {
  local name=$1 binary=$2 kind=$3 out loaded
  out=$("$binary" 2>&1) || { echo "$out" >&2; fail "$name: the program failed"; }
  # shellcheck disable=SC2001  # a prefix on every line
  sed "s/^/   $name: /" <<<"$out"
  grep -Fqx "qkv $version ($version)" <<<"$out" \
    || fail "$name: qkv::kVersion is not $version"
  loaded=$(ldd "$binary" | awk '/libqkv\.so/ {print $3}')
  if [[ $kind == SHARED ]]; then
    readelf -d "$binary" | grep -q 'NEEDED.*\[libqkv\.so' || fail "$name: no NEEDED libqkv.so"
    [[ $loaded == "$libdir"/libqkv.so* ]] || fail "$name: loads libqkv.so from '$loaded', not $libdir"
  else
    [[ -z $loaded ]] || fail "$name: linked statically but loads $loaded"
  fi
}

for target in qkv::qkv qkv::qkv_static; do
  name=cmake-${target#qkv::}
  step "$name: find_package(qkv), target_link_libraries($target)"
  # No package registry: the prefix is the only place qkv may come from. The static one is
  # linked whole (consumer/CMakeLists.txt), so every dependency it declares is exercised.
  kind=SHARED whole=OFF
  [[ $target == qkv::qkv_static ]] && kind=STATIC whole=ON
  "$cmake" -S "$consumer" -B "$tmp/$name" -DCMAKE_PREFIX_PATH="$prefix" -DQKV_TARGET="$target" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DQKV_WHOLE_ARCHIVE=$whole \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$tmp/$name.log" 2>&1 \
    || { cat "$tmp/$name.log" >&2; fail "$name: configuring the consumer failed"; }
  grep -q "from $libdir/cmake/qkv" "$tmp/$name.log" || fail "$name: qkv was not found in the prefix"
  "$cmake" --build "$tmp/$name" >>"$tmp/$name.log" 2>&1 \
    || { cat "$tmp/$name.log" >&2; fail "$name: building the consumer failed"; }
  run "$name" "$tmp/$name/consumer" $kind
done

command -v pkg-config >/dev/null || fail "pkg-config not found (Debian: apt-get install pkg-config)"
export PKG_CONFIG_PATH=$libdir/pkgconfig
step "pkg-config shared: $cxx main.cpp \$(pkg-config --cflags --libs qkv)"
flags=$(pkg-config --cflags --libs qkv) || fail "pkg-config --cflags --libs qkv failed"
# shellcheck disable=SC2086  # the flags are words
"$cxx" "$consumer/main.cpp" $flags -o "$tmp/pkgconfig-shared" || fail "pkg-config shared: build failed"
LD_LIBRARY_PATH=$libdir run pkgconfig-shared "$tmp/pkgconfig-shared" SHARED

# --static adds libqkv.a's own dependencies; -l:libqkv.a makes the linker take the archive,
# which it would pass over for libqkv.so (the README says the same). Whole, as above: then
# the link fails unless every dependency of every member is on the line.
step "pkg-config static: $cxx main.cpp \$(pkg-config --cflags --libs --static qkv), whole libqkv.a"
flags=$(pkg-config --cflags --libs --static qkv) || fail "pkg-config --static failed"
[[ " $flags " == *" -lqkv "* ]] || fail "pkg-config --libs gave no -lqkv: $flags"
flags=" $flags "
flags=${flags/ -lqkv / -Wl,--whole-archive -l:libqkv.a -Wl,--no-whole-archive }
# shellcheck disable=SC2086
"$cxx" "$consumer/main.cpp" $flags -o "$tmp/pkgconfig-static" || fail "pkg-config static: build failed"
run pkgconfig-static "$tmp/pkgconfig-static" STATIC

echo "install test: ok (prefix layout, CMake package shared and static, pkg-config shared and static)"
