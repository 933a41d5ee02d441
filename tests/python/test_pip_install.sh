#!/usr/bin/env bash
# python.pip_install: the package as docs/install.md installs it ("Python package").
#   test_pip_install.sh SOURCE_DIR VERSION [QKV_CLI]
# VERSION is CMake's PROJECT_VERSION (the CMake package's version); QKV_CLI, when given, is
# build/qkv, whose `qkv version` must say the same.
#
#  1. copies the source (git's files and the untracked ones it does not ignore): pip builds
#     in place (build-python/, and CMake in build/ below), so the tree itself is never
#     written to, and the build directory is a new one whatever an earlier `pip install .`
#     left there;
#  2. `pip install --no-build-isolation --no-index .` into a fresh
#     `/usr/bin/python3 -m venv --system-site-packages` (offline: setuptools, wheel and
#     numpy come from Debian's site packages) -- CMake configures a new build directory and
#     builds it; at the copy's build/ (QKV_CMAKE_BUILD_DIR), the depth of the tree's own
#     build/, so that with ccache (CMakeLists.txt: QKV_CCACHE) the compiles the tree's own
#     build made are taken from the cache rather than done again;
#  3. `python3 -m build --no-isolation --wheel`, reusing step 2's CMake build directory
#     (QKV_CMAKE_BUILD_DIR; a second build from nothing would double the time, see
#     tests/python/CMakeLists.txt), installed into a second fresh venv;
#  4. `python3 -m build --no-isolation --sdist`, whose contents must configure with CMake;
#  5. deletes the source copy, build directories included, and then in each venv, from
#     another directory: qkv comes from the venv, causal attention matches a NumPy naive
#     one, and qkv.__version__ == importlib.metadata.version("qkv") == VERSION.
# QKV_PIP_TEST_CUDA=ON|OFF builds the package with or without the CUDA kernels and checks
# that libqkv_cuda.so is in it and loads, or is not in it (tests/python/CMakeLists.txt
# passes the build's own choice); more CMake arguments pass through CMAKE_ARGS. ccache is
# used when it is installed (CCACHE_DISABLE=1 turns it off: then step 2 compiles everything).
set -euo pipefail

[[ $# -ge 2 ]] || { echo "usage: $0 SOURCE_DIR VERSION [QKV_CLI]" >&2; exit 2; }
source_dir=$(cd "$1" && pwd -P)
version=$2
cli=${3:-}
python=/usr/bin/python3

fail() { echo "FAIL: $*" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/qkv-pip.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# No PYTHONPATH from the caller (build/python would shadow the installed package); no pip
# cache or version check (offline, and nothing written to $HOME).
unset PYTHONPATH
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
cuda=${QKV_PIP_TEST_CUDA:-}
[[ -z $cuda || $cuda == ON || $cuda == OFF ]] || fail "QKV_PIP_TEST_CUDA is '$cuda', not ON or OFF"
[[ -z $cuda ]] || export CMAKE_ARGS="${CMAKE_ARGS:-} -DQKV_CUDA=$cuda"
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

# 1. The copy: git's list where there is one (a file that .gitignore hides is missing here
# as in a clone), else everything but build directories.
copy=$tmp/src
mkdir "$copy"
if git -C "$source_dir" rev-parse --show-toplevel >/dev/null 2>&1 &&
   [[ $(git -C "$source_dir" rev-parse --show-toplevel) == "$source_dir" ]]; then
  (cd "$source_dir" && git ls-files -z --cached --others --exclude-standard |
     while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
     tar --null -T - -cf -) | tar -C "$copy" -xf -
else
  tar -C "$source_dir" --exclude='./build*' --exclude=./dist --exclude=./.git -cf - . |
    tar -C "$copy" -xf -
fi
[[ -f $copy/setup.py && -f $copy/pyproject.toml ]] || fail "no setup.py and pyproject.toml in $copy"

# 2. pip install, from nothing.
"$python" -m venv --system-site-packages "$tmp/venv-pip"
start=$(date +%s)
cmake_dir=$copy/build
(cd "$copy" && QKV_CMAKE_BUILD_DIR=$cmake_dir "$tmp/venv-pip/bin/python" -m pip install \
   --no-build-isolation --no-index .) || fail "pip install --no-build-isolation --no-index . failed"
echo "pip install (a new CMake build directory): $(elapsed "$start")"
[[ -f $cmake_dir/CMakeCache.txt ]] || fail "no CMake build directory at $cmake_dir"

# 3. The wheel, in a second venv.
start=$(date +%s)
(cd "$copy" && QKV_CMAKE_BUILD_DIR=$cmake_dir "$python" -m build --no-isolation --wheel \
   --outdir "$tmp/dist" .) || fail "python3 -m build --wheel failed"
echo "wheel (CMake build directory reused): $(elapsed "$start")"
wheels=("$tmp"/dist/qkv-"$version"-*.whl)
[[ ${#wheels[@]} -eq 1 && -f ${wheels[0]} ]] ||
  fail "no one wheel qkv-$version-*.whl in $tmp/dist: $(ls "$tmp/dist")"
"$python" -m venv --system-site-packages "$tmp/venv-wheel"
"$tmp/venv-wheel/bin/python" -m pip install --no-index "${wheels[0]}" ||
  fail "pip install ${wheels[0]} failed"

# 4. The sdist: built, and its contents configure (building it too would take as long as
# step 2 again).
start=$(date +%s)
(cd "$copy" && "$python" -m build --no-isolation --sdist --outdir "$tmp/dist" .) \
  || fail "python3 -m build --sdist failed"
mkdir "$tmp/sdist"
tar -C "$tmp/sdist" -xzf "$tmp/dist/qkv-$version.tar.gz"
sdist=$tmp/sdist/qkv-$version
cmake -S "$sdist" -B "$tmp/sdist-build" -DQKV_BUILD_TESTS=OFF -DQKV_CUDA=OFF \
  -DPython_EXECUTABLE="$python" >"$tmp/sdist-configure.log" 2>&1 ||
  { cat "$tmp/sdist-configure.log" >&2; fail "the sdist does not configure"; }
echo "sdist (built and configured): $(elapsed "$start")"

# The source file list of the package, before the copy goes.
python_files=()
for f in "$copy"/python/qkv/*.py; do python_files+=("${f##*/}"); done

# 5. Nothing of the build may be needed at run time.
rm -rf "$copy"
mkdir "$tmp/elsewhere"
for venv in "$tmp/venv-pip" "$tmp/venv-wheel"; do
  echo "checking $venv"
  # RUNPATH/RPATH of the installed libraries must not name the (deleted) build tree.
  while IFS= read -r -d '' so; do
    if readelf -d "$so" | grep -E 'R(UN)?PATH' | grep -F "$tmp"; then
      fail "$so has a run path into the build tree"
    fi
  done < <(find "$venv/lib" -path '*/qkv/*.so' -print0)
  (cd "$tmp/elsewhere" && "$venv/bin/python" - "$venv" "$version" "$cuda" "${python_files[@]}") <<'EOF' \
    || fail "the package installed in $venv does not work"
import importlib.metadata
import os
import sys

import numpy as np

import qkv

venv, version, cuda, python_files = os.path.realpath(sys.argv[1]), *sys.argv[2:4], sys.argv[4:]

assert qkv.__file__ is not None, f"no qkv/__init__.py (a namespace package: {list(qkv.__path__)})"
package = os.path.dirname(os.path.realpath(qkv.__file__))
assert package.startswith(venv + os.sep), f"qkv was imported from {package}, not from {venv}"
extension = os.path.realpath(qkv._qkv.__file__)
assert os.path.dirname(extension) == package, f"qkv._qkv is {extension}, not in {package}"
missing = [f for f in python_files if not os.path.isfile(os.path.join(package, f))]
assert not missing, f"{package} lacks python/qkv/{missing}"

# With CUDA, libqkv_cuda.so is in the package, and qkv.cuda loads it (a machine without a
# GPU then says why in the reason; a library that does not load says "qkv.cuda: ...").
cuda_library = os.path.join(package, "libqkv_cuda.so")
if cuda:
    assert os.path.isfile(cuda_library) == (cuda == "ON"), (
        f"QKV_CUDA={cuda}, but libqkv_cuda.so is {'not ' if cuda == 'ON' else ''}in {package}")
if os.path.isfile(cuda_library):
    import qkv.cuda

    assert qkv.cuda.library_path() == cuda_library, qkv.cuda.library_path()
    usable, why = qkv.cuda.available()
    assert usable or not why.startswith("qkv.cuda:"), why
    print(f"libqkv_cuda.so loads; GPU: {usable} {why}")

installed = importlib.metadata.version("qkv")
assert qkv.__version__ == installed == version, (
    f"qkv.__version__ {qkv.__version__!r}, metadata {installed!r}, CMake {version!r}")

# Causal attention against the textbook formula in float64. qkv computes in float32: a
# score is a D-term dot product and a row of output an Lk-term weighted sum, so the error
# stays within a few (D + Lk) float32 roundings of max|v| (factor 4: exp and the division).
rng = np.random.default_rng(0)
B, H, L, D = 2, 3, 17, 8
q, k, v = (rng.standard_normal((B, H, L, D), dtype=np.float32) for _ in range(3))
out = qkv.scaled_dot_product_attention(q, k, v, is_causal=True)
scores = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) / np.sqrt(D)
scores[..., ~np.tril(np.ones((L, L), dtype=bool))] = -np.inf
weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
weights /= weights.sum(axis=-1, keepdims=True)
expected = weights @ v.astype(np.float64)
assert out.shape == expected.shape and out.dtype == np.float32, (out.shape, out.dtype)
error = np.abs(out - expected)
tolerance = 4 * (D + L) * np.finfo(np.float32).eps * np.abs(v).max()
assert np.isfinite(out).all() and error.max() <= tolerance, (
    f"max error {error.max():.3g} at {np.unravel_index(error.argmax(), error.shape)}, "
    f"tolerance {tolerance:.3g}")
print(f"ok: qkv {qkv.__version__} from {package}; causal attention max error {error.max():.2g}")
EOF
done

if [[ -n $cli ]]; then
  cli_version=$("$cli" version | head -n 1)
  [[ $cli_version == "qkv $version" ]] ||
    fail "'$cli version' says '$cli_version', not 'qkv $version'"
fi
echo "python.pip_install: ok"
