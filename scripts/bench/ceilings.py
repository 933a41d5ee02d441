"""The machine's ceilings, measured by build/bench/qkv_ceilings: the f32 FMA peak, the
AVX512-BF16 (vdpbf16ps) and AMX peaks where the CPU has them, the memory read bandwidth.

The host's ceilings drift within minutes (memory reads 38-70 GB/s in one session), so a
case is not held against one measurement taken at the start: each of its rounds samples
the ceiling it is held against right after the round (sample()), and paired() divides the
round's rate by that sample. The median of those per-round percentages is what a table
shows: a ratio of two medians misreads a run whose ceiling shifts between rounds (54%
against 69% paired, in one run whose memory reads went from ~41 to ~70 GB/s between two
rounds of a case).
"""
import json
import statistics
import subprocess

# kind -> (qkv_ceilings --only name, its JSON key, the field holding the rate)
KINDS = {"fma": ("fma", "f32_fma", "gflops"),
         "bf16": ("bf16", "bf16_avx512_dpbf16ps", "gflops"),
         "mem": ("mem", "mem_read", "gb_per_s")}


def measure(binary, threads, quick=False):
    """Every ceiling, best of 7 (quick: best of 3, shorter loops): qkv_ceilings' JSON."""
    cmd = [binary, "--threads", str(threads)]
    if quick:
        cmd += ["--repeats", "3", "--seconds", "0.1"]
    return json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)


def kind_for(dtype, decode):
    """The ceiling a case is held against: memory reads (decode), vdpbf16ps (bf16), f32 FMA."""
    return "mem" if decode else "bf16" if dtype == "bf16" else "fma"


def sample(binary, kind, threads, read_bytes=None):
    """One short measurement of a ceiling now, beside a case's runs: GFLOP/s or GB/s (best of
    two runs), or None where the CPU lacks it. For "mem", read_bytes sizes the buffer as the
    case's reads (at least 64 MiB, past the caches)."""
    only, key, field = KINDS[kind]
    cmd = [binary, "--only", only, "--threads", str(threads), "--repeats", "2"]
    if kind == "mem":
        cmd += ["--mem-mib", str(max(64, round(read_bytes / 2**20)))]
    else:
        cmd += ["--seconds", "0.05"]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:  # a qkv_ceilings built before --only (see --rebuild): no sample
        return None
    return (json.loads(done.stdout).get(key) or {}).get(field)


def paired(work, seconds, samples):
    """Per round, the rate work / seconds (in billions per second: GFLOP/s for FLOPs, GB/s
    for bytes) as a percentage of the ceiling sampled right after that round (samples[i]
    after seconds[i]); rounds without a sample are left out.
    -> {"median", "min", "max"} of those percentages, or None without any."""
    percentages = [100 * work / (t * 1e9) / x for t, x in zip(seconds, samples) if x]
    if not percentages:
        return None
    return {"median": statistics.median(percentages), "min": min(percentages), "max": max(percentages)}


def describe(c):
    """One line of qkv_ceilings' JSON, as the tables' headers show it."""
    def g(key, field="gflops"):
        entry = c.get(key)
        return None if not entry else entry.get(field)

    parts = []
    if g("f32_fma"):
        parts.append(f"f32 FMA {c['f32_fma']['isa']} {g('f32_fma'):.0f} GFLOP/s (median {g('f32_fma', 'gflops_median'):.0f})"
                     + (f", 1 thread {g('f32_fma_1_thread'):.0f}" if g("f32_fma_1_thread") else "")
                     + (f", avx2 {g('f32_fma_avx2'):.0f}" if g("f32_fma_avx2") and c["f32_fma"]["isa"] != "avx2" else ""))
    parts.append(f"AVX512-BF16 {g('bf16_avx512_dpbf16ps'):.0f} GFLOP/s (median {g('bf16_avx512_dpbf16ps', 'gflops_median'):.0f})"
                 if g("bf16_avx512_dpbf16ps")
                 else "AVX512-BF16 n/a")
    parts.append(f"AMX bf16 {g('bf16_amx'):.0f} GFLOP/s" if g("bf16_amx")
                 else f"AMX bf16 n/a ({c.get('bf16_amx_reason', 'not measured')})")
    if g("mem_read", "gb_per_s"):
        parts.append(f"memory read {g('mem_read', 'gb_per_s'):.1f} GB/s (median {g('mem_read', 'gb_per_s_median'):.1f}; "
                     f"{c['mem_read']['buffer_mib']} MiB buffer)")
    return "; ".join(parts)
