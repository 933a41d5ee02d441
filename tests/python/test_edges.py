"""Edges: NaN propagation, zero sizes, fully masked rows, thread counts, the GIL, and
importing qkv without torch."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import qkv
from oracle import assert_close, assert_equal, oracle

IMPLS = ["fast", "reference"]


def _qkv(B, H, Lq, Lk, D, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float32)
                 for s in ((B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D)))


@pytest.mark.parametrize("impl", IMPLS)
def test_nan_in_a_key_reaches_only_the_rows_that_read_it(impl):
    """Causal top-left: key 5 of batch 0, head 0 is read by rows i >= 5 of that head."""
    q, k, v = _qkv(2, 2, 12, 12, 8)
    k[0, 0, 5, :] = np.nan
    out = qkv.scaled_dot_product_attention(q, k, v, is_causal=True, impl=impl)
    assert np.isnan(out[0, 0, 5:]).all(), "rows that read the NaN key must be NaN"
    assert np.isfinite(out[0, 0, :5]).all(), "rows 0..4 never read key 5"
    assert np.isfinite(out[0, 1]).all(), "other heads are untouched"
    assert np.isfinite(out[1]).all(), "other batches are untouched"


@pytest.mark.parametrize("impl", IMPLS)
def test_nan_in_a_query_stays_in_its_row(impl):
    q, k, v = _qkv(1, 2, 6, 9, 8)
    q[0, 1, 3, 2] = np.nan
    out = qkv.scaled_dot_product_attention(q, k, v, impl=impl)
    assert np.isnan(out[0, 1, 3]).all()
    rows = np.ones(out.shape[:3], bool)
    rows[0, 1, 3] = False
    assert np.isfinite(out[rows]).all()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("Lq", [1, 70])
@pytest.mark.parametrize("odd", [np.inf, np.nan])
def test_inf_or_nan_in_a_float_mask_makes_its_row_nan_as_torch(impl, Lq, odd):
    """torch's softmax takes exp(+inf − +inf) = NaN, so a +inf (or NaN) mask value makes
    its row NaN; the fast path gave +inf's row zeros (Lq = 1: the decode path)."""
    q, k, v = _qkv(1, 2, Lq, 40, 16, seed=3)
    mask = np.random.default_rng(4).standard_normal((1, 2, Lq, 40)).astype(np.float32)
    mask[0, 1, Lq - 1, 17] = odd
    out = qkv.scaled_dot_product_attention(q, k, v, attn_mask=mask, impl=impl)
    want = torch.nn.functional.softmax(
        torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2) / 4.0 + torch.from_numpy(mask), -1
    ) @ torch.from_numpy(v)
    assert np.isnan(want[0, 1, Lq - 1]).all() and np.isnan(out[0, 1, Lq - 1]).all()
    rows = np.ones(out.shape[:3], bool)
    rows[0, 1, Lq - 1] = False
    np.testing.assert_allclose(out[rows], want.numpy()[rows], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("Lq", [1, 70])
def test_a_key_scoring_plus_inf_makes_the_rows_that_read_it_nan_as_torch(impl, Lq):
    q, k, v = _qkv(1, 1, Lq, 100, 32, seed=5)
    q = np.abs(q)
    k[0, 0, 50, 3] = np.inf  # q·k = +inf for every query
    out = qkv.scaled_dot_product_attention(q, k, v, impl=impl)
    want = torch.softmax(torch.from_numpy(q) @ torch.from_numpy(k).transpose(-1, -2), -1) @ torch.from_numpy(v)
    assert np.isnan(want.numpy()).all() and np.isnan(out).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_nan_in_masked_keys_is_never_read(impl):
    q, k, v = _qkv(2, 2, 6, 10, 8)
    k[0, :, 7] = np.nan  # beyond key_lengths[0] = 6
    v[0, :, 8] = np.nan
    k[1, :, 2] = np.nan  # masked by the bool mask below
    v[1, :, 2] = np.nan
    mask = np.ones((2, 1, 6, 10), bool)
    mask[1, :, :, 2] = False
    out = qkv.scaled_dot_product_attention(q, k, v, key_lengths=[6, 10], attn_mask=mask,
                                           impl=impl)
    assert np.isfinite(out).all(), "a NaN in a masked key or value leaked into the output"
    # ... and the values equal the same computation with the NaNs replaced by anything.
    clean = qkv.scaled_dot_product_attention(np.nan_to_num(q), np.nan_to_num(k),
                                             np.nan_to_num(v), key_lengths=[6, 10],
                                             attn_mask=mask, impl=impl)
    assert_equal(out, clean, "NaN keys masked out")
    # Causal: a NaN key above the diagonal is never read by the rows before it.
    k2 = k.copy()
    k2[1, 0, 4] = np.nan
    out2 = qkv.scaled_dot_product_attention(q, k2, v, is_causal=True, key_lengths=[6, 10],
                                            attn_mask=mask, impl=impl)
    assert np.isfinite(out2[1, 0, :4]).all() and np.isnan(out2[1, 0, 4:]).all()


@pytest.mark.parametrize("impl", IMPLS)
def test_fully_masked_rows_are_zero_with_lse_minus_inf(impl):
    q, k, v = _qkv(2, 1, 4, 5, 8)
    mask = np.ones((4, 5), bool)
    mask[2] = False  # row 2: nothing to attend
    fmask = np.zeros((4, 5), np.float32)
    fmask[1] = -np.inf  # row 1: every key at −inf through the float mask
    for kw in ({"attn_mask": mask}, {"attn_mask": fmask}, {"key_lengths": [0, 5]}):
        out, lse = qkv.scaled_dot_product_attention(q, k, v, return_lse=True, impl=impl, **kw)
        probs = qkv.attention_weights(q, k, v, **kw)
        dead = np.isneginf(lse)
        assert dead.any() and np.isfinite(out).all(), kw
        assert np.all(out[dead] == 0.0) and np.all(probs[dead] == 0.0), kw
        t = lambda x: torch.from_numpy(x).double()  # noqa: E731
        want_mask = kw.get("attn_mask")
        want_mask = None if want_mask is None else torch.from_numpy(want_mask)
        want_out, want_lse, _ = oracle(t(q), t(k), t(v), mask=want_mask,
                                       key_lengths=kw.get("key_lengths"))
        assert_close(out, want_out, 1e-5, 1e-5, f"{kw}")
        assert_close(lse, want_lse, 1e-5, 1e-5, f"{kw} lse")


@pytest.mark.parametrize("impl", IMPLS)
def test_zero_sizes(impl):
    """Lq = 0 gives an empty output; Lk = 0 gives zeros (every row fully masked, lse −inf);
    B = 0 and Dv = 0 give empty outputs."""
    q, k, v = _qkv(2, 2, 0, 5, 8)
    out, lse = qkv.scaled_dot_product_attention(q, k, v, return_lse=True, impl=impl)
    assert out.shape == (2, 2, 0, 8) and lse.shape == (2, 2, 0)
    assert qkv.attention_weights(q, k, v).shape == (2, 2, 0, 5)

    q, k, v = _qkv(2, 2, 4, 0, 8)
    out, lse = qkv.scaled_dot_product_attention(q, k, v, return_lse=True, is_causal=True,
                                                impl=impl)
    assert out.shape == (2, 2, 4, 8) and np.all(out == 0.0)
    assert np.all(np.isneginf(lse))
    assert qkv.attention_weights(q, k, v).shape == (2, 2, 4, 0)

    q, k, v = _qkv(0, 2, 4, 5, 8)
    assert qkv.scaled_dot_product_attention(q, k, v, impl=impl).shape == (0, 2, 4, 8)

    q, k, v = _qkv(1, 2, 4, 5, 8)
    assert qkv.scaled_dot_product_attention(q, k, v[..., :0], impl=impl).shape == (1, 2, 4, 0)
    t = qkv.scaled_dot_product_attention(torch.zeros(1, 1, 0, 4), torch.zeros(1, 1, 3, 4),
                                         torch.zeros(1, 1, 3, 4), impl=impl)
    assert isinstance(t, torch.Tensor) and t.shape == (1, 1, 0, 4)


def test_decode_single_query_bottom_right():
    """Lq = 1 with bottom-right alignment: the one query sees every key up to its length."""
    q, k, v = _qkv(3, 2, 1, 40, 16)
    lengths = [40, 17, 1]
    got = qkv.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           causal_alignment="bottom_right", key_lengths=lengths)
    plain = qkv.scaled_dot_product_attention(q, k, v, key_lengths=lengths, impl="reference")
    assert_close(got, plain, 1e-5, 1e-5, "decode = unmasked up to the key length")


@pytest.mark.parametrize("impl", IMPLS)
def test_results_do_not_depend_on_the_thread_count(threads, impl):
    q, k, v = _qkv(3, 4, 37, 53, 24, seed=5)
    mask = np.random.default_rng(2).random((37, 53)) < 0.8
    kw = dict(attn_mask=mask, is_causal=True, causal_alignment="bottom_right",
              key_lengths=[53, 20, 0], alibi_slopes=[0.5, 0.25, 0.125, 0.0625], softcap=20.0,
              window=(8, None), return_lse=True, impl=impl)
    results = []
    for n in (1, 2, 3):
        threads.set_num_threads(n)
        assert qkv.get_num_threads() == n
        results.append(qkv.scaled_dot_product_attention(q, k, v, **kw))
    for n, (out, lse) in zip((2, 3), results[1:]):
        assert_equal(out, results[0][0], f"out, {n} threads vs 1")
        assert_equal(lse, results[0][1], f"lse, {n} threads vs 1")


def test_the_gil_is_released(threads):
    """While one Python thread is inside qkv, another keeps running Python code. The worker
    times its one call; the main thread notes each moment it runs. Had the call held the GIL,
    the main thread could run at no moment inside it, and its longest gap would span the whole
    call. The gap is judged against the call as timed during the test (not a calibration run
    before it), so a busy machine, which slows both threads alike, does not fail it. One qkv
    thread, so the two do not compete for the 2 cores."""
    threads.set_num_threads(1)
    q, k, v = _qkv(8, 4, 256, 256, 64, seed=3)  # the naive path: about 0.3 s on a quiet core
    window = {}

    def busy():
        window["start"] = time.perf_counter()
        qkv.scaled_dot_product_attention(q, k, v, impl="reference")
        window["end"] = time.perf_counter()

    worker = threading.Thread(target=busy)
    stamps = []
    worker.start()
    while worker.is_alive():
        stamps.append(time.perf_counter())
    worker.join()
    start, end = window["start"], window["end"]
    inside = [start] + [t for t in stamps if start < t < end] + [end]
    longest = max(b - a for a, b in zip(inside, inside[1:]))
    assert longest < 0.5 * (end - start), (f"the main thread stalled {longest:.3f} s during a "
                                           f"{end - start:.3f} s call: is the GIL held?")


def test_concurrent_calls_from_python_threads_agree():
    q, k, v = _qkv(2, 2, 40, 40, 16, seed=8)
    want = qkv.scaled_dot_product_attention(q, k, v, is_causal=True)
    got = [None] * 4

    def run(i):
        got[i] = qkv.scaled_dot_product_attention(q, k, v, is_causal=True)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for g in got:
        assert_equal(g, want, "concurrent call")


def _run_in_new_interpreter(code, **variables):
    """Runs `code` in a new Python process that imports this qkv; `variables` set
    environment variables for it (None: unset)."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(qkv.__file__))))
    for name, value in variables.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)


def test_import_does_not_import_torch():
    code = ("import sys, qkv, numpy as np\n"
            "assert 'torch' not in sys.modules, 'import qkv imported torch'\n"
            "x = np.ones((1, 1, 2, 4), np.float32)\n"
            "qkv.scaled_dot_product_attention(x, x, x)\n"
            "assert 'torch' not in sys.modules, 'a NumPy call imported torch'\n")
    _run_in_new_interpreter(code)


@pytest.mark.parametrize("omp, want", [(None, None), ("3", 3), ("4,2", 4), ("junk", None)])
def test_default_thread_count_ignores_what_torch_did_to_openmp(omp, want):
    """torch lowers OpenMP's default at import (1 on a 2-vCPU machine, where it counts one
    physical core); qkv imported after it must still use QKV_NUM_THREADS, else
    OMP_NUM_THREADS, else every CPU the process may run on."""
    want = want or len(os.sched_getaffinity(0))
    code = ("import torch, qkv\n"
            f"assert qkv.get_num_threads() == {want}, (qkv.get_num_threads(), torch.get_num_threads())\n")
    _run_in_new_interpreter(code, QKV_NUM_THREADS=None, OMP_NUM_THREADS=omp)


def test_onednn_products_run_on_qkvs_thread_count_not_the_one_torch_set():
    """qkv's oneDNN products (linear, layer_norm) run on qkv's thread count, not on the
    OpenMP count that torch sets (1 on a 2-vCPU machine), and leave torch's as it was.
    OpenMP starts its worker threads at the first region that asks for them and keeps
    them, so /proc/self/task shows how many the product used."""
    code = ("import os, torch, numpy as np, qkv.nn as qnn\n"
            "torch.set_num_threads(1)\n"
            "x = np.ones((1024, 1024), np.float32)\n"
            "before = len(os.listdir('/proc/self/task'))\n"
            "qnn.linear(x, x)\n"
            "qnn.layer_norm(x, 1024)\n"
            "after = len(os.listdir('/proc/self/task'))\n"
            "assert after - before >= 2, ('threads before and after', before, after)\n"
            "assert torch.get_num_threads() == 1, torch.get_num_threads()\n")
    _run_in_new_interpreter(code, QKV_NUM_THREADS="4", OMP_NUM_THREADS=None)


_PINNED_THREADS = (
    "import os, numpy as np, qkv\n"
    "x = np.ones((1, 4, 256, 64), np.float32)\n"
    "qkv.scaled_dot_product_attention(x, x, x)\n"
    "def cpus(task):\n"
    "    with open(f'/proc/self/task/{task}/status') as status:\n"
    "        line = next(l for l in status if l.startswith('Cpus_allowed_list:'))\n"
    "    return line.split()[1]\n"
    "main = cpus(os.getpid())\n"
    "single = [c for t in os.listdir('/proc/self/task') if t != str(os.getpid())\n"
    "          for c in [cpus(t)] if c.isdigit()]\n"
    "assert not main.isdigit(), ('the calling thread was pinned', main)\n"
    "assert len(single) == len(set(single)) == WANT, single\n")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: no worker threads")
@pytest.mark.parametrize("variables, pinned", [
    ({}, True),
    ({"QKV_BIND_THREADS": "0"}, False),
    ({"OMP_PROC_BIND": "false"}, False),
])
def test_worker_threads_pinned_one_per_cpu_unless_told_otherwise(variables, pinned):
    """With one thread per CPU (the default count) qkv pins OpenMP's workers, one per
    CPU, and never the calling thread; QKV_BIND_THREADS=0 or an OpenMP binding variable
    leaves every thread free. /proc/self/task shows each thread's CPUs."""
    try:  # setting the mask it already has: refused only where the sandbox forbids it
        os.sched_setaffinity(0, os.sched_getaffinity(0))
    except OSError as error:
        pytest.skip(f"threads may not set their CPUs here ({error}); qkv leaves them where they are")
    cpus = len(os.sched_getaffinity(0))
    env = {"QKV_NUM_THREADS": None, "OMP_NUM_THREADS": None, "QKV_BIND_THREADS": None,
           "OMP_PROC_BIND": None, "OMP_PLACES": None, "GOMP_CPU_AFFINITY": None}
    env.update(variables)
    _run_in_new_interpreter(_PINNED_THREADS.replace("WANT", str(cpus - 1 if pinned else 0)), **env)


def test_malformed_bind_variable_is_a_value_error():
    code = ("import numpy as np, qkv\n"
            "x = np.ones((1, 1, 2, 4), np.float32)\n"
            "try:\n"
            "    qkv.scaled_dot_product_attention(x, x, x)\n"
            "except ValueError as e:\n"
            "    assert 'QKV_BIND_THREADS' in str(e), e\n"
            "else:\n"
            "    raise AssertionError('QKV_BIND_THREADS=yes was accepted')\n")
    _run_in_new_interpreter(code, QKV_BIND_THREADS="yes", QKV_NUM_THREADS=None, OMP_NUM_THREADS=None)


def test_module_metadata():
    assert qkv.__version__ == "0.1.0"
    summary = qkv.cpu_summary()
    assert isinstance(summary, str) and summary
    assert qkv.get_num_threads() >= 1
    for fn in (qkv.scaled_dot_product_attention, qkv.attention_weights,
               qkv.self_attention_raw, qkv.cpu_summary, qkv.set_num_threads,
               qkv.get_num_threads, qkv.storage_cache_limit, qkv.set_storage_cache_limit,
               qkv.cached_storage_bytes, qkv.release_cached_storage):
        assert fn.__doc__ and len(fn.__doc__) > 40, fn.__name__
    assert qkv.__doc__


def test_no_leak_of_inputs_or_results():
    """Results own their C++ buffer through a capsule and inputs are held only for the
    call: 300 calls with 1 MiB in and out leave the peak RSS within 64 MiB of where it
    was after a warm-up (a leak of either would add ~300 MiB)."""
    import resource

    q = np.ones((1, 1, 4096, 64), np.float32)  # 1 MiB in, 1 MiB out; one key: cheap
    kv = np.ones((1, 1, 1, 64), np.float32)
    for _ in range(20):
        qkv.scaled_dot_product_attention(q, kv, kv, return_lse=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    for _ in range(300):
        out, _ = qkv.scaled_dot_product_attention(q.copy(), kv, kv, return_lse=True)
        del out
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert after - before < 64 * 1024, f"peak RSS grew by {(after - before) / 1024:.0f} MiB"


def test_freed_results_are_reused_not_faulted_in_again():
    """A result's block (1 MiB here) goes to qkv's storage cache when its array is
    deleted, and the next result of that size takes it: a loop of calls makes no page
    faults for its outputs. Without the cache, glibc unmaps or trims such blocks: 526
    faults in these 50 calls when measured, 193 per call for an L = 512 output.
    Off (limit 0), nothing is kept."""
    import resource

    saved = qkv.storage_cache_limit()
    q = np.ones((1, 1, 4096, 64), np.float32)  # 1 MiB out; one key: cheap
    kv = np.ones((1, 1, 1, 64), np.float32)
    try:
        qkv.set_storage_cache_limit(64 << 20)
        qkv.release_cached_storage()
        out = qkv.scaled_dot_product_attention(q, kv, kv)
        address = out.ctypes.data
        del out
        assert qkv.cached_storage_bytes() >= 1 << 20
        again = qkv.scaled_dot_product_attention(q, kv, kv)
        assert again.ctypes.data == address
        np.testing.assert_array_equal(again, np.ones_like(q))  # reused memory, fresh result
        del again
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(50):
            qkv.scaled_dot_product_attention(q, kv, kv)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        assert faults < 50, f"{faults} page faults in 50 calls"

        qkv.release_cached_storage()
        assert qkv.cached_storage_bytes() == 0
        qkv.set_storage_cache_limit(0)
        qkv.scaled_dot_product_attention(q, kv, kv)
        assert qkv.cached_storage_bytes() == 0
    finally:
        qkv.set_storage_cache_limit(saved)


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError), ("8", TypeError)])
def test_storage_cache_limit_rejects_bad_sizes(bad, error):
    with pytest.raises(error, match="set_storage_cache_limit: nbytes"):
        qkv.set_storage_cache_limit(bad)


def test_a_forked_child_runs_qkv_after_its_parent_did():
    """libgomp's thread pool does not survive fork(): without qkv's fork handler, a
    multiprocessing child of a process that had run qkv hung in its first call (seen:
    the pool below never returned). The child runs on one thread instead."""
    code = ("import multiprocessing as mp, numpy as np, qkv\n"
            "x = np.ones((1, 2, 300, 16), np.float32)\n"
            "want = qkv.scaled_dot_product_attention(x, x, x)\n"
            "def child(_):\n"
            "    return qkv.get_num_threads(), qkv.scaled_dot_product_attention(x, x, x)\n"
            "with mp.get_context('fork').Pool(2) as pool:\n"
            "    for threads, got in pool.map(child, range(4)):\n"
            "        assert threads == 1, threads\n"
            "        np.testing.assert_array_equal(got, want)\n")
    _run_in_new_interpreter(code, QKV_NUM_THREADS="2")
