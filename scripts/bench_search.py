#!/usr/bin/python3
"""Search quality: `qkv search`'s dense, lexical and hybrid rankings on the judged query set.

Run with Debian's Python (it builds build/'s _qkv when missing):

    /usr/bin/python3 scripts/bench.py search [--threads 2] [--repeats 3]
    /usr/bin/python3 scripts/bench.py search --pool     # the pooled hits not yet judged

It prints its tables and records them in bench/records/search/<host kind>.json
(scripts/bench/record.py).

What it does:
  1. The corpus: the Debian package corpus (scripts/fetch_data.sh debian-packages into
     ~/.cache/qkv-bench/data/debian-packages, or --corpus FILE), one package a line,
     "name: synopsis. first paragraph". The model: the Universal Sentence Encoder lite
     (scripts/fetch_model.sh use-lite into ~/.cache/qkv-bench/models/use-lite, or --model).
  2. The judged set, tests/search/judged_queries.tsv (its header says how it was made): a
     package it names that the corpus lacks is an error naming the query and the package.
  3. The index: qkv.SearchIndex(..., reindex=True) into a temporary directory, timed once
     (embedding every line and building the BM25 index; --threads threads); then the BM25
     index alone (qkv's _Bm25Index over the same lines) built --repeats times: the extra
     time the lexical part costs. Its bytes: on disk, the bm25.* tensors of the index file
     (from its safetensors header) beside the embeddings'; in memory, Bm25Index's arrays and
     terms (memory_bytes).
  4. Per query and ranking (dense: cosine; lexical: BM25; hybrid: reciprocal rank fusion,
     k = 60), the top 10, each hit's package the name before the line's first ':'.
     recall@10 = relevant packages in the top 10 / relevant packages judged; nDCG@10 with
     binary gains, DCG = Σ_{i=1..10} rel_i / log2(i + 1), over the ideal DCG of the query's
     relevant packages (at most 10) ranked first. A package not judged counts as not
     relevant; the share of the top 10 that is judged is reported (after pooling every
     system's top 10 was judged, so 100% unless the corpus or a system changed). Reported:
     the mean over the queries, each query's values in the record.

Nothing here asserts a metric; the exit status is 1 only when something could not run.
"""
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench import CACHE, ROOT, log, record, twins
from bench.build import add_arguments as add_build_arguments, ensure_programs

JUDGED = os.path.join(ROOT, "tests", "search", "judged_queries.tsv")
K = 10
RANKINGS = ("dense", "lexical", "hybrid")
SCORES = {"dense": "cosine", "lexical": "BM25", "hybrid": "RRF, k 60"}
MIN_QUERIES = 40


def add_arguments(parser):
    parser.add_argument("--threads", type=int, default=2, help="qkv's threads (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the BM25 build (default 3)")
    parser.add_argument("--corpus", help="the package corpus (default: fetched into the bench cache)")
    parser.add_argument("--model", help="a converted use-lite directory (default: fetched into the bench cache)")
    parser.add_argument("--judged", default=JUDGED, help="the judged query set (default tests/search/judged_queries.tsv)")
    parser.add_argument("--index", help="an index file to use as it is (built when missing; its build is then "
                                        "not timed)")
    parser.add_argument("--pool", action="store_true",
                        help="print each query's pooled top-10 packages not yet judged, and record nothing")
    add_build_arguments(parser)


# --------------------------------------------------------------------------------------
# The judged set and the metrics (tests/python/test_search_quality.py checks them by hand).

def load_judged(path, packages=None):
    """The judged set: [{"query", "relevant": [names], "not_relevant": [names], "line"}].
    packages: the corpus' package names; a judged name not among them is a ValueError
    naming the query and the package. Any line not in the format is a ValueError naming
    file and line."""
    queries = []
    seen = set()
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            where = f"{path}:{number}"
            columns = line.split("\t")
            if len(columns) != 3:
                raise ValueError(f"{where}: {len(columns)} tab-separated columns, expected 3 "
                                 "(query, relevant packages, packages judged not relevant)")
            query, relevant, not_relevant = columns[0].strip(), columns[1].split(), columns[2].split()
            if not query:
                raise ValueError(f"{where}: the query is empty")
            if query in seen:
                raise ValueError(f"{where}: query {query!r} appears twice")
            seen.add(query)
            if not relevant:
                raise ValueError(f"{where}: query {query!r} has no relevant package")
            judged = relevant + not_relevant
            twice = sorted({p for p in judged if judged.count(p) > 1})
            if twice:
                raise ValueError(f"{where}: query {query!r} judges {', '.join(twice)} twice")
            if packages is not None:
                missing = [p for p in judged if p not in packages]
                if missing:
                    raise ValueError(f"{where}: query {query!r} names package {missing[0]!r}, which is not in the "
                                     f"corpus{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}")
            queries.append({"query": query, "relevant": relevant, "not_relevant": not_relevant, "line": number})
    return queries


def package_of(text):
    """A corpus line's package: the name before its first ':'."""
    return text.split(":", 1)[0].strip()


def recall_at(ranked, relevant, k=K):
    """The share of the relevant packages among the first k of ranked."""
    return len(set(ranked[:k]) & set(relevant)) / len(relevant)


def ndcg_at(ranked, relevant, k=K):
    """nDCG@k with binary gains: Σ_{i=1..k} rel_i / log2(i + 1) over the same sum for the
    relevant packages ranked first (at most k of them)."""
    relevant = set(relevant)
    dcg = sum(1 / math.log2(i + 2) for i, p in enumerate(ranked[:k]) if p in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal


# --------------------------------------------------------------------------------------

def fetch_model(args):
    if args.model:
        return args.model
    directory = os.path.join(CACHE, "models", "use-lite")
    if not os.path.isfile(os.path.join(directory, "model.safetensors")):
        log(f"scripts/fetch_model.sh use-lite {directory}")
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "fetch_model.sh"), "use-lite", directory],
                       check=True, stdout=sys.stderr)
    return directory


def lexical_disk_bytes(index_path):
    """(bytes of the bm25.* tensors, bytes of the embeddings) in the index file's header."""
    with open(index_path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    spans = {name: t["data_offsets"][1] - t["data_offsets"][0] for name, t in header.items() if name != "__metadata__"}
    return sum(v for n, v in spans.items() if n.startswith("bm25.")), spans["embeddings"]


def top_packages(index, query, ranking):
    hits = index.search(query, top=K, hybrid=ranking == "hybrid", lexical=ranking == "lexical")
    return [package_of(h["text"]) for h in hits]


def pool(judged, index, lines):
    """Prints each query's pooled packages not yet judged, with their lines."""
    by_name = {package_of(t): t for t in lines}
    for q in judged:
        done = set(q["relevant"]) | set(q["not_relevant"])
        new = []
        for ranking in RANKINGS:
            new += [p for p in top_packages(index, q["query"], ranking) if p not in done and p not in new]
        print(f"## {q['query']}\t{len(new)} to judge")
        for p in new:
            print(f"   {by_name[p][:150]}")


def run(args):
    build_dir = os.path.abspath(args.build_dir)
    ensure_programs(build_dir, {"_qkv": "python/qkv/_qkv*.so", "qkv_python_files": "python/qkv/__init__.py"},
                    args.rebuild)
    sys.path.insert(0, os.path.join(build_dir, "python"))
    import qkv
    from qkv import _qkv
    qkv.set_num_threads(args.threads)

    corpus = args.corpus or os.path.join(twins.fetch_data("debian-packages"), "debian-packages.txt")
    model_dir = fetch_model(args)
    with open(corpus, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    judged = load_judged(args.judged, {package_of(t) for t in lines})
    if len(judged) < MIN_QUERIES:
        raise ValueError(f"{args.judged}: {len(judged)} queries, fewer than {MIN_QUERIES}")
    log(f"{len(judged)} judged queries, {len(lines)} corpus lines")
    model = qkv.load_model(model_dir)

    work = tempfile.mkdtemp(prefix="qkv-bench-search-")
    try:
        index_path = args.index or os.path.join(work, "corpus.qkv-index")
        started = time.perf_counter()
        index = qkv.SearchIndex(model, corpus, index=index_path, reindex=not args.index)
        index_s = time.perf_counter() - started if index.built else None
        if args.pool:
            pool(judged, index, lines)
            return None
        rec = record.new("search", args.threads, settings={
            "k": K, "queries": len(judged), "corpus_lines": len(lines), "repeats": args.repeats,
            "bm25": {"k1": _qkv._Bm25Index.k1, "b": _qkv._Bm25Index.b}, "rrf_k": 60,
            "judged": os.path.relpath(args.judged, ROOT), "query_order": [q["query"] for q in judged]})
        rec["versions"]["qkv"] = getattr(qkv, "__version__", None)

        bm25_s = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            lexical = _qkv._Bm25Index(lines)
            bm25_s.append(time.perf_counter() - started)
        disk_bm25, disk_embeddings = lexical_disk_bytes(index_path)
        memory_bm25 = lexical.memory_bytes

        per_query = {r: {"recall": [], "ndcg": [], "judged": []} for r in RANKINGS}
        query_ms = {r: [] for r in RANKINGS}
        rows = []
        for q in judged:
            row = [q["query"]]
            judged_names = set(q["relevant"]) | set(q["not_relevant"])
            for r in RANKINGS:
                started = time.perf_counter()
                ranked = top_packages(index, q["query"], r)
                query_ms[r].append(1000 * (time.perf_counter() - started))
                per_query[r]["recall"].append(recall_at(ranked, q["relevant"]))
                per_query[r]["ndcg"].append(ndcg_at(ranked, q["relevant"]))
                per_query[r]["judged"].append(sum(p in judged_names for p in ranked[:K]) / K)
                row += [per_query[r]["recall"][-1], per_query[r]["ndcg"][-1]]
            rows.append(row)

        mean = {r: {m: statistics.fmean(v) for m, v in per_query[r].items()} for r in RANKINGS}
        print(f"{'query':<48}" + "".join(f" {r + ' R@10':>13} {r + ' nDCG':>13}" for r in RANKINGS))
        for row in rows:
            print(f"{row[0][:48]:<48}" + "".join(f" {v:>13.3f}" for v in row[1:]))
        print(f"\n{'mean over ' + str(len(judged)) + ' queries':<48}" +
              "".join(f" {mean[r]['recall']:>13.3f} {mean[r]['ndcg']:>13.3f}" for r in RANKINGS))
        print("judged share of the top 10: " + ", ".join(f"{r} {100 * mean[r]['judged']:.0f}%" for r in RANKINGS))
        if index_s is not None:
            print(f"index build (embeddings + BM25): {index_s:.1f} s")
        print(f"BM25 part: build {statistics.median(bm25_s):.2f} s (median of {args.repeats}); "
              f"{disk_bm25 / 2**20:.1f} MiB on disk beside {disk_embeddings / 2**20:.1f} MiB of embeddings; "
              f"{memory_bm25 / 2**20:.1f} MiB in memory")

        # A query is a round: the table shows the mean over them, the record keeps each query's
        # value, in the order of settings' "query_order".
        s = record.add_subject(rec, "quality", f"Search quality over the {len(judged)} judged queries "
                               "(tests/search/judged_queries.tsv), top 10; a round is a query",
                               "recall@10, nDCG@10", "fraction", aggregate="mean")
        for metric, name in (("recall", "recall@10"), ("ndcg", "nDCG@10"), ("judged", "judged share of the top 10")):
            record.add_case(s, name, {r: per_query[r][metric] for r in RANKINGS})
        s = record.add_subject(rec, "query_time", "Time per query (the index loaded; embedding the query "
                               "included for dense and hybrid)", "latency", "ms", better="lower")
        record.add_case(s, "per query", {r: query_ms[r] for r in RANKINGS})
        s = record.add_subject(rec, "index_time", f"Building the index of {len(lines):,} lines", "time", "s",
                               better="lower")
        if index_s is not None:
            record.add_case(s, "whole index (embeddings + BM25)", {"qkv": [index_s]})
        record.add_case(s, "BM25 part alone", {"qkv": bm25_s})
        s = record.add_subject(rec, "index_bytes", "The index's size", "size", "MiB", better="lower")
        record.add_case(s, "embeddings, on disk", {"qkv": [disk_embeddings / 2**20]})
        record.add_case(s, "BM25 part, on disk", {"qkv": [disk_bm25 / 2**20]})
        record.add_case(s, "BM25 part, in memory", {"qkv": [memory_bm25 / 2**20]})
        rec["notes"] += [
            "Dense: cosine similarity of the Universal Sentence Encoder lite's embeddings. Lexical: BM25 "
            "(k1 1.2, b 0.75; lowercase runs of letters and digits, Harman's S stemmer). Hybrid: reciprocal rank "
            "fusion of the two whole rankings, k = 60 (Cormack et al. 2009).",
            "The judged set was written before either system was measured, then pooled from the three systems' "
            "top 10 (its commits show the order). A package not judged counts as not relevant.",
            "Times are of one shared 2-core machine and noisy; the quality numbers are exact.",
        ]
        return rec
    finally:
        for name in os.listdir(work):
            os.remove(os.path.join(work, name))
        os.rmdir(work)
