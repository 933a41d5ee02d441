#!/usr/bin/python3
"""BENCHMARKS.md, README's performance table and the plots in docs/images/, made from the
recorded runs in bench/records/ (each written by `scripts/bench.py SUITE`).

    /usr/bin/python3 scripts/benchmarks_md.py            # writes them
    /usr/bin/python3 scripts/benchmarks_md.py --check    # exit 1, with a diff, where they differ

Every number is computed here from the records' rounds, by one rule: a table's value is the
median over the rounds (the mean where a subject says aggregate "mean": quality metrics over
seeds); a ratio is the peer's median time over qkv's (for a rate, qkv's
median rate over the peer's): above 1, qkv is faster; a percentage of a ceiling is qkv's
rate in each round over the ceiling sampled right after that round, median over the rounds.
A kind of host without a record of a suite shows the commit it was last measured at
(bench/records/hosts.json): a session cannot choose its host.

Needs /usr/bin/python3 and python3-matplotlib (Debian). The plots are deterministic:
svg.hashsalt fixed, text kept as text, no date or version in the metadata.
"""
import argparse
import difflib
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import atomic_file  # noqa: E402
from bench import ROOT, record  # noqa: E402

HOSTS = os.path.join(record.RECORDS, "hosts.json")
README_BEGIN = "<!-- benchmarks:begin -->"
README_END = "<!-- benchmarks:end -->"
IMAGES = os.path.join("docs", "images")
IMAGE_PREFIX = "bench-"

ENGINE_NAMES = {"qkv": "qkv", "torch": "PyTorch", "ort": "ONNX Runtime", "ort_bias": "ORT, causal as bias",
                "ort_unidirectional": "ORT, causal as unidirectional", "onednn_products": "oneDNN products alone",
                "torch_sdpa": "torch SDPA", "qkv_direct": "qkv direct", "tfjs": "TF.js pipeline",
                "dense": "dense (cosine)", "lexical": "lexical (BM25)", "hybrid": "hybrid (RRF)"}
CEILING_NAMES = {"f32_fma": "f32 FMA", "bf16_dpbf16ps": "vdpbf16ps", "amx_bf16": "AMX bf16", "mem_read": "memory read"}
SUITE_TITLES = {"attention": "Attention forward", "autograd": "Attention through torch autograd",
                "options": "Attention options inside the kernel", "models": "Models: BERT and GPT-2",
                "before_after": "Before and after a change", "training": "Training: the date translator",
                "lm": "Language model", "recommender": "Recommender", "vision": "Vision",
                "use_lite": "Universal Sentence Encoder lite", "search": "Search quality"}
# The headline's rows of the attention suite: these cases where recorded (others: one row
# per subject that has a peer, its last case).
HEADLINE_ATTENTION = ("f32 L=512", "f32 L=2048", "f32 L=4096", "f32 L=2048 causal", "bf16 L=2048",
                      "decode Lk=8192 H=32 D=128")
README_ATTENTION = ("f32 L=2048", "f32 L=2048 causal", "decode Lk=8192 H=32 D=128")


# --------------------------------------------------------------------------------------
# Numbers: one format each, so that the page is a function of the records.

def num(x):
    """Three significant figures at most, thousands grouped; '–' for None."""
    if x is None:
        return "–"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def times(x):
    return "–" if x is None else f"{x:.2f}×"


def pct(x):
    return "–" if x is None else f"{x:.0f}%"


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def aggregate(subject, values):
    """The subject's summary of its rounds: the median, or the mean where the record says so
    (quality metrics over seeds)."""
    if subject.get("aggregate") != "mean":
        return median(values)
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else None


def speedup(subject, case, peer):
    """How many times faster qkv is than peer: the subject's aggregate (medians unless it
    says means) over the rounds."""
    q, p = aggregate(subject, case["engines"].get("qkv", [])), aggregate(subject, case["engines"].get(peer, []))
    if not q or not p:
        return None
    return q / p if subject["better"] == "higher" else p / q


def ceiling_of(subject, case):
    """The ceiling a case is held against: its own where it names one (a bf16 case of an f32
    subject: vdpbf16ps), else its subject's; None for neither."""
    return case.get("ceiling") or subject.get("ceiling")


def of_ceiling(subject, case, engine="qkv"):
    """engine's rate in each round over that round's ceiling sample, in %, median."""
    if not ceiling_of(subject, case) or subject["better"] != "higher":
        return None
    pairs = zip(case["engines"].get(engine, []), case.get("ceiling_samples") or [])
    return median([100 * v / c for v, c in pairs if v is not None and c])


def vs_f32(subject, case, engine):
    """A bf16 case against its f32_case, for one engine: the ratio of the two aggregates for a
    speed (above 1: bf16 is faster), their difference for anything else (a quality metric:
    bf16's minus f32's); None without both."""
    base = next((c for c in subject["cases"] if c["case"] == case.get("f32_case")), None)
    if base is None:
        return None
    mine, f32 = aggregate(subject, case["engines"].get(engine, [])), aggregate(subject, base["engines"].get(engine, []))
    if mine is None or f32 is None:
        return None
    if not is_speed(subject):
        return mine - f32
    if not mine or not f32:
        return None
    return mine / f32 if subject["better"] == "higher" else f32 / mine


def vs_baseline(subject, case, engine="qkv"):
    """The case's value over the baseline case's in the same round, median over rounds."""
    base = next((c for c in subject["cases"] if c["case"] == subject.get("baseline")), None)
    if base is None:
        return None
    pairs = zip(case["engines"].get(engine, []), base["engines"].get(engine, []))
    return median([v / b for v, b in pairs if v is not None and b])


ENGINE_ORDER = ("qkv", "qkv_direct", "torch", "torch_sdpa", "ort", "ort_unidirectional", "ort_bias",
                "dense", "lexical", "hybrid")


def engines_of(subject):
    """qkv, then torch and ORT, then the others in the order they first appear."""
    seen = []
    for c in subject["cases"]:
        seen += [e for e in c["engines"] if e not in seen]
    return sorted(seen, key=lambda e: ENGINE_ORDER.index(e) if e in ENGINE_ORDER else len(ENGINE_ORDER) + seen.index(e))


def engine_name(e, rec=None):
    name = ENGINE_NAMES.get(e, e)
    versions = (rec or {}).get("versions", {})
    if e == "torch" and versions.get("torch"):
        name += f" {versions['torch'].split('a')[0].split('+')[0]}"
    if e == "ort" and versions.get("onnxruntime_node"):
        name += f" {versions['onnxruntime_node']}"
    return name


def quiet(rec):
    """Whether the host was quiet: at the start nothing else ran (1-min load < 0.5), at the
    end no more than the run's own threads (+ 0.5); None where the load was not recorded."""
    host = rec["host"]
    start, end = (host.get("loadavg_start") or [None])[0], (host.get("loadavg_end") or [None])[0]
    if start is None or end is None:
        return None
    return start < 0.5 and end < host.get("threads", 1) + 0.5


def load_note(rec):
    host = rec["host"]
    if quiet(rec) is None:
        return "load not recorded"
    return (f"1-min load {host['loadavg_start'][0]:.2f} at the start, {host['loadavg_end'][0]:.2f} at the end: "
            f"{'quiet' if quiet(rec) else 'not quiet'}")


def when(rec):
    dirty = " (with uncommitted changes)" if rec.get("dirty") else ""
    return f"{rec['commit']}{dirty}, {rec['date'][:10]}"


# --------------------------------------------------------------------------------------
# Reading.

def read_hosts(path=HOSTS):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def by_host(records):
    hosts = {}
    for rec in records:
        hosts.setdefault(rec["host"]["kind"], {})[rec["suite"]] = rec
    return hosts


def is_speed(subject):
    """A rate (GFLOP/s, tokens/s, ...) or a time: what "× faster" can be said of."""
    return subject["unit"].endswith("/s") or subject["unit"] in ("ms", "s", "µs")


def headline_rows(rec):
    """(label, subject, case) for the headline table: the speed subjects with a peer,
    unless the record says headline: false."""
    rows = []
    for subject in rec["subjects"]:
        peers = [e for e in engines_of(subject) if e != "qkv" and not e.startswith("qkv")]
        if not peers or "qkv" not in engines_of(subject) or not is_speed(subject) or not subject.get("headline", True):
            continue
        if rec["suite"] == "attention":
            rows += [(c["case"], subject, c) for c in subject["cases"] if c["case"] in HEADLINE_ATTENTION]
        else:
            # the last case with a peer, of each precision the subject has (f32 first)
            with_peer = [c for c in subject["cases"] if any(p in c["engines"] for p in peers)]
            for precision in sorted({c.get("precision", "f32") for c in with_peer}, key=lambda p: p != "f32"):
                c = [c for c in with_peer if c.get("precision", "f32") == precision][-1]
                rows.append((f"{subject['id']}: {c['case']}", subject, c))
    return rows


def best_peer(subject, case, family):
    """The fastest of a peer's variants in this case (torch: torch, torch_sdpa; ort: ort,
    ort_bias, ...): the headline holds qkv against the best each peer did."""
    variants = [e for e in case["engines"] if e == family or e.startswith(family + "_")]
    scored = [(speedup(subject, case, e), e) for e in variants]
    scored = [(x, e) for x, e in scored if x is not None]
    return min(scored)[1] if scored else None


def against(subject, case, family):
    peer = best_peer(subject, case, family)
    if peer is None:
        return "–"
    return times(speedup(subject, case, peer)) + ("" if peer == family else f" ({engine_name(peer)})")


# --------------------------------------------------------------------------------------
# BENCHMARKS.md

def headline(hosts, known, images):
    out = ["## qkv against PyTorch and ONNX Runtime, by kind of CPU", "",
           "The latest recorded run of each suite on each kind of host. × = how many times faster qkv is than the "
           "peer (the peer's median time over qkv's, in the same interleaved rounds: above 1, qkv is faster), "
           "against the fastest of the peer's variants in the run where it has several (named in brackets); "
           "% of ceiling = qkv's rate over the host's own ceiling (`qkv_ceilings`: f32 FMA for f32, vdpbf16ps for "
           "bf16, memory read for decode) sampled right after each round, median over the rounds.", "",
           "| host kind | case | qkv | × PyTorch | × ONNX Runtime | qkv % of ceiling | run |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for kind in sorted(set(hosts) | set(known)):
        recs = hosts.get(kind, {})
        rows = []
        for suite in sorted(recs, key=suite_order):
            rec = recs[suite]
            for label, subject, case in headline_rows(rec):
                ceiling = ceiling_of(subject, case)
                rows.append(f"| {kind} | {label} | {num(median(case['engines']['qkv']))} {subject['unit']} | "
                            f"{against(subject, case, 'torch')} | {against(subject, case, 'ort')} | "
                            f"{pct(of_ceiling(subject, case))}{' ' + CEILING_NAMES.get(ceiling, ceiling) if of_ceiling(subject, case) is not None else ''} | "
                            f"{suite} {rec['commit']}, {rec['date'][:10]}{', not quiet' if quiet(rec) is False else ''} |")
        if not rows:
            last = known.get(kind, {})
            since = max(last.get("suites", {}).items(), key=lambda kv: kv[1]["date"], default=None)
            what = f"not measured since {since[1]['commit']} ({since[1]['date']})" if since else "not measured"
            rows.append(f"| {kind} | {what}: numbers copied by hand in "
                        "[docs/benchmarks-history.md](docs/benchmarks-history.md) | | | | | |")
        out += rows
    out.append("")
    for kind, path in images:
        out.append(f"![{kind}: attention GFLOP/s against L]({path})")
    if images:
        out.append("")
    return out


def suite_order(suite):
    order = list(SUITE_TITLES)
    return (order.index(suite) if suite in order else len(order), suite)


def subject_table(rec, subject):
    engines = engines_of(subject)
    peers = [e for e in engines if e != "qkv"] if "qkv" in engines else []
    ceiling = subject.get("ceiling") if subject["better"] == "higher" else None
    # cases held against a ceiling of their own (bf16 ones: vdpbf16ps): the column names it per cell
    own_ceilings = subject["better"] == "higher" and any(
        c.get("ceiling") and c["ceiling"] != ceiling for c in subject["cases"])
    # bf16 cases beside the f32 case of the same work: bf16/f32 of each engine that trains in
    # a precision (qkv, torch under autocast; not a baseline such as popularity)
    precision_engines = [e for e in engines if (e == "qkv" or e == "torch" or e.startswith("torch_"))
                         and any(c.get("f32_case") and e in c["engines"] for c in subject["cases"])]
    rounds = sorted({len(next(iter(c["engines"].values()))) for c in subject["cases"]})
    better = "higher is better" if subject["better"] == "higher" else "lower is better"
    out = [f"#### {subject['title']}", "",
           f"{subject['metric']}, {subject['unit']} ({better}), {subject.get('aggregate', 'median')} of "
           f"{'/'.join(map(str, rounds))} round{'s' if rounds != [1] else ''}.", ""]
    head = ["case"] + [engine_name(e, rec) for e in engines] + [f"qkv/{engine_name(p)}" for p in peers]
    if own_ceilings:
        head.append("qkv % of ceiling")
    elif ceiling:
        head.append(f"qkv % {CEILING_NAMES.get(ceiling, ceiling)}")
    if subject.get("baseline"):
        head.append(f"qkv vs {subject['baseline']}")
    head += [f"{engine_name(e)} bf16 {'/' if is_speed(subject) else '−'} f32" for e in precision_engines]
    out += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in subject["cases"]:
        cells = [c["case"]] + [num(aggregate(subject, c["engines"].get(e, []))) for e in engines]
        cells += [times(speedup(subject, c, p)) for p in peers]
        if own_ceilings:
            name = ceiling_of(subject, c)
            cells.append(pct(of_ceiling(subject, c)) + (f" {CEILING_NAMES.get(name, name)}"
                                                         if of_ceiling(subject, c) is not None else ""))
        elif ceiling:
            cells.append(pct(of_ceiling(subject, c)))
        if subject.get("baseline"):
            cells.append(times(vs_baseline(subject, c)))
        for e in precision_engines:
            x = vs_f32(subject, c, e)
            cells.append(times(x) if is_speed(subject) else "–" if x is None else f"{x:+.4f}")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    return out


def ceilings_lines(rec):
    lines = []
    for name, c in sorted(rec["ceilings"].items()):
        s = [x for x in c["samples"] if x is not None]
        if s:
            lines.append(f"- {CEILING_NAMES.get(name, name)}: {num(s[0])} {c['unit']} at the start; "
                         f"{len(s)} samples, median {num(statistics.median(s))}, range {num(min(s))}–{num(max(s))}")
    return lines


def host_section(kind, recs, known, images):
    first = next(iter(recs.values()))
    host = first["host"]
    out = [f"## {kind}", "",
           f"{host['cpu']}; {host['cores']} CPUs, {host['threads']} threads per engine; "
           f"{', '.join(host['features'])}.", ""]
    missing = [s for s in known.get(kind, {}).get("suites", {}) if s not in recs]
    if missing:
        out += ["Not measured on this kind of host since: " + "; ".join(
            f"{s} {known[kind]['suites'][s]['commit']} ({known[kind]['suites'][s]['date']})"
            for s in sorted(missing, key=suite_order)) + " (numbers copied by hand: "
            "[docs/benchmarks-history.md](docs/benchmarks-history.md)).", ""]
    for suite in sorted(recs, key=suite_order):
        rec = recs[suite]
        out += [f"### {SUITE_TITLES.get(suite, suite)}", "",
                f"`{rec['command']}` at {when(rec)}; {load_note(rec)}.", ""]
        versions = ", ".join(f"{k} {v}" for k, v in sorted(rec["versions"].items()) if v is not None)
        out += [f"Versions: {versions}.", ""]
        lines = ceilings_lines(rec)
        if lines:
            out += ["Ceilings (`qkv_ceilings`, this run):", ""] + lines + [""]
        for subject in rec["subjects"]:
            out += subject_table(rec, subject)
        for path, title in images.get((kind, suite), []):
            out += [f"![{title}]({path})", ""]
        if rec["notes"]:
            out += ["Notes:", ""] + [f"- {n}" for n in rec["notes"]] + [""]
    return out


def unmeasured_section(kind, known):
    entry = known[kind]
    out = [f"## {kind}", "", f"{entry['description']}.", "",
           "No recorded run of this kind of host; last measured (numbers copied by hand in "
           "[docs/benchmarks-history.md](docs/benchmarks-history.md)):", ""]
    for suite, last in sorted(entry.get("suites", {}).items(), key=lambda kv: suite_order(kv[0])):
        out.append(f"- {suite}: not measured since {last['commit']} ({last['date']})")
    return out + [""]


def benchmarks_md(records, known, images):
    hosts = by_host(records)
    out = ["# Benchmarks", "",
           "Made by `scripts/benchmarks_md.py` from the recorded runs in `bench/records/` (each written by "
           "`scripts/bench.py SUITE`, every round kept); do not edit by hand: the test "
           "`scripts/benchmarks_md.py --check` fails when this page differs from what the records make. "
           "The machines are shared and noisy: compare the ratios, measured side by side in one run, "
           "not absolute numbers across runs. Earlier runs, experiments, and numbers copied by hand: "
           "[docs/benchmarks-history.md](docs/benchmarks-history.md).", "",
           "To measure your machine: `/usr/bin/python3 scripts/bench.py SUITE` (`--list` names the suites; each "
           "installs its peers), then `/usr/bin/python3 scripts/benchmarks_md.py`.", ""]
    plots = [(kind, path) for (kind, suite), entries in sorted(images.items()) if suite == "attention"
             for path, _ in entries[:1]]
    out += headline(hosts, known, plots)
    for kind in sorted(hosts):
        out += host_section(kind, hosts[kind], known, images)
    for kind in sorted(set(known) - set(hosts)):
        out += unmeasured_section(kind, known)
    return "\n".join(out).rstrip("\n") + "\n"


def readme_table(records, known):
    hosts = by_host(records)
    out = [README_BEGIN, "",
           "Attention forward, f32 unless stated, 2 threads, from the latest recorded run on each kind of CPU "
           "([BENCHMARKS.md](BENCHMARKS.md) has every suite). × = times faster than the peer in the same "
           "interleaved rounds; % = of the host's measured ceiling.", "",
           "| host kind | case | qkv | × PyTorch | × ONNX Runtime | % of ceiling |",
           "| --- | --- | --- | --- | --- | --- |"]
    for kind in sorted(set(hosts) | set(known)):
        rec = hosts.get(kind, {}).get("attention")
        if rec is None:
            last = known.get(kind, {}).get("suites", {}).get("attention")
            out.append(f"| {kind} | not measured since {last['commit']} | | | | |" if last
                       else f"| {kind} | not measured | | | | |")
            continue
        for subject in rec["subjects"]:
            for c in subject["cases"]:
                if c["case"] in README_ATTENTION:
                    out.append(f"| {kind} | {c['case']} | {num(median(c['engines']['qkv']))} {subject['unit']} | "
                               f"{against(subject, c, 'torch')} | {against(subject, c, 'ort')} | "
                               f"{pct(of_ceiling(subject, c))} |")
    out += ["", README_END]
    return out


def with_readme_region(text, table):
    """README's text with the lines between the markers replaced; None without markers."""
    lines = text.split("\n")
    try:
        begin = next(i for i, l in enumerate(lines) if l.strip() == README_BEGIN)
        end = next(i for i, l in enumerate(lines) if l.strip() == README_END and i > begin)
    except StopIteration:
        return None
    return "\n".join(lines[:begin] + table + lines[end + 1:])


# --------------------------------------------------------------------------------------
# Plots (SVG, deterministic).

def svg_of(figure):
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    return buffer.getvalue()


def plots(records):
    """{relative path: SVG bytes} and {(host kind, suite): [(path, title)]}."""
    try:
        import matplotlib
    except ImportError:
        sys.exit("benchmarks_md.py: the plots need python3-matplotlib: apt-get install python3-matplotlib "
                 "(scripts/setup.sh test installs it)")
    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.hashsalt": "qkv-benchmarks", "svg.fonttype": "none",
                                "font.family": "DejaVu Sans", "font.size": 9, "axes.grid": True,
                                "grid.alpha": 0.3, "figure.figsize": (6.4, 3.6)})
    import matplotlib.pyplot as plt

    files, index = {}, {}
    for rec in records:
        kind = rec["host"]["kind"]
        for subject in rec["subjects"]:
            cases = [c for c in subject["cases"] if c.get("x") is not None]
            if rec["suite"] != "attention" or subject["id"] != "attention" or len(cases) < 2:
                continue
            fig, ax = plt.subplots()
            for e in engines_of(subject):
                points = sorted((c["x"], median(c["engines"][e])) for c in cases if e in c["engines"])
                points = [p for p in points if p[1] is not None]
                if points:
                    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                            label=engine_name(e, rec), linestyle="--" if e == "onednn_products" else "-")
            # The host's ceiling moves: each case's own samples (median), not one line.
            ceiling = [(c["x"], median(c.get("ceiling_samples") or [])) for c in cases]
            ceiling = sorted(p for p in ceiling if p[1] is not None)
            if ceiling:
                ax.plot([p[0] for p in ceiling], [p[1] for p in ceiling], color="grey", linestyle=":", marker="x",
                        label=f"{CEILING_NAMES.get(subject['ceiling'], subject['ceiling'])} ceiling, sampled in "
                              "the case's rounds (median)")
            ax.set_xscale("log", base=2)
            ax.set_xticks([c["x"] for c in cases], [str(c["x"]) for c in cases])
            ax.set_xlabel(subject.get("x") or "x")
            ax.set_ylabel(subject["unit"])
            ax.set_ylim(bottom=0)
            ax.set_title(f"{subject['title']}\n{kind}, {rec['commit']}, {rec['date'][:10]}", fontsize=9)
            ax.legend(fontsize=7, loc="lower left")
            fig.tight_layout()
            path = os.path.join(IMAGES, f"{IMAGE_PREFIX}{rec['suite']}-{subject['id']}-{kind}.svg")
            files[path] = svg_of(fig)
            plt.close(fig)
            index.setdefault((kind, rec["suite"]), []).append((path, f"{kind}: {subject['title']}"))
        for name, curves in sorted(rec.get("curves", {}).items()):
            fig, ax = plt.subplots()
            for e, points in curves.items():
                ax.plot([p[0] for p in points], [p[1] for p in points], label=engine_name(e, rec))
            ax.set_xlabel("step")
            ax.set_ylabel(name)
            ax.set_title(f"{SUITE_TITLES.get(rec['suite'], rec['suite'])}: {name}\n{kind}, {rec['commit']}, "
                         f"{rec['date'][:10]}", fontsize=9)
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = os.path.join(IMAGES, f"{IMAGE_PREFIX}{rec['suite']}-{name}-{kind}.svg")
            files[path] = svg_of(fig)
            plt.close(fig)
            index.setdefault((kind, rec["suite"]), []).append((path, f"{kind}: {rec['suite']} {name}"))
    return files, index


# --------------------------------------------------------------------------------------

def outputs(root, records_dir):
    """{relative path: bytes} of everything this script writes, README.md's whole text included
    (None for README.md when it lacks the markers)."""
    records = record.load_all(records_dir)
    known = read_hosts(os.path.join(records_dir, "hosts.json"))
    files, index = plots(records)
    files["BENCHMARKS.md"] = benchmarks_md(records, known, index).encode("utf-8")
    readme = os.path.join(root, "README.md")
    text = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
    made = with_readme_region(text, readme_table(records, known))
    files["README.md"] = None if made is None else made.encode("utf-8")
    return files


def stale_images(root, files):
    directory = os.path.join(root, IMAGES)
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(IMAGES, n) for n in os.listdir(directory)
                  if n.startswith(IMAGE_PREFIX) and n.endswith(".svg") and os.path.join(IMAGES, n) not in files)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 where they differ")
    parser.add_argument("--root", default=ROOT, help="where BENCHMARKS.md, README.md and docs/images/ are "
                        "(default: the repository)")
    parser.add_argument("--records", default=record.RECORDS, help="the records' directory (default bench/records)")
    args = parser.parse_args()
    files = outputs(args.root, args.records)
    differ = []
    for rel, data in sorted(files.items()):
        path = os.path.join(args.root, rel)
        if data is None:
            differ.append(f"{rel}: no {README_BEGIN} ... {README_END} markers")
            continue
        try:
            with open(path, "rb") as f:
                now = f.read()
        except FileNotFoundError:
            now = None
        if now == data:
            continue
        if args.check:
            if rel.endswith(".md") and now is not None:
                sys.stdout.writelines(difflib.unified_diff(
                    now.decode("utf-8", "replace").splitlines(True), data.decode("utf-8").splitlines(True),
                    rel, rel + " (from the records)", n=1))
            differ.append(f"{rel}: {'missing' if now is None else 'differs from what the records make'}")
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_file.write(path, data)
            print(f"wrote {rel}")
    for rel in stale_images(args.root, files):
        if args.check:
            differ.append(f"{rel}: no record makes it")
        else:
            os.remove(os.path.join(args.root, rel))
            print(f"removed {rel}")
    if args.check:
        if differ:
            print("\n" + "\n".join(differ))
            print("make them again: /usr/bin/python3 scripts/benchmarks_md.py")
            return 1
        print(f"BENCHMARKS.md, README.md's table and {len(files) - 2} plots equal what the records make")
        return 0
    for line in differ:
        print(f"not written: {line}", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
