"""Building the qkv programs a benchmark script runs: only what is missing, unless --rebuild."""
import glob
import os
import subprocess
import sys

from bench import ROOT


def add_arguments(parser):
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"), help="the CMake build (default build/)")
    parser.add_argument("--rebuild", action="store_true",
                        help="run cmake --build first even if the programs exist")


def cmake_build(build_dir, targets, check=True):
    """Configures build_dir (Release) when it has no CMakeCache.txt (a failure raises),
    then builds `targets`. check: a failed build raises too, else -> whether it succeeded.
    CMake's output goes to stderr, so that stdout holds only the results."""
    if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
        subprocess.run(["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release"], check=True,
                       stdout=sys.stderr)
    built = subprocess.run(["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 2), "--target", *targets],
                           check=check, stdout=sys.stderr)
    return built.returncode == 0


def ensure_programs(build_dir, programs, rebuild, check=True):
    """programs: {CMake target: the file it makes, a path (or glob pattern) under build_dir}.
    Builds every target when one of the files is missing, or when rebuild.
    -> {target: the file's path}. Where check is False a failed build gives None for every
    target (what is left in build_dir may be stale); else it raises."""
    def find():
        found = {}
        for target, pattern in programs.items():
            matches = sorted(glob.glob(os.path.join(build_dir, pattern)))
            found[target] = matches[0] if matches else None
        return found

    found = find()
    if rebuild or None in found.values():
        if not cmake_build(build_dir, list(programs), check=check):
            return {target: None for target in programs}
        found = find()
    return found
