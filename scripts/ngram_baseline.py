#!/usr/bin/python3
"""A byte-level n-gram language model baseline, in bits per byte on a held-out text.

Run with Debian's Python (standard library only):

    /usr/bin/python3 scripts/ngram_baseline.py --train DIR/sotu-train.txt \\
        --heldout DIR/sotu-heldout.txt [--order N] [--json]
    /usr/bin/python3 scripts/ngram_baseline.py --self-test

(DIR/sotu-*.txt are written by `scripts/fetch_data.sh sotu DIR`.)

Why: `qkv score` reports a trained GPT's bits per byte on the held-out speeches. That
number means little alone; this script gives the reference points on the same bytes, in
the same unit, from one command:
  - a smoothed n-gram model fit on the same training text (what a small GPT must beat to
    have learnt anything beyond local spelling),
  - `xz -9e` and `gzip -9` run on the held-out bytes alone (8 * compressed / raw size;
    they see no training text, so they are an upper bound, not a fair rival; with
    --with-train-context the script also reports what xz -9e spends on the held-out
    bytes after the training text: size(train + heldout) - size(train)).

bits per byte = sum over every held-out byte of -log2 P(byte | preceding bytes), divided
by the number of held-out bytes. The held-out text is one byte stream; its first bytes
have fewer than N-1 bytes before them and use that shorter history (the model's own
lower orders), so no byte is skipped and no start symbol is invented.

The model: interpolated modified Kneser-Ney (Chen & Goodman 1998, "An empirical study of
smoothing techniques for language modeling", section 3) over bytes, vocabulary the 256
byte values. For an order-N model and a byte w after history h (h_k = the last k-1
bytes of the history, so level k scores k-grams):

    P_0(w)        = 1/256                                  (uniform: nothing gets zero)
    P_k(w | h_k)  = max(c_k(h_k w) - D_k(c_k(h_k w)), 0) / S_k(h_k)
                    + gamma_k(h_k) * P_{k-1}(w | h_{k-1})      for k = 1 .. N
    S_k(h)        = sum over w of c_k(h w)
    gamma_k(h)    = (D_k1 * N1(h) + D_k2 * N2(h) + D_k3+ * N3+(h)) / S_k(h)

N1(h), N2(h), N3+(h): how many bytes w have c_k(h w) = 1, = 2, >= 3. gamma_k(h) is exactly
the mass the discounts took away from context h, so each P_k sums to 1 over the 256
bytes. If S_k(h) = 0 (context h never seen at level k), P_k(w | h) = P_{k-1}(w | h_{k-1}).

The counts c_k: at the top level (k = N) the raw count of the N-gram in the training
text; at every lower level the Kneser-Ney continuation count, N1+(. h w) = the number of
distinct bytes v such that v h w occurs in the training text. (A lower order is only
consulted to spread the mass of contexts where the longer history ran out, so it should
say how many different contexts a k-gram follows, not how often it occurs.)

The three discounts of each level come from that level's count-of-counts n_r (how many
distinct k-grams have count exactly r, over the counts that level uses):

    Y = n1 / (n1 + 2 n2),   D1 = 1 - 2Y n2/n1,   D2 = 2 - 3Y n3/n2,   D3+ = 3 - 4Y n4/n3

each clamped to [0, r] (so a discount never exceeds the count it is taken from); where a
count-of-counts is 0 (tiny texts) the level falls back to 0.5, 1.0, 1.5.

How the order is chosen (default): the held-out text is never used to choose. The last
5% of the training text (cut at a line start, so at the start of a speech) is set aside
as a validation split; models of every order in --orders (default 2..12) are fit on the
first 95% and scored on that split; the order with the lowest validation bits per byte
wins; then the model of that order is refit on ALL the training text and scored once on
the held-out text. --order N skips the selection and uses N.

Speed: counting is plain dicts keyed by bytes slices. The top-level N-gram counts come
from one pass over the text; every lower level is derived from the set of distinct
(k+1)-grams (each distinct (k+1)-gram v x adds one to the continuation count of x), so
only the top level pays a pass over all positions. Continuation counts do not depend on N,
so during order selection one set of lower levels is shared by every candidate order.
On the SOTU text (10.3 MB train, 2 vCPUs shared with a training job): --order 6 takes
~9 s in all (0.18 GB); the default selection over 2..12 plus the refit ~4.5 min, peak
7.8 GB (every candidate's top level is held at once so that one pass scores them all).
"""

import argparse
import collections
import json
import math
import random
import shutil
import subprocess
import sys
import time

VOCABULARY_SIZE = 256
UNIFORM = 1.0 / VOCABULARY_SIZE
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)
DEFAULT_CANDIDATE_ORDERS = "2-12"
VALIDATION_FRACTION = 0.05


def estimate_discounts(counts):
    """D1, D2, D3+ for one level from its count-of-counts (Chen & Goodman's estimate)."""
    count_of_counts = collections.Counter(counts.values())
    n1, n2, n3, n4 = (count_of_counts.get(r, 0) for r in (1, 2, 3, 4))
    if min(n1, n2, n3, n4) == 0:
        return FALLBACK_DISCOUNTS
    y = n1 / (n1 + 2.0 * n2)
    raw = (1.0 - 2.0 * y * n2 / n1,
           2.0 - 3.0 * y * n3 / n2,
           3.0 - 4.0 * y * n4 / n3)
    # D_r <= r keeps every discounted count >= 0, so the removed mass equals the sum of
    # the discounts and the distribution still sums to 1.
    return tuple(min(max(d, 0.0), float(r)) for r, d in zip((1, 2, 3), raw))


class Level:
    """Level k of the model: counts of k-grams (raw or continuation), their discounts,
    and for each (k-1)-byte context the pair (1 / S_k(context), gamma_k(context))."""

    def __init__(self, order, kind, counts):
        self.order = order
        self.kind = kind  # "raw" (top level) or "continuation" (lower levels)
        self.counts = counts
        self.discounts = estimate_discounts(counts)
        # Indexed by min(count, 3): an unseen k-gram (count 0) loses nothing.
        self.discount_by_count = (0.0,) + self.discounts
        self.contexts = self._context_stats()

    def _context_stats(self):
        totals = collections.defaultdict(int)
        removed = collections.defaultdict(float)
        discount_by_count = self.discount_by_count
        for gram, count in self.counts.items():
            context = gram[:-1]
            totals[context] += count
            removed[context] += discount_by_count[count if count < 3 else 3]
        return {context: (1.0 / total, removed[context] / total)
                for context, total in totals.items()}

    def interpolate(self, context, byte, lower_probability):
        """P_k(byte | context) given P_{k-1}(byte | shorter context)."""
        stats = self.contexts.get(context)
        if stats is None:
            return lower_probability
        inverse_total, gamma = stats
        count = self.counts.get(context + byte, 0)
        discounted = count - self.discount_by_count[count if count < 3 else 3]
        return max(discounted, 0.0) * inverse_total + gamma * lower_probability


def count_ngrams(data, n):
    """Raw counts of every n-gram (bytes slice of length n) in data."""
    return collections.Counter(data[i:i + n] for i in range(len(data) - n + 1))


def continuation_counts(distinct_longer_grams):
    """Continuation counts of k-grams from the distinct (k+1)-grams: N1+(. x) = number of
    distinct (k+1)-grams v x, i.e. of distinct bytes v seen right before x."""
    return collections.Counter(gram[1:] for gram in distinct_longer_grams)


class Model:
    """Shared continuation levels 1 .. max_order-1 plus a raw top level for each order
    in `orders`; levels_for(N) is the order-N interpolated modified Kneser-Ney model."""

    def __init__(self, data, orders):
        self.orders = sorted(set(orders))
        max_order = self.orders[-1]
        if len(data) < max_order:
            raise ValueError("training text shorter than the order")
        self.training_bytes = len(data)
        self.raw = {}
        for order in self.orders:
            self.raw[order] = Level(order, "raw", count_ngrams(data, order))

        # Distinct (k+1)-grams -> continuation counts of k-grams, from the top down. Every
        # occurrence of a k-gram except the one at position 0 is the suffix of a
        # (k+1)-gram, so the distinct k-grams are the continuation-count keys plus
        # possibly data[:k] (which then has no left extension and count 0).
        continuation = {}
        distinct = list(self.raw[max_order].counts.keys())
        for order in range(max_order - 1, 0, -1):
            counts = continuation_counts(distinct)
            continuation[order] = counts
            distinct = list(counts.keys())
            if data[:order] not in counts:
                distinct.append(data[:order])
        self.continuation = [Level(order, "continuation", continuation[order])
                             for order in range(1, max_order)]

    def levels_for(self, order):
        """Levels 1 .. order of the order-N model (index k-1 holds level k)."""
        return self.continuation[:order - 1] + [self.raw[order]]


def conditional_probability(levels, history, byte):
    """P(byte | history) under the model made of `levels` (reference implementation,
    used by the self-test; score() computes the same thing for many orders at once)."""
    usable = min(len(levels), len(history) + 1)
    probability = UNIFORM
    for k in range(1, usable + 1):
        context = history[len(history) - (k - 1):]
        probability = levels[k - 1].interpolate(context, byte, probability)
    return probability


def score(model, data, orders):
    """Total -log2 likelihood of every byte of data, for each order in orders, in one
    pass: the continuation levels are shared, so P_1 .. P_{N-1} are computed once per
    byte and each candidate's raw top level is applied on top of its P_{N-1}."""
    orders = sorted(orders)
    max_order = orders[-1]
    continuation = model.continuation[:max_order - 1]
    top_levels = [(order, model.raw[order]) for order in orders]
    bits = dict.fromkeys(orders, 0.0)
    log2 = math.log2
    for i in range(len(data)):
        byte = data[i:i + 1]
        available = i + 1  # highest level whose context fits in the history
        # chain[k] = P_k(byte | history) through the continuation levels.
        chain = [UNIFORM]
        probability = UNIFORM
        for level in continuation[:available]:
            k = level.order
            probability = level.interpolate(data[i - k + 1:i], byte, probability)
            chain.append(probability)
        for order, top in top_levels:
            if order <= available:
                p = top.interpolate(data[i - order + 1:i], byte, chain[order - 1])
            else:
                # Start of text: the shorter history, i.e. the model's own lower levels.
                p = chain[available]
            bits[order] -= log2(p)
    return bits


def parse_orders(text):
    """'2-10' or '3,5,7' -> sorted list of orders."""
    orders = set()
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-")
            orders.update(range(int(low), int(high) + 1))
        else:
            orders.add(int(part))
    if not orders or min(orders) < 1:
        raise ValueError("orders must be >= 1")
    return sorted(orders)


def validation_cut(data, fraction):
    """Start of the validation split: the line start nearest below (1 - fraction) of
    the text, so the split begins at a speech boundary."""
    cut = int(len(data) * (1.0 - fraction))
    newline = data.rfind(b"\n", 0, cut)
    return newline + 1 if newline > 0 else cut


def compressed_size(argv, data):
    result = subprocess.run(argv, input=data, stdout=subprocess.PIPE, check=True)
    return len(result.stdout)


def compressor_rows(train, heldout, with_train_context):
    rows = []
    for name, argv in (("xz -9e", ["xz", "-9e", "-c"]), ("gzip -9", ["gzip", "-9", "-c"])):
        if shutil.which(argv[0]) is None:
            rows.append({"method": name, "bits_per_byte": None,
                         "notes": argv[0] + " not installed"})
            continue
        start = time.perf_counter()
        size = compressed_size(argv, heldout)
        seconds = time.perf_counter() - start
        rows.append({"method": name, "bits_per_byte": 8.0 * size / len(heldout),
                     "compressed_bytes": size, "seconds": seconds,
                     "notes": "held-out bytes alone: %d -> %d bytes" % (len(heldout), size)})
    if with_train_context and shutil.which("xz"):
        # xz -9e has a 64 MiB dictionary, so it can match the held-out text against all
        # of the training text: the extra bytes it needs are its conditional cost.
        argv = ["xz", "-9e", "-c"]
        start = time.perf_counter()
        alone = compressed_size(argv, train)
        joined = compressed_size(argv, train + heldout)
        seconds = time.perf_counter() - start
        extra = joined - alone
        rows.append({"method": "xz -9e | train", "bits_per_byte": 8.0 * extra / len(heldout),
                     "compressed_bytes": extra, "seconds": seconds,
                     "notes": "size(train+heldout) - size(train) = %d - %d bytes"
                              % (joined, alone)})
    return rows


def run(args):
    with open(args.train, "rb") as f:
        train = f.read()
    with open(args.heldout, "rb") as f:
        heldout = f.read()
    if not heldout:
        raise SystemExit("held-out text is empty")

    selection = None
    if args.order is not None:
        order = args.order
        how = "order forced by --order"
    else:
        candidates = parse_orders(args.orders)
        cut = validation_cut(train, VALIDATION_FRACTION)
        fit_part, validation = train[:cut], train[cut:]
        start = time.perf_counter()
        model = Model(fit_part, candidates)
        fit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        bits = score(model, validation, candidates)
        score_seconds = time.perf_counter() - start
        del model
        validation_bpb = {n: bits[n] / len(validation) for n in candidates}
        order = min(candidates, key=lambda n: validation_bpb[n])
        selection = {"candidates": candidates, "fit_bytes": len(fit_part),
                     "validation_bytes": len(validation),
                     "validation_bits_per_byte": validation_bpb,
                     "fit_seconds": fit_seconds, "score_seconds": score_seconds}
        how = ("order chosen on the last %d bytes (%.0f%%) of the training text, fit on "
               "the first %d; held-out text not used to choose"
               % (len(validation), 100 * VALIDATION_FRACTION, len(fit_part)))
        if order == candidates[-1] and len(candidates) > 1:
            how += "; best is the largest candidate, try higher --orders"

    start = time.perf_counter()
    model = Model(train, [order])
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    bits = score(model, heldout, [order])[order]
    score_seconds = time.perf_counter() - start
    discounts = {level.order: level.discounts for level in model.levels_for(order)}
    del model

    ngram = {"method": "KN-%d bytes" % order, "bits_per_byte": bits / len(heldout),
             "order": order, "total_bits": bits, "fit_seconds": fit_seconds,
             "score_seconds": score_seconds, "discounts": discounts,
             "notes": "interpolated modified Kneser-Ney, fit on all training text "
                      "(%.1f s), scored in %.1f s; %s" % (fit_seconds, score_seconds, how)}
    rows = [ngram] + compressor_rows(train, heldout, args.with_train_context)

    if args.json:
        print(json.dumps({"train": args.train, "heldout": args.heldout,
                          "train_bytes": len(train), "heldout_bytes": len(heldout),
                          "order_selection": selection, "rows": rows}))
        return

    print("train   %s: %d bytes" % (args.train, len(train)))
    print("heldout %s: %d bytes" % (args.heldout, len(heldout)))
    if selection:
        print("order selection (validation bits per byte; fit %.1f s, scored %.1f s):"
              % (selection["fit_seconds"], selection["score_seconds"]))
        print("  " + "  ".join("%d: %.4f" % (n, b)
                               for n, b in selection["validation_bits_per_byte"].items()))
    print()
    print("%-16s %10s  %s" % ("method", "bits/byte", "notes"))
    for row in rows:
        value = row["bits_per_byte"]
        shown = "n/a" if value is None else "%.4f" % value
        print("%-16s %10s  %s" % (row["method"], shown, row["notes"]))


def self_test():
    """Checks on a small random text: continuation counts against brute force, every
    conditional distribution (seen and unseen contexts, every order) sums to 1 and is
    positive, and the one-pass scorer agrees with the reference probability."""
    rng = random.Random(1998)
    words = [bytes(rng.choice(b"abcde ") for _ in range(rng.randint(1, 6)))
             for _ in range(40)]
    text = b" ".join(rng.choice(words) for _ in range(800)) + b"\nxyz"
    max_order = 6
    orders = list(range(1, max_order + 1))
    model = Model(text, orders)

    # Continuation counts: distinct bytes v with v + x in the text.
    for level in model.continuation:
        k = level.order
        left = collections.defaultdict(set)
        for i in range(1, len(text) - k + 1):
            left[text[i:i + k]].add(text[i - 1])
        expected = {gram: len(vs) for gram, vs in left.items()}
        assert dict(level.counts) == expected, "continuation counts wrong at level %d" % k

    histories = [b"", b"a", b"ab", b"abc d", b"e a b", text[:3], text[-7:], text[100:110],
                 b"\xff", b"zz\x00q", b"a\xffb", b"qqqqqqqq", b"abcde abcde"]
    histories += [text[i - rng.randint(0, 8):i] for i in
                  (rng.randint(8, len(text)) for _ in range(20))]
    bytes_ = [bytes([v]) for v in range(VOCABULARY_SIZE)]
    checked = 0
    for order in orders:
        levels = model.levels_for(order)
        for history in histories:
            probabilities = [conditional_probability(levels, history, b) for b in bytes_]
            total = math.fsum(probabilities)
            assert abs(total - 1.0) < 1e-9, (order, history, total)
            assert min(probabilities) > 0.0, (order, history)
            checked += 1
        for level in levels:
            for context in list(level.contexts)[:50] + [b"\x00" * (level.order - 1)]:
                total = math.fsum(level.interpolate(context, b, UNIFORM) for b in bytes_)
                assert abs(total - 1.0) < 1e-9, (order, level.order, context, total)
                checked += 1

    sample = text[:200] + b"unseen \xff bytes" + text[300:400]
    fast = score(model, sample, orders)
    for order in orders:
        levels = model.levels_for(order)
        reference = -math.fsum(math.log2(conditional_probability(levels, sample[:i], sample[i:i + 1]))
                               for i in range(len(sample)))
        assert abs(fast[order] - reference) < 1e-9 * max(1.0, reference), (order, fast[order], reference)
    print("self-test passed: %d distributions sum to 1 within 1e-9 (orders 1-%d, seen and "
          "unseen contexts), continuation counts match brute force, scorer matches "
          "reference" % (checked, max_order))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", help="training text")
    parser.add_argument("--heldout", help="held-out text to score")
    parser.add_argument("--order", type=int, help="use this order (skip selection)")
    parser.add_argument("--orders", default=DEFAULT_CANDIDATE_ORDERS,
                        help="candidate orders for selection, e.g. 2-12 or 4,6,8 "
                             "(default %(default)s)")
    parser.add_argument("--with-train-context", action="store_true",
                        help="also report xz -9e on the held-out text after the training "
                             "text (compresses ~10 MB twice)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--self-test", action="store_true", help="run the self-test")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    if not args.train or not args.heldout:
        parser.error("--train and --heldout are required (or --self-test)")
    if args.order is not None and args.order < 1:
        parser.error("--order must be >= 1")
    run(args)


if __name__ == "__main__":
    main()
