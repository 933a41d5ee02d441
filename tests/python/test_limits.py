"""Hostile numbers and sizes from Python: float options are checked in the precision the
kernels use (float32), and a call that would need more memory than qkv's limit raises
MemoryError naming the bytes and what they were for, before anything is allocated."""

import os
import resource
import subprocess
import sys

import numpy as np
import pytest

import qkv

_PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(qkv.__file__)))


def _run(code, env=None, limit_as=None):
    def preexec():
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=_PYTHONPATH, **(env or {})),
                          capture_output=True, text=True, timeout=120, preexec_fn=preexec)


@pytest.mark.parametrize("option", [{"scale": 1e39}, {"softcap": 1e39}, {"scale": -1e39}])
def test_floats_beyond_float32_are_refused(option):
    q = np.ones((1, 2, 4, 8), np.float32)
    with pytest.raises(ValueError, match="not finite in float32"):
        qkv.scaled_dot_product_attention(q, q, q, **option)
    # The reference computes in double, where these are numbers.
    out = qkv.scaled_dot_product_attention(q, q, q, impl="reference", **option)
    assert np.isfinite(out).all()


def test_memory_limit_api():
    before = qkv.memory_limit()
    assert before > 0
    try:
        qkv.set_memory_limit(1 << 20)
        assert qkv.memory_limit() == 1 << 20
        q = np.ones((1, 4, 256, 64), np.float32)  # the output alone is 256 KiB
        qkv.set_memory_limit(200 << 10)
        with pytest.raises(MemoryError, match=r"needs .*the output \(B, Hq, Lq, Dv\): 256 KiB"):
            qkv.scaled_dot_product_attention(q, q, q)
    finally:
        qkv.set_memory_limit(None)
    assert qkv.memory_limit() == before
    with pytest.raises(TypeError):
        qkv.set_memory_limit(1.5)
    with pytest.raises(ValueError):
        qkv.set_memory_limit(0)


# Row 12 of issue 29: q, k and v broadcast (stride 0, no memory) to a head dimension of 2^31
# under an address-space limit. The output alone is 8 GiB.
def test_broadcast_head_dim_2_31_under_a_memory_limit_is_memory_error():
    code = ("import numpy as np, qkv\n"
            "q = np.broadcast_to(np.float32(1), (1, 1, 1, 2**31))\n"
            "try:\n"
            "    qkv.scaled_dot_product_attention(q, q, q)\n"
            "except MemoryError as e:\n"
            "    print('MemoryError:', e)\n")
    run = _run(code, limit_as=6_000_000_000)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "MemoryError: scaled_dot_product_attention (reference): needs" in run.stdout, run.stdout
    assert "the output (B, Hq, Lq, Dv): 8 GiB (8589934592 bytes)" in run.stdout, run.stdout
    assert "the address-space limit (RLIMIT_AS)" in run.stdout, run.stdout


def test_qkv_memory_limit_variable():
    code = ("import numpy as np, qkv\n"
            "q = np.ones((1, 4, 256, 64), np.float32)\n"
            "print(qkv.memory_limit())\n"
            "try:\n"
            "    qkv.scaled_dot_product_attention(q, q, q)\n"
            "except MemoryError as e:\n"
            "    print('MemoryError:', e)\n")
    run = _run(code, env={"QKV_MEMORY_LIMIT": "200K"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[0] == str(200 << 10)
    assert "set by QKV_MEMORY_LIMIT=200K" in run.stdout, run.stdout
    run = _run(code, env={"QKV_MEMORY_LIMIT": "lots"})
    assert run.returncode != 0
    assert "ValueError: QKV_MEMORY_LIMIT must be a positive number of bytes" in run.stderr, run.stderr[-2000:]
