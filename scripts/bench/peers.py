"""Getting the peers qkv is timed beside, when they are missing.

- PyTorch and ONNX for Python: Debian's python3-torch (1.13) and python3-onnx, through
  apt-get as root (else the line to run is printed).
- ONNX Runtime: `npm install --ignore-scripts onnxruntime-node@VERSION` into CACHE/node,
  outside the source tree, reused when it is there. The package ships its CPU library
  (bin/napi-v*/linux/x64/onnxruntime_binding.node + libonnxruntime.so.1); its install
  script only fetches optional GPU binaries, so --ignore-scripts loses nothing: this is
  checked after the install.
- torch's BLAS: Debian's python3-torch calls whatever libblas.so.3 the system points at,
  by default the netlib reference BLAS, which makes torch a straw man (4x slower at
  L=2048 here). So by default torch runs on Debian's OpenBLAS (libopenblas0-openmp,
  fetched with `apt-get download` and unpacked into CACHE/openblas), put first on
  LD_LIBRARY_PATH for the benchmark's process only: nothing on the system changes.
  --torch-blas system keeps the system's BLAS.
"""
import glob
import json
import os
import platform
import shutil
import subprocess
import sys

from bench import CACHE, log

# onnxruntime-node 1.30.0 ships its linux-x64 CPU binding in the npm package itself
# (checked after install); pinned so that runs are comparable.
ORT_VERSION = "1.30.0"
OPENBLAS_PACKAGE = "libopenblas0-openmp"


def add_arguments(parser, ort=True):
    """The options every script has for its peers: --torch-blas and --no-torch, and where
    ONNX Runtime is a peer (ort), --ort-version and --no-ort."""
    if ort:
        parser.add_argument("--ort-version", default=ORT_VERSION,
                            help=f"onnxruntime-node version (default {ORT_VERSION})")
    parser.add_argument("--torch-blas", choices=("openblas", "system"), default="openblas",
                        help="BLAS under torch: Debian's OpenBLAS for this process (default) or the system's")
    if ort:
        parser.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime out")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out")


def fail(message):
    sys.exit(f"{os.path.basename(sys.argv[0])}: {message}")


def run_quiet(cmd, **kwargs):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def apt_install(packages, why):
    line = "apt-get install -y " + " ".join(packages)
    if os.geteuid() != 0:
        fail(f"{why} is missing; as root run: {line}")
    log(f"installing {' '.join(packages)} ({why}) with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    result = run_quiet(["apt-get", "install", "-y", *packages], env=env)
    if result.returncode != 0:  # an old or empty package list: update once and retry
        run_quiet(["apt-get", "update"], env=env)
        result = run_quiet(["apt-get", "install", "-y", *packages], env=env)
    if result.returncode != 0:
        fail(f"`{line}` failed:\n{result.stdout[-2000:]}")


def ensure_python_peers(args):
    """python3-torch and python3-onnx, unless args.no_torch / args.no_ort."""
    missing = []
    if not args.no_torch:
        try:
            import torch  # noqa: F401
        except ImportError:
            missing.append("python3-torch")
    if not args.no_ort:
        try:
            import onnx  # noqa: F401
        except ImportError:
            missing.append("python3-onnx")
    if missing:
        apt_install(missing, "PyTorch / ONNX for Python")


def ensure_node():
    if shutil.which("node") is None or shutil.which("npm") is None:
        apt_install(["nodejs", "npm"], "Node.js and npm (to run ONNX Runtime)")


def ort_binding_files(package_dir):
    machine = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    pattern = os.path.join(package_dir, "bin", "napi-v*", "linux", machine)
    found = {}
    for directory in sorted(glob.glob(pattern)):
        binding = os.path.join(directory, "onnxruntime_binding.node")
        libs = glob.glob(os.path.join(directory, "libonnxruntime.so*"))
        if os.path.isfile(binding) and libs:
            found = {"binding": binding, "library": libs[0]}
    return found


def ensure_ort(version):
    """onnxruntime-node in CACHE/node (installed with --ignore-scripts when absent).
    Returns (node_modules directory, version)."""
    ensure_node()
    prefix = os.path.join(CACHE, "node")
    package_dir = os.path.join(prefix, "node_modules", "onnxruntime-node")
    manifest = os.path.join(package_dir, "package.json")
    installed = None
    if os.path.isfile(manifest):
        with open(manifest) as f:
            installed = json.load(f).get("version")
    if installed != version:
        os.makedirs(prefix, exist_ok=True)
        if not os.path.isfile(os.path.join(prefix, "package.json")):
            with open(os.path.join(prefix, "package.json"), "w") as f:
                json.dump({"private": True, "description": "qkv benchmark peers (cache)"}, f)
        log(f"installing onnxruntime-node@{version} into {prefix} (npm, --ignore-scripts)")
        result = run_quiet(["npm", "install", "--prefix", prefix, "--ignore-scripts", "--no-audit",
                            "--no-fund", f"onnxruntime-node@{version}"])
        if result.returncode != 0:
            fail(f"npm install onnxruntime-node@{version} failed:\n{result.stdout[-2000:]}")
        with open(manifest) as f:
            installed = json.load(f).get("version")
    files = ort_binding_files(package_dir)
    if not files:
        fail(f"onnxruntime-node {installed} in {package_dir} has no native binding "
             f"for linux/{platform.machine()} (bin/napi-v*/linux/*/onnxruntime_binding.node and "
             "libonnxruntime.so*); this version needs its install script: pin another with --ort-version")
    return os.path.join(prefix, "node_modules"), installed


def ensure_openblas():
    """Debian's OpenBLAS (OpenMP build) unpacked into the cache; returns the directory with
    its libblas.so.3, or None when it cannot be had."""
    root = os.path.join(CACHE, "openblas")
    libdir = os.path.join(root, "root", "usr", "lib", "x86_64-linux-gnu", "openblas-openmp")
    if os.path.isfile(os.path.join(libdir, "libblas.so.3")):
        return libdir
    os.makedirs(root, exist_ok=True)
    log(f"fetching {OPENBLAS_PACKAGE} (apt-get download) into {root} for torch's BLAS")
    result = run_quiet(["apt-get", "download", OPENBLAS_PACKAGE], cwd=root)
    if result.returncode != 0 and os.geteuid() == 0:
        run_quiet(["apt-get", "update"])
        result = run_quiet(["apt-get", "download", OPENBLAS_PACKAGE], cwd=root)
    debs = sorted(glob.glob(os.path.join(root, f"{OPENBLAS_PACKAGE}_*.deb")))
    if result.returncode != 0 or not debs:
        log(f"could not fetch {OPENBLAS_PACKAGE}; torch keeps the system BLAS:\n{result.stdout[-800:]}")
        return None
    result = run_quiet(["dpkg-deb", "-x", debs[-1], os.path.join(root, "root")])
    if result.returncode != 0 or not os.path.isfile(os.path.join(libdir, "libblas.so.3")):
        log(f"could not unpack {debs[-1]}; torch keeps the system BLAS:\n{result.stdout[-800:]}")
        return None
    return libdir


def reexec_with_openblas(args):
    """The dynamic linker reads LD_LIBRARY_PATH only at start: re-run the running script
    with OpenBLAS first on it (once), before torch is imported. Does not return when it
    re-runs. args: torch_blas, no_torch, threads."""
    if args.torch_blas != "openblas" or args.no_torch or os.environ.get("QKV_BENCH_REEXEC") == "1":
        return
    libdir = ensure_openblas()
    if libdir is None:
        return
    env = dict(os.environ, QKV_BENCH_REEXEC="1", OPENBLAS_NUM_THREADS=str(args.threads))
    env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    os.execve(sys.executable, [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]], env)


def without_openblas(env=None):
    """A copy of env (default: this process's) for a child that is not torch: OpenBLAS on
    LD_LIBRARY_PATH is torch's business, not qkv's or ONNX Runtime's."""
    env = dict(os.environ if env is None else env)
    env.pop("LD_LIBRARY_PATH", None)
    return env


def loaded_blas():
    """Which BLAS library this process has mapped (torch links libblas.so.3)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "blas" in line.split()[-1].rsplit("/", 1)[-1]}
    except OSError:
        return "unknown"
    if any("openblas" in p for p in paths):
        return "OpenBLAS (" + OPENBLAS_PACKAGE + ", this process only)"
    if paths:
        return "system libblas.so.3 (" + ", ".join(sorted(os.path.basename(p) for p in paths)) + ")"
    return "none loaded"


def start_torch(threads):
    """Imports torch with `threads` intra-op threads; -> (torch's version, its BLAS)."""
    import torch

    torch.set_num_threads(threads)
    return torch.__version__, loaded_blas()


def probe_torch(threads):
    """Imports torch with `threads` threads: its version and BLAS, and whether 1.13's
    _scaled_dot_product_attention honours is_causal (= a tril bool mask).
    -> {"version", "blas", "is_causal_ok"}."""
    version, blas = start_torch(threads)
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    t = [torch.randn(1, 2, 9, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    by_flag = F._scaled_dot_product_attention(*t, None, 0.0, False, True)[0]
    by_mask = F._scaled_dot_product_attention(*t, torch.ones(9, 9, dtype=torch.bool).tril(), 0.0, False, False)[0]
    return {"version": version, "blas": blas, "is_causal_ok": bool(torch.allclose(by_flag, by_mask))}
