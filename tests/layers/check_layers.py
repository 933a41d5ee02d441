#!/usr/bin/env python3
"""Checks that qkv's layers hold (tests/layers/CMakeLists.txt runs it as layers.*).

  check_layers.py includes ROOT         no file of a lower layer includes a header of a
                                        higher one, and no application another's
  check_layers.py libraries BUILD_DIR   the engine library needs only OpenMP and the C and
                                        C++ runtimes; no library holds a higher layer's code
  check_layers.py self-test             both checks catch what they must, on made-up trees

The layers, lowest first (each may include only its own headers and those below it):
  engine       src/core, src/attention and their public headers (ENGINE_HEADERS)
  library      src/io, text, viz, nn, distributed, models and every other include/qkv header
  application  apps/NAME: its own headers and the library's; never another application's
  its front    apps/NAME/cli_*.cpp (its `qkv` subcommand), python*.cpp (its binding) and
               tests/: the front ends' and tests' headers too, never another application's
Front ends (tools/, python/), tests and benchmarks may include anything.
"""
import os
import re
import subprocess
import sys
import tempfile

# include/qkv headers of the engine (qkv_attention); every other one belongs to the library.
ENGINE_HEADERS = {"attention.h", "cpu.h", "cuda.h", "dtype.h", "error.h", "memory.h", "rng.h",
                  "tensor.h", "threads.h", "version.h", "version.h.in"}
ENGINE, LIBRARY, APPLICATION, FRONT = 0, 1, 2, 3
LAYER_NAMES = {ENGINE: "the engine", LIBRARY: "the library", APPLICATION: "an application",
               FRONT: "an application's front end or test"}
LIBRARY_DIRS = {"io", "text", "viz", "nn", "distributed", "train", "models"}
# Headers of other projects a layer must not include: the engine needs OpenMP (and CUDA) only;
# zlib and libpng belong to the applications.
FORBIDDEN_SYSTEM = {
    ENGINE: re.compile(r"^(oneapi/|dnnl|unicode/|nlohmann/|openssl/|png\.h|zlib\.h|mpi\.h|CLI/|pybind11/)"),
    LIBRARY: re.compile(r"^(png\.h|zlib\.h|CLI/|pybind11/)"),
    APPLICATION: re.compile(r"^(CLI/|pybind11/)"),
    FRONT: re.compile(r"^$"),
}
SOURCE_SUFFIXES = (".h", ".cpp", ".inc", ".cuh", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(root, path):
    """(layer, application name or None) of a file of ROOT, or None outside the layers."""
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "include" and len(rel) >= 3 and rel[1] == "qkv":
        return (ENGINE if len(rel) == 3 and rel[2] in ENGINE_HEADERS else LIBRARY), None
    if rel[0] == "src" and len(rel) >= 3:
        if rel[1] in ("core", "attention"):
            return ENGINE, None
        if rel[1] in LIBRARY_DIRS:
            return LIBRARY, None
        return None
    if rel[0] == "apps" and len(rel) >= 3:
        front = rel[2] == "tests" or re.match(r"^(cli_|python)", rel[2])
        return (FRONT if front else APPLICATION), rel[1]
    return None


def check_includes(root):
    """Every violation, as 'file:line: message' strings."""
    problems = []
    include_dirs = [os.path.join(root, d) for d in ("include", "src", "apps")]
    front_dirs = [os.path.join(root, d) for d in ("tools/qkv", "python", "tests")]
    for top in ("include", "src", "apps"):
        for directory, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(directory, name)
                mine = layer_of(root, path)
                if mine is None:
                    continue
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as f:
                    lines = f.read().splitlines()
                for number, line in enumerate(lines, 1):
                    match = INCLUDE.match(line)
                    if not match:
                        continue
                    kind, header = match.groups()
                    if FORBIDDEN_SYSTEM[mine[0]].match(header):
                        problems.append(f"{rel}:{number}: {LAYER_NAMES[mine[0]]} includes <{header}>, "
                                        "a dependency of a higher layer")
                        continue
                    dirs = include_dirs + (front_dirs if mine[0] == FRONT else [])
                    candidates = [os.path.join(d, header) for d in dirs]
                    if kind == '"':
                        candidates.insert(0, os.path.join(directory, header))
                    found = next((c for c in candidates if os.path.isfile(c)), None)
                    if found is None:
                        if header == "qkv/version.h":  # generated from include/qkv/version.h.in
                            continue
                        if kind == '"':
                            problems.append(f"{rel}:{number}: \"{header}\" is not a file of the tree")
                        continue  # a system header
                    theirs = layer_of(root, found)
                    if mine[0] == FRONT:
                        if theirs is not None and theirs[1] not in (None, mine[1]):
                            problems.append(f"{rel}:{number}: application {mine[1]}'s front end includes "
                                            f"{os.path.relpath(found, root)}, of application {theirs[1]}")
                    elif theirs is None:
                        problems.append(f"{rel}:{number}: includes {os.path.relpath(found, root)}, "
                                        "outside the layers")
                    elif theirs[0] > mine[0]:
                        problems.append(f"{rel}:{number}: {LAYER_NAMES[mine[0]]} includes "
                                        f"{os.path.relpath(found, root)}, of {LAYER_NAMES[theirs[0]]}")
                    elif theirs[0] == APPLICATION and theirs[1] != mine[1]:
                        problems.append(f"{rel}:{number}: application {mine[1]} includes "
                                        f"{os.path.relpath(found, root)}, of application {theirs[1]}")
    return problems


ALLOWED_NEEDED = re.compile(r"^((libgomp|libstdc\+\+|libm|libgcc_s|libc|libdl|librt|libpthread)\.so(\.\d+)*"
                            r"|ld-linux.*)$")


def needed(library):
    out = subprocess.run(["readelf", "-d", library], check=True, capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.+)\]", out)


def strong_symbols(library, dynamic=False):
    """Names of the functions and data a library defines itself (not weak, not inline
    template copies, which every user of a header carries)."""
    args = ["nm", "--defined-only", "--extern-only"] + (["-D"] if dynamic else []) + [library]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    symbols = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("T", "D", "B", "R"):
            symbols.add(parts[2])
    return symbols


def demangle(symbols):
    out = subprocess.run(["c++filt"], input="\n".join(symbols), check=True, capture_output=True,
                         text=True).stdout
    return out.splitlines()


def check_libraries(build):
    problems = []
    path = lambda name: os.path.join(build, name)
    for name in ("libqkv_attention.so", "libqkv.so", "libqkv_attention.a", "libqkv.a", "libqkv_apps.a"):
        if not os.path.isfile(path(name)):
            return [f"{path(name)} is missing: build the default target first"]
    for library in needed(path("libqkv_attention.so")):
        if not ALLOWED_NEEDED.match(library):
            problems.append(f"libqkv_attention.so needs {library}; the engine needs only OpenMP "
                            "and the C and C++ runtimes")
    layer_needs = needed(path("libqkv.so"))
    if not any(n.startswith("libqkv_attention.so") for n in layer_needs):
        problems.append("libqkv.so does not need libqkv_attention.so")
    for library in layer_needs:
        if re.match(r"^lib(z|png\d*)\.so", library):
            problems.append(f"libqkv.so needs {library}; only the applications do")
    # Code of a higher layer inside a lower layer's library: what the higher static library
    # defines must not be defined (exported) by the lower ones.
    apps = strong_symbols(path("libqkv_apps.a"))
    layer = strong_symbols(path("libqkv.a"))
    for lower, higher, what in (("libqkv_attention.so", apps | layer, "the library or an application"),
                                ("libqkv.so", apps, "an application")):
        both = sorted(strong_symbols(path(lower), dynamic=True) & higher)
        if both:
            problems.append(f"{lower} exports {len(both)} symbols of {what}, e.g. "
                            + "; ".join(demangle(both[:3])))
    if not apps or not layer:
        problems.append("libqkv_apps.a or libqkv.a defines no symbols: nothing was compared")
    return problems


def self_test():
    """The include check on made-up trees: each violation is found, a clean tree passes."""
    cases = {
        "clean": ({}, 0),
        "engine includes a layer": ({"src/core/bad.cpp": '#include "qkv/nn.h"\n'}, 1),
        "engine includes oneDNN": ({"src/attention/bad.cpp": "#include <oneapi/dnnl/dnnl.hpp>\n"}, 1),
        "engine header includes a layer": ({"include/qkv/tensor.h": '#include "qkv/nn.h"\n'}, 1),
        "library includes an application": ({"src/nn/bad.cpp": '#include "dates/dates.h"\n'}, 1),
        "library includes zlib": ({"src/io/bad.cpp": "#include <zlib.h>\n"}, 1),
        "application includes another": ({"apps/vision/bad.cpp": '#include "dates/dates.h"\n'}, 1),
        "a missing header": ({"src/nn/bad.cpp": '#include "nn/nothing.h"\n'}, 1),
        "application includes its front end": ({"apps/dates/bad.cpp": '#include "commands.h"\n'}, 1),
        "front end includes another application": ({"apps/dates/cli_x.cpp": '#include "vision/vision.h"\n'}, 1),
        "front end includes its own and the CLI's": (
            {"apps/dates/cli_x.cpp": '#include "commands.h"\n#include "dates/dates.h"\n#include <CLI/CLI.hpp>\n'}, 0),
    }
    base = {"include/qkv/tensor.h": "#include <vector>\n", "include/qkv/nn.h": '#include "qkv/tensor.h"\n',
            "src/core/tensor.cpp": '#include "qkv/tensor.h"\n', "src/nn/linear.cpp": '#include "qkv/nn.h"\n',
            "apps/dates/dates.h": '#include "qkv/nn.h"\n', "apps/dates/dates.cpp": '#include "dates/dates.h"\n',
            "apps/vision/vision.cpp": '#include "qkv/nn.h"\n#include <png.h>\n', "apps/vision/vision.h": "",
            "tools/qkv/commands.h": ""}
    failures = []
    for name, (extra, expected) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            files = dict(base)
            files.update(extra)
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                    f.write(text)
            found = check_includes(root)
            if len(found) != expected:
                failures.append(f"{name}: expected {expected} problem(s), found {found}")
    return failures


def main(argv):
    if len(argv) == 3 and argv[1] == "includes":
        problems = check_includes(argv[2])
    elif len(argv) == 3 and argv[1] == "libraries":
        problems = check_libraries(argv[2])
    elif len(argv) == 2 and argv[1] == "self-test":
        problems = self_test()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for problem in problems:
        print(problem)
    print(f"{argv[1]}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
