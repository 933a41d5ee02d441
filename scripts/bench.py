#!/usr/bin/python3
"""Runs one benchmark suite and records it: every round of every engine, the host, its
ceilings and the commit, in bench/records/<suite>/<host kind>.json (scripts/bench/record.py
says what a record holds). BENCHMARKS.md and README's table are made from the records by
scripts/benchmarks_md.py.

    /usr/bin/python3 scripts/bench.py --list
    /usr/bin/python3 scripts/bench.py SUITE --help
    /usr/bin/python3 scripts/bench.py attention --repeats 5
    /usr/bin/python3 scripts/bench.py attention --quick --records /tmp/records   # a trial

Each suite is a module scripts/bench_<suite>.py with add_arguments(parser) and run(args),
which returns the record (or None when it wrote none: a helper process, a failed peer). A
suite's exit status is 1 when its engines' outputs disagreed (run() sets args.failed), as
before; the record is written either way, so a mismatch is kept beside the times.
"""
import argparse
import importlib
import os
import sys

from bench import log, record

# suite -> (module, one line). The order is the order of --list and of BENCHMARKS.md.
SUITES = {
    "attention": ("bench_attention", "attention forward: qkv beside ONNX Runtime and PyTorch, against the ceilings"),
    "autograd": ("bench_autograd", "attention forward + backward through torch autograd, beside PyTorch"),
    "options": ("bench_options", "what each attention option costs qkv, beside no option"),
    "models": ("bench_models", "BERT-base and GPT-2-small forward and decode beside PyTorch and ONNX Runtime"),
    "before_after": ("bench_before_after", "two builds of qkv side by side (before and after a change)"),
    "training": ("bench_training", "training the date translator beside its PyTorch twin"),
    "lm": ("bench_lm", "qkv train lm beside its PyTorch twin, decoding, held-out quality"),
    "recommender": ("bench_recommender", "SASRec and matrix factorisation beside their PyTorch twins"),
    "vision": ("bench_vision", "the ViT on Fashion-MNIST beside its PyTorch twin (training and classifying)"),
    "use_lite": ("bench_use_lite", "the Universal Sentence Encoder lite beside its published pipeline, torch, ORT"),
    "search": ("bench_search", "qkv search's dense, lexical (BM25) and hybrid rankings on the judged query set"),
}


def usage():
    width = max(map(len, SUITES))
    return "suites:\n" + "\n".join(f"  {name:<{width}}  {line}" for name, (_, line) in SUITES.items())


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "--list"):
        print(__doc__ if argv[:1] in (["-h"], ["--help"]) else "", end="")
        print(usage())
        return 0 if argv else 2
    suite, rest = argv[0], argv[1:]
    if suite not in SUITES:
        sys.exit(f"bench.py: no suite {suite!r}\n{usage()}")
    module = importlib.import_module(SUITES[suite][0])
    if not hasattr(module, "run"):
        sys.exit(f"bench.py: scripts/{SUITES[suite][0]}.py is not converted to a suite yet (no run(args))")
    doc = module.__doc__ or ""
    parser = argparse.ArgumentParser(prog=f"bench.py {suite}", description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(doc.split("\n\n")[1:]))
    parser.add_argument("--records", default=record.RECORDS, metavar="DIR",
                        help="where the record goes: DIR/<suite>/<host kind>.json (default bench/records)")
    parser.add_argument("--no-record", action="store_true", help="print the tables only, write no record")
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    args.suite = suite
    args.failed = False
    sys.stdout.reconfigure(line_buffering=True)
    rec = module.run(args)
    if rec is not None and not args.no_record:
        record.finish(rec)
        path = record.write(rec, os.path.abspath(args.records))
        log(f"recorded {os.path.relpath(path)}")
    return 1 if args.failed else 0


if __name__ == "__main__":
    sys.exit(main())
