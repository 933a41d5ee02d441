"""A suite's helper processes: the suite run again through scripts/bench.py with other
options (a step in a fresh process for its peak memory, a training run in a child)."""
import os
import sys

from bench import ROOT

ENTRY = os.path.join(ROOT, "scripts", "bench.py")


def self_command(suite, *args):
    """The command that runs `suite` again with args, by the same Python (and so the same
    LD_LIBRARY_PATH: torch on OpenBLAS stays so)."""
    return [sys.executable, ENTRY, suite, "--no-record", *args]
