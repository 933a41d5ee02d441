"""The JSON record every benchmark suite writes (scripts/bench.py SUITE), from which
scripts/benchmarks_md.py makes BENCHMARKS.md, README's table and the plots.

A record holds every round, never a summary: medians, ratios and percentages of a ceiling
are computed by the generator from the raw rounds, so one rule makes every table.

Where: bench/records/<suite>/<host kind>.json, the latest run of a suite on a kind of host
(git keeps the older ones). A host kind is the CPU's vendor and family and its widest
instruction set, e.g. intel-xeon-avx512-bf16, amd-epyc-avx512-bf16, amd-epyc-avx2: a
session cannot choose its host, so each kind keeps its own latest run.

Schema 1 (every key present unless marked optional):

  {"schema": 1,
   "suite": "attention",                      # the name given to scripts/bench.py
   "command": "scripts/bench.py attention --repeats 5",   # as run
   "commit": "9afc77b", "dirty": false,       # git rev-parse --short HEAD; uncommitted changes (outside bench/records)?
   "date": "2026-12-07T12:00:00Z",            # UTC, when the run started
   "host": {"kind": "intel-xeon-avx512-bf16", "cpu": "Intel(R) Xeon(R) Processor",
            "features": ["avx2", "avx512_bf16", ...],   # sorted, from /proc/cpuinfo's flags
            "cores": 2,                         # CPUs this process may run on
            "threads": 2,                       # threads every engine was given
            "loadavg_start": [0.3, 1.4, 2.0], "loadavg_end": [...]},   # /proc/loadavg 1/5/15 min
   "versions": {"qkv": "...", "torch": "1.13.1", "torch_blas": "...", "onnxruntime_node": "1.30.0",
                "node": "v18...", "python": "3.11.2", ...},          # null where not used
   "settings": {...},                          # the suite's options (rounds, warm-up, seed, ...)
   "ceilings": {"f32_fma": {"unit": "GFLOP/s", "samples": [...]},  # qkv_ceilings: at the start,
                "mem_read": {"unit": "GB/s", "samples": [...]}},    # then one per round
   "subjects": [
     {"id": "attention", "title": "Attention forward, f32",
      "metric": "throughput", "unit": "GFLOP/s", "better": "higher",   # or "lower" (ms, s, MiB)
      "ceiling": "f32_fma",                    # optional (null): the ceiling % is taken of
      "x": "L",                                # optional (null): the axis a plot draws cases on
      "baseline": null,                        # optional: a case the others are compared with,
                                               #   round by round (options: "no option")
      "headline": true,                        # optional: false keeps it out of BENCHMARKS.md's
                                               #   opening table (a detail of another subject)
      "aggregate": "mean",                     # optional ("median" when absent): how the tables
                                               #   summarise the rounds (quality over seeds: mean)
      "cases": [
        {"case": "f32 L=2048", "x": 2048,      # x optional
         "engines": {"qkv": [every round], "torch": [...], "ort": [...]},   # the metric, per round
         "ceiling_samples": [per round],       # optional: the ceiling sampled after each round
         "ceiling": "bf16_dpbf16ps",           # optional: the ceiling this case is held against,
                                               #   where not the subject's (a bf16 case of an f32
                                               #   subject: vdpbf16ps, not f32 FMA)
         "precision": "bf16",                  # optional: the precision of a training case
                                               #   ("f32" when absent); BENCHMARKS.md's headline
                                               #   takes one row per precision
         "f32_case": "sotu-gpt",               # optional, with precision: the case of the same
                                               #   subject that ran the same work in f32 (the
                                               #   tables show each engine's ratio to it)
         "info": {...}}]}],                     # optional: free-form facts (|diff|, shapes)
   "curves": {"loss": {"qkv": [[step, loss], ...], "torch": [...]}},    # optional
   "notes": ["..."]}                           # what a reader needs: causal expression, noise

Engine names: "qkv" first; peers "torch", "ort" (ONNX Runtime), or any other short name
(the generator prints known ones by their full names). A case's engines may lack a peer
(no softcap in ORT): the table shows "-". Every engine list of a case has one value per
round; a round where an engine failed is null.

Use (a suite's run(args) returns the record; scripts/bench.py writes it):

    rec = record.new("attention", threads=args.threads)
    rec["versions"].update(torch=..., onnxruntime_node=...)
    record.add_ceiling(rec, "f32_fma", "GFLOP/s", [452.1])
    s = record.add_subject(rec, "attention", "Attention forward, f32", "throughput", "GFLOP/s",
                           better="higher", ceiling="f32_fma", x="L")
    record.add_case(s, "f32 L=2048", {"qkv": [...], "torch": [...]}, x=2048, ceiling_samples=[...])
    record.add_curve(rec, "loss", "qkv", [[0, 4.1], [10, 3.2]])
    rec["notes"].append("...")
    return rec          # scripts/bench.py: record.finish(rec); record.write(rec)
"""
import datetime
import json
import os
import platform
import subprocess
import sys

from bench import ROOT

SCHEMA = 1
RECORDS = os.path.join(ROOT, "bench", "records")

# /proc/cpuinfo flags worth naming in a record (what the kernels and ceilings use).
FEATURES = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
            "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu_info(cpuinfo="/proc/cpuinfo"):
    """-> (vendor_id, model name, set of flags) of the first CPU listed."""
    vendor = model = ""
    flags = set()
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "vendor_id" and not vendor:
                    vendor = value
                elif key == "model name" and not model:
                    model = value
                elif key == "flags" and not flags:
                    flags = set(value.split())
                if vendor and model and flags:
                    break
    except OSError:
        pass
    return vendor, model or platform.processor() or platform.machine(), flags


def host_kind(vendor, model, flags):
    """A slug naming a kind of host: vendor, family, widest instruction set.
    ("GenuineIntel", "Intel(R) Xeon(R) Processor", {..avx512_bf16..}) -> "intel-xeon-avx512-bf16"."""
    brand = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(vendor, (vendor or platform.machine()).lower())
    lowered = model.lower()
    family = next((f for f in ("epyc", "xeon", "ryzen", "core", "threadripper") if f in lowered), None)
    if "amx_tile" in flags:
        isa = "amx"
    elif "avx512_bf16" in flags:
        isa = "avx512-bf16"
    elif "avx512f" in flags:
        isa = "avx512"
    elif "avx2" in flags:
        isa = "avx2"
    else:
        isa = platform.machine().lower()
    return "-".join(p for p in (brand, family, isa) if p)


def loadavg():
    """The 1, 5 and 15 minute load averages, or None."""
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def git(*args):
    """git's output in the repository, or None where git fails or is not installed."""
    try:
        done = subprocess.run(["git", "-C", ROOT, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except FileNotFoundError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def dirty():
    """Whether the measured tree has uncommitted changes (None where git fails). The records
    themselves are left out, so that a session recording several suites in a row does not
    mark all but the first dirty."""
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/records")
    return bool(status) if status is not None else None


def command_line(argv=None):
    """The command as run, relative to the repository root where it lies inside."""
    argv = list(sys.argv if argv is None else argv)
    if argv:
        path = os.path.abspath(argv[0])
        if path.startswith(ROOT + os.sep):
            argv[0] = os.path.relpath(path, ROOT)
    return " ".join(a if a and all(c.isalnum() or c in "-_=./,:@+" for c in a) else json.dumps(a) for a in argv)


def new(suite, threads, argv=None, settings=None):
    """A record of a run starting now: host, commit, date, load; no subjects yet."""
    vendor, model, flags = cpu_info()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {
        "schema": SCHEMA,
        "suite": suite,
        "command": command_line(argv),
        "commit": git("rev-parse", "--short=7", "HEAD"),
        "dirty": dirty(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": {"kind": host_kind(vendor, model, flags), "cpu": model,
                 "features": sorted(f for f in FEATURES if f in flags),
                 "cores": cores, "threads": threads,
                 "loadavg_start": loadavg(), "loadavg_end": None},
        "versions": {"python": platform.python_version()},
        "settings": dict(settings or {}),
        "ceilings": {},
        "subjects": [],
        "notes": [],
    }


def add_ceiling(rec, name, unit, samples):
    """Adds samples (GFLOP/s, GB/s) of ceiling `name` (qkv_ceilings: "f32_fma",
    "bf16_dpbf16ps", "amx_bf16", "mem_read"), creating it on first use."""
    entry = rec["ceilings"].setdefault(name, {"unit": unit, "samples": []})
    if entry["unit"] != unit:
        raise ValueError(f"ceiling {name}: unit {unit} differs from {entry['unit']}")
    entry["samples"] += [s for s in samples if s is not None]
    return entry


def add_subject(rec, id, title, metric, unit, better="higher", ceiling=None, x=None, baseline=None, headline=True,
                aggregate="median"):
    """A table of the record: one metric in one unit, cases as rows, engines as columns.
    baseline: a case's name: each case's value over that case's in the same round.
    headline: False keeps it out of BENCHMARKS.md's opening table.
    aggregate: "median" (times, rates) or "mean" (a quality metric over seeds, as papers
    report it): what the tables show of the rounds."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better: 'higher' or 'lower', not {better!r}")
    if aggregate not in ("median", "mean"):
        raise ValueError(f"aggregate: 'median' or 'mean', not {aggregate!r}")
    if any(s["id"] == id for s in rec["subjects"]):
        raise ValueError(f"subject {id} twice")
    subject = {"id": id, "title": title, "metric": metric, "unit": unit, "better": better,
               "ceiling": ceiling, "x": x, "baseline": baseline, "cases": []}
    if not headline:
        subject["headline"] = False
    if aggregate != "median":
        subject["aggregate"] = aggregate
    rec["subjects"].append(subject)
    return subject


def add_case(subject, case, engines, x=None, ceiling_samples=None, info=None, ceiling=None, precision=None,
             f32_case=None):
    """engines: {engine: [the metric in every round]} (lists of one length). ceiling: the
    ceiling ceiling_samples are of, where not the subject's; precision: "bf16" for a case of
    bf16 training (None: f32, the case as before precisions); f32_case: the subject's case
    that ran the same work in f32 (added before this one)."""
    lengths = {len(v) for v in engines.values()}
    if len(lengths) > 1:
        raise ValueError(f"{subject['id']}/{case}: engines have {sorted(lengths)} rounds")
    entry = {"case": case, "engines": {e: [None if v is None else float(v) for v in vs] for e, vs in engines.items()}}
    if x is not None:
        entry["x"] = x
    if ceiling_samples is not None:
        entry["ceiling_samples"] = [None if v is None else float(v) for v in ceiling_samples]
    if info:
        entry["info"] = info
    if ceiling is not None and ceiling != subject.get("ceiling"):
        entry["ceiling"] = ceiling
    if precision is not None and precision != "f32":
        entry["precision"] = precision
    if f32_case is not None:
        if not any(c["case"] == f32_case for c in subject["cases"]):
            raise ValueError(f"{subject['id']}/{case}: f32_case {f32_case!r} is not a case of the subject yet")
        entry["f32_case"] = f32_case
    subject["cases"].append(entry)
    return entry


def add_curve(rec, name, engine, points):
    """A curve to plot (loss against step): points [[x, y], ...]."""
    rec.setdefault("curves", {}).setdefault(name, {})[engine] = [[float(a), float(b)] for a, b in points]


def finish(rec):
    rec["host"]["loadavg_end"] = loadavg()
    return rec


def validate(rec):
    """Raises ValueError naming the first thing wrong with a record (the generator reads
    only records that pass)."""
    def need(cond, what):
        if not cond:
            raise ValueError(f"record {rec.get('suite')!r}: {what}")

    need(rec.get("schema") == SCHEMA, f"schema {rec.get('schema')!r}, not {SCHEMA}")
    for key in ("suite", "command", "commit", "date", "host", "versions", "ceilings", "subjects", "notes"):
        need(key in rec, f"no {key!r}")
    need(rec["host"].get("kind"), "no host kind")
    for name, c in rec["ceilings"].items():
        need("unit" in c and isinstance(c.get("samples"), list), f"ceiling {name} lacks unit or samples")
    for s in rec["subjects"]:
        for key in ("id", "title", "metric", "unit", "better", "cases"):
            need(key in s, f"subject {s.get('id')} has no {key!r}")
        need(s["better"] in ("higher", "lower"), f"subject {s['id']}: better {s['better']!r}")
        need(s.get("aggregate", "median") in ("median", "mean"), f"subject {s['id']}: aggregate {s.get('aggregate')!r}")
        need(s.get("ceiling") is None or s["ceiling"] in rec["ceilings"],
             f"subject {s['id']}: ceiling {s.get('ceiling')!r} not in ceilings")
        for c in s["cases"]:
            need(c.get("engines"), f"{s['id']}/{c.get('case')}: no engines")
            need(len({len(v) for v in c["engines"].values()}) == 1, f"{s['id']}/{c['case']}: rounds differ")
            need(c.get("ceiling") is None or c["ceiling"] in rec["ceilings"],
                 f"{s['id']}/{c['case']}: ceiling {c.get('ceiling')!r} not in ceilings")
            need(c.get("f32_case") is None or any(x["case"] == c["f32_case"] for x in s["cases"]),
                 f"{s['id']}/{c['case']}: f32_case {c.get('f32_case')!r} is no case of the subject")
    return rec


def path_for(rec, root=RECORDS):
    return os.path.join(root, rec["suite"], rec["host"]["kind"] + ".json")


def dumps(rec):
    """The record's text: sorted keys, 1-space indent, a newline at the end (stable diffs)."""
    return json.dumps(rec, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write(rec, root=RECORDS):
    """Writes the record atomically to root/<suite>/<host kind>.json; -> its path."""
    import atomic_file

    validate(rec)
    path = path_for(rec, root)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_file.write(path, dumps(rec))
    return path


def load_all(root=RECORDS):
    """Every record under root, validated, sorted by (suite, host kind)."""
    found = []
    for directory, _, files in os.walk(root):
        for name in files:
            if name.endswith(".json") and directory != root:
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    found.append(validate(json.load(f)))
    return sorted(found, key=lambda r: (r["suite"], r["host"]["kind"]))
