"""Ctrl-C stops a long call (python/interruptible.h): the call runs on a worker thread while
the main thread runs Python's signal handlers every 20 ms, and a handler that raises stops
the computation at its next unit of work. These are liveness checks with generous bounds,
not timings: each call would run for minutes if the signal were not acted on."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import qkv

_CALL = """
import signal, sys, time, numpy as np, qkv
q = np.random.default_rng(0).standard_normal(({heads}, {length}, 64), dtype=np.float32)[None]
{setup}
print("calling", flush=True)
start = time.monotonic()
try:
    qkv.scaled_dot_product_attention(q, q, q, impl="{impl}")
except KeyboardInterrupt:
    print("KeyboardInterrupt after %.2f s" % (time.monotonic() - start), flush=True)
    sys.exit(42)
print("finished", flush=True)
"""


def _start(impl, heads, length, setup=""):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(qkv.__file__))))
    code = _CALL.format(impl=impl, heads=heads, length=length, setup=setup)
    process = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "calling", process.stderr.read()
    return process


# Minutes of work uninterrupted on the 2-core machines here: the reference at 69 GFLOP in
# double, the kernel at 4.4 TFLOP.
@pytest.mark.parametrize("impl, heads, length", [("reference", 64, 4096), ("fast", 16, 32768)])
def test_ctrl_c_raises_keyboard_interrupt(impl, heads, length):
    process = _start(impl, heads, length)
    try:
        time.sleep(1.0)  # well inside the call
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"{impl}: still running 30 s after SIGINT; stdout {out!r}, stderr {err[-2000:]!r}")
    waited = time.monotonic() - sent
    assert process.returncode == 42, (process.returncode, out, err[-2000:])
    assert "KeyboardInterrupt after" in out
    print(f"{impl}: exited {waited:.2f} s after SIGINT ({out.strip()})")


def test_a_handler_that_does_not_raise_lets_the_call_finish():
    setup = "signal.signal(signal.SIGINT, lambda number, frame: print('handled', flush=True))"
    process = _start("reference", 4, 512, setup)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, (out, err[-2000:])
    assert out.split()[-1] == "finished", out


# Long enough to be handed to the worker on the main thread (python/bindings.cpp's
# long_attention), short in time.
def test_calls_from_other_threads_run_as_before():
    q = np.random.default_rng(1).standard_normal((1, 2, 512, 16), dtype=np.float32)
    want = qkv.scaled_dot_product_attention(q, q, q, impl="reference")  # through the worker
    got = []
    worker = threading.Thread(target=lambda: got.append(qkv.scaled_dot_product_attention(q, q, q, impl="reference")))
    worker.start()
    worker.join()
    np.testing.assert_array_equal(got[0], want)


def test_errors_still_arrive_through_the_worker():
    q = np.zeros((1, 16, 4096, 64), np.float32)
    with pytest.raises(ValueError, match="scale must be finite, got 1e[+]39, which is not finite in float32"):
        qkv.scaled_dot_product_attention(q, q, q, scale=1e39)
