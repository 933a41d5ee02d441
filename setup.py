"""The Python package qkv, built by CMake: pyproject.toml names setuptools as the backend.

    pip install --no-build-isolation .             # into the active (virtual) environment
    /usr/bin/python3 -m build --no-isolation --wheel   # a wheel in dist/

CMake builds the target _qkv, which lays the package out as `make build` does in
build/python/qkv (the extension, the Python files, libqkv_cuda.so with CUDA;
python/CMakeLists.txt), and build_ext copies the files CMake lists for it into the wheel.
setuptools builds under build-python/ (its default, build/, is the Makefile's CMake build
directory), CMake under build-python/temp.<platform>-<python>/cmake.

The environment, as scikit-build reads it:
  CMAKE_ARGS                  more CMake arguments, e.g. "-DQKV_CUDA=OFF"; the project's
                              defaults hold otherwise (QKV_CUDA=AUTO: the CUDA kernels when
                              nvcc is found)
  CMAKE_BUILD_PARALLEL_LEVEL  build jobs (default: setuptools' --parallel, else every CPU)
  QKV_CMAKE_BUILD_DIR         build in this CMake build directory instead; one that is
                              configured already (build/ of `make build`, say) is built as
                              it is, with CMAKE_ARGS if given, else configured as above
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import ExecError, FileError, SetupError

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_BASE = "build-python"


def project_version():
    """The version of `project(qkv VERSION X.Y.Z ...)` in CMakeLists.txt, the one place it is
    written (the C++ header, the CLI and the CMake package take it from there too)."""
    path = os.path.join(ROOT, "CMakeLists.txt")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"^\s*project\s*\(\s*qkv\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)(?=[\s)])", text,
                      re.MULTILINE | re.IGNORECASE)
    if match is None:
        raise SetupError(f"{path}: no line 'project(qkv VERSION X.Y.Z ...)' to take the "
                         "package version from")
    return match.group(1)


class CMakeExtension(Extension):
    """The extension qkv._qkv; CMake knows its sources."""

    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if self.inplace:
            raise SetupError("qkv: in-place builds (pip install -e) are not supported; "
                             "use `make build` and PYTHONPATH=build/python")
        build_dir, reuse = self._cmake_build_dir()
        cmake_args = shlex.split(os.environ.get("CMAKE_ARGS", ""))
        if not reuse or cmake_args:
            defaults = [] if reuse else [
                "-DCMAKE_BUILD_TYPE=Release",
                "-DQKV_BUILD_TESTS=OFF",
                "-DQKV_SANITIZER_TESTS=OFF",
                "-DQKV_BUILD_PYTHON=ON",
                # The interpreter pip runs, a virtual environment's included: the module is
                # built for its version and ABI.
                f"-DPython_EXECUTABLE={sys.executable}",
            ]
            self._run(["cmake", "-S", ROOT, "-B", build_dir, *defaults, *cmake_args])
        build = ["cmake", "--build", build_dir, "--config", "Release", "--target", "_qkv"]
        if "CMAKE_BUILD_PARALLEL_LEVEL" not in os.environ:
            build += ["--parallel", str(self.parallel or os.cpu_count() or 1)]
        self._run(build)
        self._copy_package(build_dir, ext)

    def _cmake_build_dir(self):
        """(directory, whether it is a configured build to take as it is)."""
        given = os.environ.get("QKV_CMAKE_BUILD_DIR")
        if given:
            given = os.path.abspath(given)
            cache = os.path.join(given, "CMakeCache.txt")
            if not os.path.exists(cache):
                return given, False
            # The package would be that source tree's, whatever this one holds.
            with open(cache, encoding="utf-8", errors="replace") as f:
                match = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", f.read(), re.MULTILINE)
            if match is None or os.path.realpath(match.group(1)) != os.path.realpath(ROOT):
                source = match.group(1) if match else "an unknown source tree"
                raise SetupError(f"qkv: QKV_CMAKE_BUILD_DIR={given} is a build of {source}, "
                                 f"not of {ROOT}")
            return given, True
        return os.path.abspath(os.path.join(self.build_temp, "cmake")), False

    def _copy_package(self, build_dir, ext):
        """Copies the files python/CMakeLists.txt lists in python/qkv-package-files.txt (not
        the whole folder: one that an earlier configuration left there is not shipped)."""
        package_dir = os.path.join(build_dir, "python", "qkv")
        listing = os.path.join(build_dir, "python", "qkv-package-files.txt")
        if not os.path.exists(listing):
            raise FileError(f"qkv: {listing} is missing: {build_dir} was configured by an "
                            "older python/CMakeLists.txt; run cmake on it again")
        with open(listing, encoding="utf-8") as f:
            names = [line.strip() for line in f if line.strip()]

        # The extension must be the one this interpreter imports (a reused build directory
        # may have been made for another Python).
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        if "_qkv" + suffix not in names:
            built = [n for n in names if n.startswith("_qkv")]
            raise SetupError(f"qkv: {build_dir} builds {built}, but {sys.executable} imports "
                             f"_qkv{suffix}; build for this interpreter (-DPython_EXECUTABLE)")
        # Every Python file of the source package must be in CMake's list, or the installed
        # package would lack it while build/python (from the same list) lacks it too.
        sources = sorted(n for n in os.listdir(os.path.join(ROOT, "python", "qkv"))
                         if n.endswith(".py"))
        unlisted = [n for n in sources if n not in names]
        if unlisted:
            raise SetupError(f"qkv: python/qkv/{', '.join(unlisted)} not in QKV_PYTHON_SOURCES "
                             "of python/CMakeLists.txt, so not in the package")

        target_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(target_dir, exist_ok=True)
        for name in names:
            source = os.path.join(package_dir, name)
            if not os.path.isfile(source):
                raise FileError(f"qkv: {source} was not built")
            shutil.copy2(source, os.path.join(target_dir, name))

    @staticmethod
    def _run(command):
        print("qkv:", " ".join(command), flush=True)
        try:
            subprocess.run(command, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            raise ExecError(f"qkv: {' '.join(command)}: {e}") from e


# egg_info beside the build, not in the source tree; it must exist before egg_info runs.
os.makedirs(BUILD_BASE, exist_ok=True)

setup(
    version=project_version(),
    # The package is CMake's output (build_ext copies it), so nothing for build_py to find.
    packages=[],
    py_modules=[],
    ext_modules=[CMakeExtension("qkv._qkv")],
    cmdclass={"build_ext": CMakeBuild},
    options={
        "build": {"build_base": BUILD_BASE},
        "egg_info": {"egg_base": BUILD_BASE},
    },
    zip_safe=False,
)
