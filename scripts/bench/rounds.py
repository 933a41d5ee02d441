"""Interleaved rounds: every engine runs once per round, in turn (qkv, ORT, torch, qkv, ORT,
torch, ...), so that all of them see the same state of a noisy machine; medians are taken
over the rounds.

An engine is given as a burst: a function of `count` that makes that many runs back to
back and returns their times in seconds. timed() makes one of a Python call; a server
that times its own runs (servers.BurstServer.run_burst) is one already.
"""
import statistics
import time


def timed(call):
    """The burst of a Python call, timed around the call: allocating its output counts,
    freeing it does not."""
    def burst(count):
        seconds = []
        for _ in range(count):
            start = time.perf_counter()
            out = call()
            seconds.append(time.perf_counter() - start)
            del out
        return seconds

    return burst


def one_at_a_time(run):
    """The burst of a function that makes one run and returns its own time in seconds."""
    return lambda count: [run() for _ in range(count)]


def pause(seconds):
    if seconds > 0:
        time.sleep(seconds)


def interleaved(bursts, rounds, warmup, gap, back_to_back=0, after_round=None):
    """bursts: {engine: burst}. First `warmup` runs of each engine, in turn; then `rounds`
    rounds, in each of which every engine makes 1 + back_to_back runs without a pause:
    the first after idle (its worker threads asleep, its data evicted by the other
    engines), the others back to back, as a layer's attention runs right after its
    projections. `gap` seconds of idle follow each engine's turn, so that one engine's
    spinning worker threads do not eat into the next one's run (ONNX Runtime's spin for
    about 30 ms after a run). after_round(), when given, runs after each round, followed by
    a gap too (a ceiling sample, say).
    -> (first, warm): {engine: [seconds of the first run, per round]} and {engine: [median
    of the back-to-back runs, per round]} (empty lists without back_to_back)."""
    for _ in range(warmup):
        for burst in bursts.values():
            burst(1)
            pause(gap)
    first = {engine: [] for engine in bursts}
    warm = {engine: [] for engine in bursts}
    for _ in range(rounds):
        for engine, burst in bursts.items():
            seconds = burst(1 + back_to_back)
            first[engine].append(seconds[0])
            if back_to_back:
                warm[engine].append(statistics.median(seconds[1:]))
            pause(gap)
        if after_round is not None:
            after_round()
            pause(gap)
    return first, warm


def median(xs):
    """The median, None for no values."""
    return statistics.median(xs) if xs else None
