"""qkv search's lexical half and its evaluation, without a model: BM25 (qkv's
_Bm25Index, apps/search/bm25.h) against a naive twin written from the formula, reciprocal
rank fusion and the metrics (scripts/bench_search.py) against hand computations, and the
judged query set (tests/search/judged_queries.tsv) checked as a file."""
import math
import os
import sys
import unicodedata

import pytest

from qkv import _qkv

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(_ROOT, "scripts"))
import bench_search  # noqa: E402

JUDGED = os.path.join(_ROOT, "tests", "search", "judged_queries.tsv")


# --------------------------------------------------------------------------------------
# The naive twin: the formula of bm25.h, computed term by term from the lines themselves.

def naive_terms(text):
    """Runs of letters and digits (Unicode categories L* and N*), lowercased, with Harman's
    S stemmer on terms of 3 or more characters."""
    words = "".join(c if unicodedata.category(c)[0] in "LN" else " " for c in text).split()
    out = []
    for w in (w.lower() for w in words):
        if len(w) >= 3 and w.endswith("s"):
            if w.endswith("ies") and not w.endswith(("aies", "eies")):
                w = w[:-3] + "y"
            elif w.endswith("es") and not w.endswith(("aes", "ees", "oes")):
                w = w[:-1]
            elif not w.endswith(("us", "ss")):
                w = w[:-1]
        out.append(w)
    return out


def naive_bm25(lines, query, k1=1.2, b=0.75):
    """{0-based line: score} of every line holding a query term."""
    docs = [naive_terms(t) for t in lines]
    N = sum(1 for d in docs if d)
    avgdl = sum(len(d) for d in docs) / N
    scores = {}
    for t in set(naive_terms(query)):
        n = sum(1 for d in docs if t in d)
        if n == 0:
            continue
        idf = math.log(1 + (N - n + 0.5) / (n + 0.5))
        for i, d in enumerate(docs):
            f = d.count(t)
            if f:
                scores[i] = scores.get(i, 0.0) + idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(d) / avgdl))
    return scores


CORPUS = [
    "gnumeric: spreadsheet application for GNOME",
    "liborcus: library for processing spreadsheets, spreadsheet documents and more spreadsheets",
    "",
    "vlc: multimedia player and streamer",
    "!!! --- ???",
    "audacious: small and fast audio player which supports lots of formats",
    "Ünïcode Café: naïve résumé of ÉTÉ, x² and ½ files",
    "the the the the the the the the the the the the player",
    "libraries: series of bees, toes, classes, gnus and buses",
    "gimp: GNU Image Manipulation Program; edit photos, retouch photo files",
]


@pytest.mark.parametrize("query", ["a spreadsheet program", "player", "the player", "Café ÉTÉ résumé",
                                   "edit photos files", "library series bee toe class gnus bus", "x² ½",
                                   "player player player", "nothing matches zebra"])
def test_bm25_equals_its_naive_twin(query):
    index = _qkv._Bm25Index(CORPUS)
    expected = naive_bm25(CORPUS, query)
    got = index.rank(query)
    assert {line for _, line in got} == set(expected), (got, expected)
    for score, line in got:
        # Sums of a few terms in double: a relative 1e-12 is thousands of ulps of slack.
        assert score == pytest.approx(expected[line], rel=1e-12), (line, score, expected[line])
    order = sorted(expected, key=lambda i: (-expected[i], i))
    assert [line for _, line in got] == order
    for i in range(len(CORPUS)):
        assert _qkv._lexical_terms(CORPUS[i]) == naive_terms(CORPUS[i])


def test_bm25_counts_and_a_query_without_terms():
    index = _qkv._Bm25Index(CORPUS)
    docs = [naive_terms(t) for t in CORPUS]
    assert index.documents == sum(1 for d in docs if d)
    assert index.vocabulary == len({t for d in docs for t in d})
    assert index.average_length == pytest.approx(sum(map(len, docs)) / index.documents, rel=1e-15)
    assert (index.k1, index.b) == (1.2, 0.75)
    with pytest.raises(ValueError, match="no terms"):
        index.rank(" ?! -- ")


def test_reciprocal_rank_fusion_by_hand():
    # Rankings [3, 1, 2] and [1, 4], k = 60: 1 → 1/62 + 1/61, 3 → 1/61, 4 → 1/62, 2 → 1/63.
    fused = _qkv._reciprocal_rank_fusion([[3, 1, 2], [1, 4]])
    assert [item for _, item in fused] == [1, 3, 4, 2]
    assert [s for s, _ in fused] == pytest.approx([1 / 62 + 1 / 61, 1 / 61, 1 / 62, 1 / 63], rel=1e-15)
    # A tie goes to the smaller item.
    assert _qkv._reciprocal_rank_fusion([[7, 2], [2, 7]], k=1) == [(1 / 2 + 1 / 3, 2), (1 / 2 + 1 / 3, 7)]


def test_metrics_by_hand():
    relevant = ["a", "b", "c"]
    ranked = ["x", "a", "y", "b", "z", "w", "v", "u", "t", "s", "c"]  # c is 11th: outside the top 10
    assert bench_search.recall_at(ranked, relevant) == pytest.approx(2 / 3)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)           # ranks 2 and 4
    ideal = 1 + 1 / math.log2(3) + 1 / math.log2(4)     # three relevant, ranked first
    assert bench_search.ndcg_at(ranked, relevant) == pytest.approx(dcg / ideal, rel=1e-15)
    assert bench_search.ndcg_at(["a", "b", "c"], relevant) == 1.0
    assert bench_search.recall_at([], relevant) == 0.0
    # More than 10 relevant: the ideal DCG counts 10 of them, so a full top 10 scores 1.
    many = [f"p{i}" for i in range(15)]
    assert bench_search.ndcg_at(many[:10], many) == pytest.approx(1.0, rel=1e-15)
    assert bench_search.recall_at(many[:10], many) == pytest.approx(10 / 15)
    assert bench_search.package_of("gnumeric: spreadsheet: yes") == "gnumeric"


def test_the_judged_set_is_well_formed():
    judged = bench_search.load_judged(JUDGED)
    assert len(judged) >= 40
    for q in judged:
        assert q["relevant"], q
        assert not set(q["relevant"]) & set(q["not_relevant"]), q
        for name in q["relevant"] + q["not_relevant"]:
            # Debian's rule for package names (Policy 5.6.1).
            assert len(name) >= 2 and name[0].isalnum() and all(c.islower() or c.isdigit() or c in "+-." for c in name), name


def _write(tmp_path, text):
    path = tmp_path / "judged.tsv"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_judged_set_refuses_bad_lines(tmp_path):
    packages = {"gnumeric", "vlc"}
    good = "# a comment\n\na spreadsheet\tgnumeric\tvlc\n"
    assert bench_search.load_judged(_write(tmp_path, good), packages)[0]["not_relevant"] == ["vlc"]
    cases = [
        ("a spreadsheet\tgnumeric libreoffice-calc\t\n", r"judged.tsv:1: query 'a spreadsheet' names package "
                                                         r"'libreoffice-calc', which is not in the corpus"),
        ("a spreadsheet\tgnumeric\n", "2 tab-separated columns"),
        ("a spreadsheet\t\tvlc\n", "no relevant package"),
        ("a spreadsheet\tgnumeric\tgnumeric\n", "judges gnumeric twice"),
        ("q\tgnumeric\t\nq\tvlc\t\n", r"judged.tsv:2: query 'q' appears twice"),
        ("\tgnumeric\t\n", "the query is empty"),
    ]
    for text, message in cases:
        with pytest.raises(ValueError, match=message):
            bench_search.load_judged(_write(tmp_path, text), packages)
