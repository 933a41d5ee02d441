"""What the benchmark scripts print: table cells, how far two engines' outputs differ, and
what ran where (versions, commit, CPU)."""
import math
import shutil
import subprocess

from bench import record


def cell(x, spec, suffix=""):
    """x formatted by spec (e.g. '9.2f') plus suffix, right-aligned to the spec's width
    plus the suffix's; '-' in that width when x is None."""
    width = int(spec.split(".")[0] or 0) + len(suffix)
    return "-".rjust(width) if x is None else (format(x, spec) + suffix).rjust(width)


def ratio(peer, mine):
    """A speed ratio, peer time / qkv time (above 1: qkv is faster); None without both."""
    return peer / mine if peer and mine else None


def max_abs_diff(a, b):
    """max |a - b| in float64; inf when the shapes differ (a wrong layout), 0 when empty."""
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def git_describe():
    """The source tree's commit (git describe --always), with -dirty where record.dirty()
    says so (the same question the records answer), or None."""
    described = record.git("describe", "--always")
    if not described:
        return None
    return described + "-dirty" if record.dirty() else described


def node_version():
    if not shutil.which("node"):
        return None
    return subprocess.run(["node", "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()


def cpu_model():
    """/proc/cpuinfo's model name (for scripts that do not load qkv's module)."""
    return record.cpu_info()[1]


def where(git, build_dir):
    """The build a run used, with its commit where known."""
    return f"{git}, {build_dir}" if git else build_dir


def versions_line(machine, where_from):
    """The first line of a run's report: every engine's version, and the thread count.
    machine: qkv, torch, torch_blas, onnxruntime_node, node, threads."""
    return (f"qkv {machine['qkv']} ({where_from}); torch {machine['torch']} ({machine['torch_blas']}); "
            f"onnxruntime-node {machine['onnxruntime_node']} (node {machine['node']}); threads {machine['threads']}")
