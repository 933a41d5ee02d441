#!/usr/bin/env bash
# Installs the Debian packages qkv needs, when they are missing.
#   scripts/setup.sh build   what `make run` needs (compiler, CMake, libraries)
#   scripts/setup.sh test    that plus the test oracle (PyTorch, pytest) and tools (Chromium)
# As root it runs apt-get; otherwise it stops and prints the command to run.
set -euo pipefail

# pkg-config: qkv.pc, the installed library's link line (tests/install).
# zlib1g-dev, libpng-dev: the library reads gzipped IDX files (Fashion-MNIST) and PNG images.
# ccache: the compilers' launcher (CMakeLists.txt, QKV_CCACHE), so a second copy of the tree
# built at the same depth (the pip test's) reuses the objects of the first.
build_packages=(ccache cmake g++ make pkg-config libgtest-dev nlohmann-json3-dev libcli11-dev libdnnl-dev libicu-dev
                libssl-dev zlib1g-dev libpng-dev pybind11-dev python3-dev python3-numpy)
# clang + its runtimes: libFuzzer targets; npm: test vocabularies from npm packages;
# chromium: headless, draws the attention page in tests/viz/test_browser.sh;
# g++-aarch64-linux-gnu + qemu-user-static: the portable kernel on aarch64 (tests/cross);
# python3-venv, -pip, -build, -wheel, -setuptools: pip install and a wheel of the Python
# package in a virtual environment, offline (tests/python/test_pip_install.sh).
# r-base-core + r-cran-dslabs: the MovieLens ratings of data.movielens and the recommender tests.
# dataset-fashion-mnist: the Fashion-MNIST images and labels of data.fashion_mnist.
# python3-matplotlib: the plots of BENCHMARKS.md (scripts/benchmarks_md.py --check).
# openmpi-bin + libopenmpi-dev: the distributed layer (QKV_MPI) and its tests under mpirun.
test_packages=(openmpi-bin libopenmpi-dev python3-torch python3-pytest clang libclang-rt-14-dev chromium g++-aarch64-linux-gnu
               qemu-user-static python3-venv python3-pip python3-build python3-wheel python3-setuptools
               r-base-core r-cran-dslabs dataset-fashion-mnist python3-matplotlib)

case "${1:-build}" in
  build) wanted=("${build_packages[@]}") ;;
  test) wanted=("${build_packages[@]}" "${test_packages[@]}") ;;
  *) echo "usage: $0 build|test" >&2; exit 2 ;;
esac

missing=()
for package in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
# npm may come with the machine's own Node.js rather than a Debian package.
if [[ "${1:-build}" == test ]] && ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "qkv: missing Debian packages: ${missing[*]}" >&2
  echo "qkv: install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "qkv: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
