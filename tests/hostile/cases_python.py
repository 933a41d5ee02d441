"""Hostile cases of issue 48: the Python entries: text limits, dates, ids, messages.
Read by cases.py (see its docstring for what a Case checks)."""

import importlib.util
import json
import os
import subprocess

from cases import Case, qkv, py, PY_ENV  # noqa: F401

I64 = 2**63 - 1


def fixtures(tmp, fx):
    """A recommender whose ratings hold the movieIds -5 and 2^63 - 1 (both titled "Twin",
    2000, so a title names neither) and a title with a terminal escape; a ratings file with
    a rating just over 5; a vision model whose class names hold terminal escapes."""
    env = dict(os.environ, QKV_NUM_THREADS="2")
    header = "movieId,title,year,genres,userId,rating,timestamp\n"
    movies = [(-5, "Twin", 2000), (I64, "Twin", 2000), (1, "Plain", 1990),
              (2, "\x1b[2JClear\x07", 1991), (3, "Third", 1992), (4, "Fourth", 1993),
              (5, "Fifth", 1994), (6, "Sixth", 1995)]
    lines = []
    for u in range(1, 11):
        for k, (m, title, year) in enumerate(movies):
            lines.append(f"{m},{title},{year},Drama|\x1b[31mRed,{u},{(u + k) % 9 / 2 + 0.5},"
                         f"{1000000 + u * 100 + k}\n")
    fx["ratings_twins"] = os.path.join(tmp, "ratings_twins.csv")
    with open(fx["ratings_twins"], "w", encoding="utf-8") as f:
        f.write(header + "".join(lines))
    fx["rec_twins"] = os.path.join(tmp, "rec_twins")
    subprocess.run([fx["qkv"], "train", "mf", "--data", fx["ratings_twins"],
                    "--epochs", "1", "--dim", "4", "--quiet", "--out", fx["rec_twins"]],
                   check=True, stdout=subprocess.DEVNULL, env=env)
    fx["ratings_5p"] = os.path.join(tmp, "ratings_5p.csv")
    with open(fx["ratings_5p"], "w", encoding="utf-8") as f:
        f.write(header + "".join(lines[:3]) + "1,Plain,1990,Drama,99,5.0000001,1\n" + "".join(lines[3:]))
    # The vision model of cases.py with class names that would clear the screen and ring.
    fx["vit_escapes"] = os.path.join(tmp, "vit_escapes")
    os.makedirs(fx["vit_escapes"])
    os.symlink(os.path.join(fx["vit"], "model.safetensors"),
               os.path.join(fx["vit_escapes"], "model.safetensors"))
    config = json.load(open(os.path.join(fx["vit"], "config.json")))
    config["class_names"] = [f"c{i}\x1b[2J\x07" for i in range(len(config["class_names"]))]
    json.dump(config, open(os.path.join(fx["vit_escapes"], "config.json"), "w"))


def _raises(name, setup, call, error, stderr, row, seconds=30):
    """A Python case: `setup` then `call` must raise `error` (its message matching the
    regex `stderr`, which follows "<error>: "); a result instead is a failure too."""
    code = (f"import sys, numpy as np, qkv\n{setup}\ntry:\n    r = {call}\n"
            f"except {error} as e:\n    sys.exit(f'{error}: {{e}}')\n"
            f"sys.exit(f'no {error}; returned {{r!r}}'[:300])\n")
    return Case(f"row {row} python {name}", py(code), env=PY_ENV, expect="failure",
                stderr=f"{error}: {stderr}", row=row, issue=48, seconds=seconds)


def _ok(name, code, stdout, row, seconds=30):
    return Case(f"row {row} python {name}", py("import sys, numpy as np, qkv\n" + code),
                env=PY_ENV, expect="ok", stdout=stdout, row=row, issue=48, seconds=seconds)


# stdout with no control character but the line breaks (and so no terminal escape).
CLEAN = r"\A[^\x00-\x09\x0b-\x1f\x7f]*\Z"


def cases():
    out = []
    gpt2 = "m = qkv.load_model('{gpt2}')"
    rec = "import qkv.recommender as rec\nm = rec.Recommender('{rec_twins}')"
    mib = 1 << 20

    # Row 2: qkv.translate_dates checks every answer as `qkv translate` does: an invented
    # date (or one whose weekday disagrees) is a ValueError naming the input, not an answer.
    for label, text in (("hello", "hello"), ("31 February", "31 February 2023"),
                        ("13/13/2013", "13/13/2013"), ("2023-13-45", "2023-13-45"),
                        ("wrong weekday", "Monday, 21 November 2026"),
                        ("wrong Chinese weekday", "2026年11月21日星期一")):
        out.append(_raises(f"translate_dates {label}", "", f"qkv.translate_dates({text!r})",
                           "ValueError", rf"translate_dates: dates {text!r} was not translated: ",
                           row=2))
    out.append(_raises("translate_dates names the refused input of a list", "",
                       "qkv.translate_dates(['21.11.2026', '31 February 2023'])", "ValueError",
                       r"translate_dates: dates\[1\] '31 February 2023' was not translated: ", row=2))
    out.append(_ok("translate_dates still translates what it reads",
                   "print(qkv.translate_dates(['Saturday, 21 November 2026', '21.11.2026', "
                   "'2026年11月21日星期六']))",
                   "['2026-11-21', '2026-11-21', '2026-11-21']\n", row=2))

    # Row 15: every movieId a ratings file accepts (int64, negative too) is one --like finds:
    # the ambiguity message advises the id, and the id then works.
    out.append(Case("row 15 recommend --like an ambiguous title advises a movieId",
                    qkv("recommend", "--model", "{rec_twins}", "--like", "Twin"), expect="failure",
                    stderr=r"ambiguous: 2 movies .*movieId -5\).*movieId 9223372036854775807\)",
                    row=15, issue=48))
    for mid in ("-5", str(I64)):
        out.append(Case(f"row 15 recommend --like movieId {mid}",
                        qkv("recommend", "--model", "{rec_twins}", "--like", mid, "--min-ratings", "1"),
                        expect="ok", stdout_re=r"\Amovies like Twin \(2000\)", row=15, issue=48))
        out.append(_ok(f"Recommender.movie('{mid}')", rec + f"\nprint(m.movie({mid!r}), m.movie({mid}))",
                       f"{mid} {mid}\n", row=15))

    # Row 19: a lone surrogate is a ValueError naming the argument and where it is.
    out.append(_raises("Tokenizer.encode lone surrogate", gpt2, "m.tokenizer.encode('a\\ud800')",
                       "ValueError", r"Tokenizer\.encode: text .*lone surrogate U\+D800 at index 1",
                       row=19))
    out.append(_raises("generate lone surrogate", gpt2, "m.generate('ab\\udfff', max_new_tokens=1)",
                       "ValueError", r"GPT2Model\.generate: prompt .*lone surrogate U\+DFFF at index 2",
                       row=19))
    out.append(_raises("translate_dates lone surrogate", "", "qkv.translate_dates(['1.1.2000', '\\ud800'])",
                       "ValueError", r"translate_dates: dates\[1\] .*lone surrogate U\+D800 at index 0",
                       row=19))
    out.append(_raises("Recommender.movie lone surrogate", rec, "m.movie('Twin\\ud800')",
                       "ValueError", r"movie: title .*lone surrogate U\+D800 at index 4", row=19))

    # Item 4: the CLI's 1 MiB per text holds for every Python entry that takes text.
    for label, setup, call, fn in (
            ("Tokenizer.encode", gpt2, "m.tokenizer.encode(T)", r"Tokenizer\.encode: text"),
            ("Tokenizer.tokenize", gpt2, "m.tokenizer.tokenize(T)", r"Tokenizer\.tokenize: text"),
            ("generate", gpt2, "m.generate(T, max_new_tokens=1)", r"GPT2Model\.generate: prompt"),
            ("score", gpt2, "m.score(T)", r"GPT2Model\.score: text"),
            ("translate_dates", "", "qkv.translate_dates(T)", r"translate_dates: dates"),
            ("Recommender.movie", rec, "m.movie(T)", r"movie: title")):
        out.append(_raises(f"{label} of 1 MiB + 1 byte", setup + f"\nT = 'a' * {mib + 1}", call,
                           "ValueError", fn + rf" has {mib + 1} characters, over the limit of "
                           rf"{mib} bytes \(1 MiB\)", row=4))
    # Under the limit in characters, over it in bytes of UTF-8.
    out.append(_raises("Tokenizer.encode of 1 MiB + 2 bytes of UTF-8", gpt2 + f"\nT = 'é' * {mib // 2 + 1}",
                       "m.tokenizer.encode(T)", "ValueError",
                       rf"Tokenizer\.encode: text is {mib + 2} bytes of UTF-8, over the limit of {mib}",
                       row=4))
    out.append(_ok("Tokenizer.encode of exactly 1 MiB", gpt2 + f"\nprint(len(m.tokenizer.encode('a' * {mib})) > 0)",
                   "True\n", row=4, seconds=60))

    # Row 20: messages that name the argument, not torch's, NumPy's or pybind11's. The
    # torch cases only where the interpreter has torch (qkv never needs it).
    meta = "import torch\n" + gpt2 + "\nx = torch.zeros((1, 3), dtype=torch.int64, device='meta')"
    torch_cases = []
    torch_cases.append(_raises("GPT2Model.forward meta tensor", meta, "m.forward(x)", "ValueError",
                       r"GPT2Model: input_ids is a tensor on the 'meta' device", row=20))
    torch_cases.append(_raises("GPT2Model.generate meta tensor", meta, "m.generate(x[0], max_new_tokens=1)",
                       "ValueError", r"GPT2Model\.generate: prompt is a tensor on the 'meta' device",
                       row=20))
    torch_cases.append(_raises("BertModel.forward meta tensor",
                       "import torch\nm = qkv.load_model('{bert}')\n"
                       "x = torch.zeros((1, 3), dtype=torch.int64, device='meta')",
                       "m.forward(x)", "ValueError", r"BertModel: input_ids is a tensor on the 'meta' device",
                       row=20))
    if importlib.util.find_spec("torch") is not None:
        out += torch_cases
    for shape in ((0, 5), (2, 0)):
        out.append(_raises(f"GPT2Model.forward shape {shape}", gpt2, f"m.forward(np.zeros({shape}, int))",
                           "ValueError", rf"GPT2Model: input_ids must have at least one row of at least "
                           rf"one token, got shape \({shape[0]}, {shape[1]}\)", row=20))
    out.append(_raises("BertModel.forward shape (0, 5)", "m = qkv.load_model('{bert}')",
                       "m.forward(np.zeros((0, 5), int))", "ValueError",
                       r"BertModel: input_ids must have at least one row", row=20))
    for value in ("2**63", "-2**63 - 1"):
        out.append(_raises(f"Recommender.movie({value})", rec, f"m.movie({value})", "ValueError",
                           r"movie: movie -?\d+ is not an id of this model \(ids are int64", row=20))
    out.append(_raises("Recommender.recommend(2**63)", rec, "m.recommend(2**63)", "ValueError",
                       r"recommend: user 9223372036854775808 is not an id of this model", row=20))
    out.append(_raises("Recommender.predict movie 2**63", rec, "m.predict([1], [2**63])", "ValueError",
                       r"predict: movies must fit in int64 .*got 9223372036854775808", row=20))
    for t in ("1e-300", "1e-39"):
        out.append(_raises(f"Recommender.similar temperature={t}", rec,
                           f"m.similar(1, temperature={t}, min_ratings=1)", "ValueError",
                           rf"temperature must be a finite number >= .*got {t}", row=20))
    out.append(_ok("Recommender.similar temperature=1e-38 still runs", rec +
                   "\nprint(len(m.similar(1, temperature=1e-38, min_ratings=1)) > 0)", "True\n", row=20))

    # Row 21: the value as given in messages; no control character of data or paths reaches
    # the terminal in normal output.
    out.append(Case("row 21 train mf rating 5.0000001 shown as given",
                    qkv("train", "mf", "--data", "{ratings_5p}", "--epochs", "1",
                        "--quiet", "--out", "{tmp}/rec_5p"),
                    expect="failure", stderr=r"line 5: rating 5\.0000001 is outside \[0\.5, 5\]",
                    row=21, issue=48))
    out.append(Case("row 21 classify class names with terminal escapes",
                    qkv("classify", "--model", "{vit_escapes}", "--images", "{vit_images}",
                        "--labels", "{vit_labels}"),
                    expect="ok", stdout_re=CLEAN, row=21, issue=48))
    out.append(Case("row 21 classify class names are shown escaped",
                    qkv("classify", "--model", "{vit_escapes}", "--images", "{vit_images}"),
                    expect="ok", stdout_re=r"c\d\\x1b\[2J\\x07", row=21, issue=48))
    out.append(Case("row 21 classify --html a path with a line break",
                    qkv("classify", "--model", "{vit}", "--images", "{vit_images}", "--html",
                        "{tmp}/a\nb\x1b[2J.html"),
                    expect="ok", stdout_re=CLEAN, row=21, issue=48))
    out.append(Case("row 21 recommend titles and genres with terminal escapes",
                    qkv("recommend", "--model", "{rec_twins}", "--user", "1", "--top", "8"),
                    expect="ok", stdout_re=CLEAN, row=21, issue=48))
    out.append(Case("row 21 recommend --like titles with terminal escapes",
                    qkv("recommend", "--model", "{rec_twins}", "--like", "Plain", "--min-ratings", "1"),
                    expect="ok", stdout_re=CLEAN, row=21, issue=48))
    out.append(Case("row 21 generate --html a path with a line break",
                    qkv("generate", "--model", "{gpt2}", "--prompt", "x", "--max-new-tokens", "1",
                        "--html", "{tmp}/g\nh\x1b[2J.html"),
                    expect="ok", stdout_re=r"wrote \S*g\\x0ah\\x1b\[2J\.html", row=21, issue=48))
    out.append(Case("row 21 translate --html a path with a line break",
                    qkv("translate", "21.11.2026", "--html", "{tmp}/t\nu\x1b[2J.html"),
                    expect="ok", stdout_re=CLEAN, row=21, issue=48))
    return out
