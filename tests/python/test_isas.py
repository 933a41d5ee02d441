"""Every instruction set the fused kernel is built for and this CPU runs, each tested in its
own process because the kernel reads QKV_ISA once per process: the oracle sweep, the
NaN/zero-size edges, the bf16/f16 dtype checks and the thread-count checks run again in a
child pytest with QKV_ISA=simd128|avx2|avx512|amx, and with amx_emulated, the AMX tile code
on a software model of the tiles, so that its bf16 results are checked against PyTorch on
CPUs without AMX. The parent run itself uses the best variant (avx512_bf16 where the CPU
has AVX512-BF16). QKV_ISA=scalar, simd128's former name, must still select simd128.
"""

import os
import subprocess
import sys

import pytest

import qkv

HERE = os.path.dirname(os.path.abspath(__file__))


def _cpu_runs(isa):
    features = set(qkv.cpu_summary().replace(",", " ").split())
    need = {"simd128": set(), "avx2": {"avx2", "fma"},
            "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"},
            "amx": {"amx_tile", "amx_bf16"}, "amx_emulated": {"avx512_bf16"}}[isa]
    return need <= features


@pytest.mark.parametrize("isa", ["simd128", "avx2", "avx512", "amx", "amx_emulated"])
def test_suite_under_isa(isa):
    if os.environ.get("QKV_ISA"):
        pytest.skip("already running under a chosen QKV_ISA")
    if not _cpu_runs(isa):
        pytest.skip(f"this CPU cannot run {isa}: {qkv.cpu_summary()}")
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(qkv.__file__)))
    env = dict(os.environ, QKV_ISA=isa, PYTHONPATH=package_dir, PYTHONDONTWRITEBYTECODE="1")
    files = [os.path.join(HERE, f)
             for f in ("test_sweep.py", "test_edges.py", "test_dropout.py", "test_dtypes_layouts.py")]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "--tb=line", "-p", "no:cacheprovider", *files,
         # not the tests of new interpreters whose subject (import, thread counts) is no ISA's
         "-k", "not gil and not import_does_not and not default_thread_count and not onednn_products"],
        env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"QKV_ISA={isa}:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"


def _run_under(isa, code):
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(qkv.__file__)))
    env = dict(os.environ, QKV_ISA=isa, PYTHONPATH=package_dir, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_scalar_is_the_former_name_of_simd128():
    # The same inputs under both names give the same bits (and no error); an unknown
    # name is refused with every name listed, the alias among them.
    code = ("import numpy as np, qkv\n"
            "rng = np.random.default_rng(5)\n"
            "q, k, v = (rng.standard_normal((1, 2, 70, 24)).astype(np.float32) for _ in range(3))\n"
            "out = np.asarray(qkv.scaled_dot_product_attention(q, k, v, is_causal=True))\n"
            "print(out.tobytes().hex())\n")
    runs = {isa: _run_under(isa, code) for isa in ("scalar", "simd128")}
    for isa, run in runs.items():
        assert run.returncode == 0, f"QKV_ISA={isa}: {run.stderr[-2000:]}"
    assert runs["scalar"].stdout == runs["simd128"].stdout
    bogus = _run_under("sse2", code)
    assert bogus.returncode != 0
    assert "simd128" in bogus.stderr and "scalar (= simd128)" in bogus.stderr, bogus.stderr[-2000:]
