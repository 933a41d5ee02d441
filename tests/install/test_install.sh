#!/usr/bin/env bash
# test_install.sh BUILD_DIR CONSUMER_DIR CMAKE CXX VERSION
# Installs BUILD_DIR into a temporary prefix and builds the programs of CONSUMER_DIR against
# it: main.cpp (the engine alone) through qkv::attention, qkv::attention_static and
# qkv-attention.pc (shared and --static); layers_main.cpp (nn::linear, a layer above the
# engine) through qkv::qkv, qkv::qkv_static and qkv.pc. Each program must run and pass; the
# shared ones must load their libraries from the prefix (the engine's program libqkv.so not
# at all), the static ones none. layers_main.cpp against the engine alone must fail to link.
# The installed engine library's NEEDED entries are OpenMP, the C and C++ runtimes and
# nothing else.
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
for f in libqkv.a libqkv.so libqkv_attention.a libqkv_attention.so cmake/qkv/qkvConfigVersion.cmake \
         cmake/qkv/qkvTargets.cmake pkgconfig/qkv.pc pkgconfig/qkv-attention.pc; do
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

# The engine's shared library: OpenMP, the C and C++ runtimes (and what the CUDA runtime,
# linked statically, needs of glibc), nothing of oneDNN, ICU, zlib, libpng, OpenSSL or MPI.
needed=$(readelf -d "$libdir/libqkv_attention.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
step "libqkv_attention.so NEEDED: $(echo $needed)"
for library in $needed; do
  [[ $library =~ ^(libgomp|libstdc\+\+|libm|libgcc_s|libc|libdl|librt|libpthread)\.so(\.[0-9]+)*$ ||
     $library =~ ^ld-linux ]] || fail "libqkv_attention.so needs $library (the engine needs only OpenMP)"
done
needed=$(readelf -d "$libdir/libqkv.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
grep -q '^libqkv_attention\.so' <<<"$needed" || fail "libqkv.so does not need libqkv_attention.so"
! grep -Eq '^lib(z|png)' <<<"$needed" || fail "libqkv.so needs zlib or libpng (only the applications do): $needed"

# run NAME BINARY SHARED|STATIC [LIBRARIES]: runs it, then checks which qkv libraries it
# loaded (ldd lists what the dynamic loader resolves, with RUNPATH and LD_LIBRARY_PATH as the
# run had them): SHARED, exactly LIBRARIES (default "libqkv_attention libqkv"), each from
# the prefix; STATIC, none.
run() {
  local name=$1 binary=$2 kind=$3 wanted=${4:-libqkv_attention libqkv} out loaded library path
  out=$("$binary" 2>&1) || { echo "$out" >&2; fail "$name: the program failed"; }
  # shellcheck disable=SC2001  # a prefix on every line
  sed "s/^/   $name: /" <<<"$out"
  grep -Fqx "qkv $version ($version)" <<<"$out" \
    || fail "$name: qkv::kVersion is not $version"
  loaded=$(ldd "$binary" | awk '/libqkv(_attention)?\.so/ {print $1 " " $3}')
  if [[ $kind == SHARED ]]; then
    for library in $wanted; do
      path=$(awk -v l="$library.so" 'index($1, l) == 1 {print $2}' <<<"$loaded")
      [[ $path == "$libdir/$library.so"* ]] || fail "$name: loads $library.so from '$path', not $libdir"
    done
    [[ $(wc -l <<<"$loaded") -eq $(wc -w <<<"$wanted") ]] \
      || fail "$name: loads $(echo $loaded), wanted only $wanted"
  else
    [[ -z $loaded ]] || fail "$name: linked statically but loads $loaded"
  fi
}

for case in "qkv::attention main.cpp" "qkv::attention_static main.cpp" \
            "qkv::qkv layers_main.cpp" "qkv::qkv_static layers_main.cpp"; do
  read -r target program <<<"$case"
  name=cmake-${target#qkv::}
  step "$name: find_package(qkv), target_link_libraries($target), $program"
  # No package registry: the prefix is the only place qkv may come from. The static ones are
  # linked whole (consumer/CMakeLists.txt), so every dependency they declare is exercised.
  kind=SHARED whole=OFF wanted="libqkv_attention libqkv" components=""
  [[ $target == *_static ]] && kind=STATIC whole=ON
  [[ $target == qkv::attention ]] && wanted=libqkv_attention
  # The engine's consumers ask for the engine alone (COMPONENTS attention), which must not
  # look for the library's dependencies.
  [[ $target == qkv::attention* ]] && components=attention
  "$cmake" -S "$consumer" -B "$tmp/$name" -DCMAKE_PREFIX_PATH="$prefix" -DQKV_TARGET="$target" \
    -DQKV_PROGRAM="$program" -DQKV_COMPONENTS="$components" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_BUILD_TYPE=Release \
    -DQKV_WHOLE_ARCHIVE=$whole -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$tmp/$name.log" 2>&1 \
    || { cat "$tmp/$name.log" >&2; fail "$name: configuring the consumer failed"; }
  grep -q "from $libdir/cmake/qkv" "$tmp/$name.log" || fail "$name: qkv was not found in the prefix"
  if [[ $components == attention ]]; then
    grep -q "looked for ICU: , OpenSSL: , oneDNN: $" "$tmp/$name.log" \
      || fail "$name: find_package(qkv COMPONENTS attention) looked for the library's dependencies: $(grep 'looked for' "$tmp/$name.log")"
  else
    grep -q "looked for ICU: TRUE, OpenSSL: TRUE, oneDNN: /" "$tmp/$name.log" \
      || fail "$name: find_package(qkv) did not look for the library's dependencies: $(grep 'looked for' "$tmp/$name.log")"
  fi
  "$cmake" --build "$tmp/$name" -v >>"$tmp/$name.log" 2>&1 \
    || { cat "$tmp/$name.log" >&2; fail "$name: building the consumer failed"; }
  if [[ $target == qkv::attention* ]]; then
    # The engine's link line: qkv_attention and OpenMP (and the CUDA runtime where built).
    link=$(grep -E -- '-o consumer ' "$tmp/$name.log" | tail -1)
    ! grep -Eq 'dnnl|icu|crypto|libz|png|mpi|libqkv\.(a|so)' <<<"$link" \
      || fail "$name: the link line names more than the engine: $link"
  fi
  run "$name" "$tmp/$name/consumer" $kind "$wanted"
done

command -v pkg-config >/dev/null || fail "pkg-config not found (Debian: apt-get install pkg-config)"
export PKG_CONFIG_PATH=$libdir/pkgconfig
for case in "qkv-attention main.cpp libqkv_attention" "qkv layers_main.cpp libqkv_attention libqkv"; do
  read -r pc program wanted <<<"$case"
  step "pkg-config $pc shared: $cxx $program \$(pkg-config --cflags --libs $pc)"
  flags=$(pkg-config --cflags --libs "$pc") || fail "pkg-config --cflags --libs $pc failed"
  # shellcheck disable=SC2086  # the flags are words
  "$cxx" "$consumer/$program" $flags -o "$tmp/pkgconfig-$pc-shared" || fail "pkg-config $pc shared: build failed"
  LD_LIBRARY_PATH=$libdir run "pkgconfig-$pc-shared" "$tmp/pkgconfig-$pc-shared" SHARED "$wanted"

  # --static adds the archives' own dependencies; -l:lib*.a makes the linker take the
  # archives, which it would pass over for the .so files (docs/install.md says the same). Whole,
  # as above: then the link fails unless every dependency of every member is on the line.
  step "pkg-config $pc static: $cxx $program \$(pkg-config --cflags --libs --static $pc), whole archives"
  flags=$(pkg-config --cflags --libs --static "$pc") || fail "pkg-config --static $pc failed"
  flags=" $flags "
  for library in $wanted; do
    [[ $flags == *" -l${library#lib} "* ]] || fail "pkg-config --libs $pc gave no -l${library#lib}: $flags"
    flags=${flags/ -l${library#lib} / -Wl,--whole-archive -l:$library.a -Wl,--no-whole-archive }
  done
  if [[ $pc == qkv-attention ]]; then
    ! grep -Eq 'dnnl|icu|crypto|-lz|png|mpi' <<<"$flags" || fail "qkv-attention.pc names more than the engine: $flags"
  fi
  # shellcheck disable=SC2086
  "$cxx" "$consumer/$program" $flags -o "$tmp/pkgconfig-$pc-static" || fail "pkg-config $pc static: build failed"
  run "pkgconfig-$pc-static" "$tmp/pkgconfig-$pc-static" STATIC
done

# A program that calls a layer above the engine, linked against the engine alone, fails at
# link time, naming what it lacks.
step "layers_main.cpp against qkv-attention alone: the link must fail"
flags=$(pkg-config --cflags --libs qkv-attention)
# shellcheck disable=SC2086
if "$cxx" "$consumer/layers_main.cpp" $flags -o "$tmp/layers-on-engine" >"$tmp/layers-on-engine.log" 2>&1; then
  fail "layers_main.cpp linked against the engine alone"
fi
grep -q "undefined reference to .qkv::nn::linear" "$tmp/layers-on-engine.log" \
  || { cat "$tmp/layers-on-engine.log" >&2; fail "the failed link does not name qkv::nn::linear"; }

echo "install test: ok (prefix layout, engine NEEDED, CMake package and pkg-config for the engine and the library, shared and static)"
