"""Hostile cases of issue 48: bounded work and planned memory and threads: runs of
combining marks (row 9, UAX #15's stream-safe text), a recommender config.json that does
not grow with its users (row 11), std::bad_alloc never reaching a user
(row 12), Python model calls planned before they allocate (row 13), thread creation that
would fail (row 14). Read by cases.py (see its docstring for what a Case checks)."""

import json
import os

from cases import Case, qkv, py, PY_ENV, write_fixture  # noqa: F401

# Row 9's line: 'a' + (U+0301 U+0316) * 249000, 996001 bytes (under the 1 MiB per line).
MARKS = "a" + "\u0301\u0316" * 249000


def fixtures(tmp, fx):
    def w(name, data):
        return write_fixture(tmp, name, data)
    fx["marks_line"] = w("limits_marks.txt", MARKS.encode() + b"\n")
    # A SentencePiece (Unigram, NFKC) tokenizer of a few pieces, the joiner U+034F among them.
    fx["unigram"] = d = os.path.join(tmp, "limits_unigram")
    os.makedirs(d)
    pieces = ["<unk>", "\u2581a", "\u2581", "a", "\u0301", "\u0316", "\u034f", "\u00e1"]
    tokenizer = {"normalizer": {"type": "NFKC"},
                 "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                   "add_prefix_space": True},
                 "model": {"type": "Unigram", "unk_id": 0,
                           "vocab": [[p, -1.0] for p in pieces]}}
    w("limits_unigram/tokenizer.json", json.dumps(tokenizer).encode())
    # Ratings of many users with two ratings each (row 12), for a tight address-space limit.
    lines = ["userId,movieId,rating,timestamp\n"]
    for u in range(1, 300001):
        lines.append(f"{u},{u % 50 + 1},{1 + u % 5}.0,{1000 + u}\n")
        lines.append(f"{u},{(u + 7) % 50 + 1},{1 + (u + 2) % 5}.0,{2000 + u}\n")
    fx["ratings_many_users"] = w("limits_many_users.csv", "".join(lines).encode())
    # The first 60000 of those users (row 11): enough that their ids in config.json would
    # make it hundreds of KiB, few enough that an epoch takes a second. Each with a third
    # rating: training needs a validation part, which a user has from 3 ratings on.
    third = [f"{u},{(u + 19) % 50 + 1},{1 + (u + 4) % 5}.0,{3000 + u}\n" for u in range(1, 60001)]
    fx["ratings_60000_users"] = w("limits_60000_users.csv", "".join(lines[:1 + 2 * 60000] + third).encode())


def _py_ok(name, code, stdout, row, env=None, memory=4 << 30, seconds=30, stderr=None):
    return Case(f"row {row} python {name}", py("import sys, numpy as np, qkv\n" + code),
                env=dict(PY_ENV, **(env or {})), expect="ok", stdout=stdout, stderr=stderr,
                row=row, issue=48, memory=memory, seconds=seconds)


def _py_raises(name, setup, call, error, stderr, row, seconds=30, memory=4 << 30):
    code = (f"import sys, numpy as np, qkv\n{setup}\ntry:\n    r = {call}\n"
            f"except {error} as e:\n    sys.exit(f'{error}: {{e}}')\n"
            f"sys.exit(f'no {error}; returned {{type(r)}}')\n")
    return Case(f"row {row} python {name}", py(code), env=PY_ENV, expect="failure",
                stderr=f"{error}: {stderr}", row=row, issue=48, seconds=seconds, memory=memory)


def cases():
    c = []
    # Row 9: a 1 MiB line of combining marks tokenizes in linear time (before: 97 s with
    # NFKC, past 60 s with BERT's accent stripping): at most 10 s, like 1 MiB of ASCII.
    c.append(Case("row 9 tokenize unigram (NFKC) a line of 498000 combining marks",
                  qkv("tokenize", "--model", "{unigram}", "--file", "{marks_line}"),
                  expect="ok", row=9, issue=48, seconds=10))
    c.append(Case("row 9 tokenize BERT (NFD, accents stripped) a line of 498000 combining marks",
                  qkv("tokenize", "--model", "{bert}", "--file", "{marks_line}"),
                  expect="ok", row=9, issue=48, seconds=10))
    c.append(_py_ok("BERT Tokenizer.encode of a line of 498000 combining marks",
                    f"m = qkv.load_model('{{bert}}')\nT = 'a' + '\\u0301\\u0316' * 249000\n"
                    "print(len(m.tokenizer.encode(T)) > 0)", "True\n", row=9, seconds=10))
    # The joiner is visible in NFKC's output: 31 marks give the joiner's piece (6), 30 not.
    c.append(Case("row 9 tokenize unigram 31 marks: U+034F after the 30th",
                  qkv("tokenize", "--model", "{unigram}", "--text", "a" + "\u0316" * 31, "--json"),
                  expect="ok", stdout_re=r"\b6\b", row=9, issue=48))
    c.append(Case("row 9 tokenize unigram 30 marks: unchanged",
                  qkv("tokenize", "--model", "{unigram}", "--text", "a" + "\u0316" * 30, "--json"),
                  expect="ok", stdout_re=r"\A(?![\s\S]*\b6\b)", row=9, issue=48))

    # Row 11: a recommender's user ids are in users.csv, not config.json, so config.json
    # does not grow with the users (2 M users made 23.7 MiB, over the 16 MiB that loading a
    # config allows: a model exit 0 that recommend refused). The model loads and recommends
    # for the last user.
    c.append(Case("row 11 train mf of 60000 users: config.json stays small",
                  ["set -e; d={tmp}/limits_rec_60000; rm -rf $d; "
                   "{qkv} train mf --data {ratings_60000_users} --epochs 1 "
                   "--dim 0 --quiet --out $d >/dev/null; "
                   "size=$(stat -c %s $d/config.json); "
                   "[ $size -lt 16384 ] || { echo \"config.json is $size bytes\" >&2; exit 98; }; "
                   "! grep -q user_ids $d/config.json; "
                   "[ $(wc -l < $d/users.csv) -eq 60001 ]; "
                   "{qkv} recommend --model $d --user 60000 --top 1 >/dev/null; echo ok"],
                  shell=True, expect="ok", stdout="ok\n", row=11, issue=48, seconds=30))

    # Row 12: std::bad_alloc never reaches the user as "qkv: error: std::bad_alloc": the
    # message says the command ran out of memory.
    c.append(Case("row 12 train mf of 300000 users under a 300 MB address space",
                  qkv("train", "mf", "--data", "{ratings_many_users}",
                      "--epochs", "1", "--quiet", "--out", "{tmp}/limits_rec_out"),
                  expect="failure", stderr=r"out of memory", no_stderr=r"error: std::bad_alloc\s*$",
                  memory=300_000_000, row=12, issue=48, seconds=30))

    # Row 13: a Python model call plans its whole memory first: a batch over the limit is a
    # MemoryError naming the total ("needs N GiB (each part), more than the memory limit of
    # ...") within a second or two, before anything is allocated.
    c.append(_py_raises("GPT2Model.forward of (200000, 64) broadcast ids", "m = qkv.load_model('{gpt2}')",
                        "m.forward(np.broadcast_to(np.int64(1), (200000, 64)))", "MemoryError",
                        r"GPT2Model forward: needs [\d.]+ GiB .*more than the memory limit", row=13,
                        seconds=5))
    c.append(_py_raises("BertModel.forward of (100000, 64) ids with attentions",
                        "m = qkv.load_model('{bert}')",
                        "m.forward(np.ones((100000, 64), np.int64), output_attentions=True)",
                        "MemoryError", r"BertModel forward: needs [\d.]+ GiB .*more than the memory limit",
                        row=13, seconds=5))
    c.append(_py_ok("GPT2Model.forward of (3, 8) still runs", "m = qkv.load_model('{gpt2}')\n"
                    "print(m.forward(np.ones((3, 8), np.int64)).shape[:2])", "(3, 8)\n", row=13))

    # Row 14: more threads than the address space holds stacks for: a lower count and a
    # warning, never libgomp's "Thread creation failed" and exit 1 (nor, in Python, an exit
    # without an exception).
    for threads, memory in ((600, 4_000_000_000), (4096, 2_000_000_000)):
        env = {"QKV_NUM_THREADS": str(threads)}
        c.append(Case(f"row 14 generate with QKV_NUM_THREADS={threads} under --as={memory}",
                      qkv("generate", "--model", "{gpt2}", "--prompt", "x", "--max-new-tokens", "3"),
                      env=env, memory=memory, expect="ok",
                      stderr=rf"warning: {threads} threads asked for, but .*; using \d+ threads",
                      no_stderr="Thread creation failed", row=14, issue=48, seconds=30))
        c.append(_py_ok(f"generate with QKV_NUM_THREADS={threads} under --as={memory}",
                        "m = qkv.load_model('{gpt2}')\n"
                        "print(isinstance(m.generate('x', max_new_tokens=3), list))", "True\n",
                        row=14, env=env, memory=memory,
                        stderr=rf"warning: {threads} threads asked for"))
    return c
