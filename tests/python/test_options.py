"""Each training task's options are declared once (include/qkv/options.h; apps/*/options.cpp)
and both front ends are made from that declaration: `qkv train <task> --help` and
qkv.train(task, **options). These tests hold the two against each other — the same names,
defaults and ranges, and the same values refused at the edges of every range — and check
that Python refuses what it should with the right exception."""

import json
import pathlib
import re
import subprocess

import numpy as np
import pytest

import qkv
from test_vision import qkv_binary

MODELS = pathlib.Path(__file__).resolve().parents[2] / "models"
TASKS = ("dates", "tokenizer", "lm", "mf", "sasrec", "vit", "point")
# Every declared command, and the options the CLI adds to it itself (not declared: the
# output's form, the model directory and prompt a Python method has as its object).
COMMANDS = {**{f"train {t}": {"help", "json", "quiet"} for t in TASKS},
            "generate": {"help", "model", "prompt", "json", "html", "weights"},
            "search": {"help", "model", "corpus", "query", "json"},
            "recommend": {"help", "model", "user", "like", "predict", "json", "show", "html"},
            "classify": {"help", "model", "images", "labels", "list", "json", "html", "html_images"},
            "score": {"help", "model", "file", "json"}}


def cli(*args):
    return subprocess.run([qkv_binary(), *map(str, args)], capture_output=True, text=True, timeout=60)


def cli_help(command):
    """--help's options of `qkv <command>`: name -> (type, default or None, help text)."""
    r = cli(*command.split(), "--help")
    assert r.returncode == 0, r.stderr
    options = {}
    # "  --patch-size INT=4          Patch side ... (an integer in [1, 28])"; continuation
    # lines of a long help are indented further and belong to the option above.
    current = None
    for line in r.stdout.splitlines():
        m = re.match(r"^  (?:-h,)?--([a-z0-9-]+)(?: ([A-Z]+)(?:=(\S+))?(?: REQUIRED)?)?\s*(.*)$", line)
        if m:
            current = m.group(1).replace("-", "_")
            options[current] = [m.group(2), m.group(3), m.group(4)]
        elif current and line.startswith("    "):
            options[current][2] = (options[current][2] + " " + line.strip()).strip()
        else:
            current = None
    return options


def test_tasks_are_the_cli_subcommands():
    assert set(qkv.training.TASKS) == set(TASKS)
    out = cli("train", "--help").stdout
    for task in TASKS:
        assert re.search(rf"^  {task}\s", out, re.M), f"qkv train --help does not list {task}"


@pytest.mark.parametrize("command", COMMANDS)
def test_cli_and_python_share_names_defaults_and_ranges(command):
    specs = {s["name"]: s for s in qkv.options(command)}
    shown = cli_help(command)
    cli_names = set(shown) - COMMANDS[command]
    assert cli_names == {n for n, s in specs.items() if s["cli"]}, \
        f"{command}: --help lists {sorted(cli_names)}, the declaration {sorted(specs)}"
    task = command
    for name, (type_name, default, help_text) in shown.items():
        if name in COMMANDS[command]:
            continue
        s = specs[name]
        assert help_text.startswith(s["help"].split(" (")[0][:40]), (task, name, help_text)
        if s["type"] == "flag":
            assert type_name is None and s["default"] is False, (task, name)
            continue
        if s["required"]:
            assert default is None, (task, name, default)
        elif s["default"] not in ("", None):
            want = s["default"]
            got = type(want)(default) if not isinstance(want, bool) else default
            assert got == want, f"train {task} --{name}: CLI default {default}, Python {want!r}"
        if s["type"] in ("integer", "seed", "number", "choice"):
            assert f"({s['range']})" in help_text, (task, name, help_text, s["range"])


def edges(spec):
    """Values just outside the option's range, or of the wrong kind: (value, CLI text)."""
    if spec["type"] == "integer":
        return [spec["min"] - 1, spec["max"] + 1]
    if spec["type"] == "number":
        return [spec["low"] - 1e-3 * max(1.0, abs(spec["low"])) if not spec["low_open"] else spec["low"],
                *([spec["high"] + 1e-3 * max(1.0, abs(spec["high"]))] if spec["high"] != float("inf") else [])]
    if spec["type"] == "choice":
        return ["no-such-choice"]
    return []


@pytest.mark.parametrize("command", COMMANDS)
def test_both_front_ends_refuse_the_same_values(command):
    """Every value just outside a declared range is refused by the CLI (status 2, the option
    named as --name) and by Python (ValueError naming name), before any work is done. Python's
    methods that take a command's options (qkv.train, GPT2Model.generate, SearchIndex.search,
    Recommender.similar, Classifier.classify, GPT2Model.score) parse them with _parsed."""
    checked = 0
    for spec in qkv.options(command):
        for value in edges(spec):
            name = spec["name"]
            r = cli(*command.split(), "--" + name.replace("_", "-"),
                    repr(value) if isinstance(value, float) else value, "--out", "/nonexistent/never")
            assert r.returncode == 2, f"qkv {command} --{name} {value}: status {r.returncode}\n{r.stderr}"
            assert "--" + name.replace("_", "-") in r.stderr, r.stderr
            with pytest.raises(ValueError, match=rf"{command}: {name}: must be"):
                if command.startswith("train "):
                    qkv.train(command[6:], out="/nonexistent/never", **{name: value})
                else:
                    qkv.training._parsed(command, **{name: value})
            checked += 1
    assert checked >= 1, f"{command}: no edges checked"


@pytest.mark.parametrize("task,options,exception,message", [
    ("lm", {"layrs": 2}, TypeError, r"train lm: unknown option layrs \(did you mean layers\?\)"),
    ("lm", {"n_layer": 2}, TypeError, r"train lm: n_layer is now layers"),
    ("lm", {"n_embd": 64}, TypeError, r"train lm: n_embd is now embd"),
    ("mf", {"layers": 2}, TypeError, r"train mf: unknown option layers"),  # sasrec's
    ("vit", {"points": 64}, TypeError, r"train vit: unknown option points"),  # point's
    ("point", {"heads": 2}, TypeError, r"train point: unknown option heads"),  # vit's
    ("lm", {"batch": True}, TypeError, r"train lm: batch: must be an int, got bool"),
    ("lm", {"batch": 2.0}, TypeError, r"train lm: batch: must be an int, got float"),
    ("lm", {"lr": "0.1"}, TypeError, r"train lm: lr: must be a float, got str"),
    ("lm", {"resume": 1}, TypeError, r"train lm: resume: must be a bool, got int"),
    ("lm", {"text": 3}, TypeError, r"train lm: text: must be a str or os.PathLike, got int"),
    ("lm", {"seed": -1}, ValueError, r"train lm: seed: must be an integer in \[0, 2\^64\), got -1"),
    ("lm", {"seed": 1 << 64}, ValueError, r"train lm: seed: must be an integer in \[0, 2\^64\)"),
    ("lm", {"batch": 1 << 70}, ValueError, r"train lm: batch: must be an integer in \[1, 65536\]"),
    ("lm", {"text": "t.txt", "heads": 3}, ValueError, r"train lm: heads: 3 must divide --embd 256"),
    ("lm", {"data": "sotu", "text": "t.txt"}, ValueError, r"train lm: data: names the training and held-out"),
    ("lm", {}, ValueError, r"train lm: text: 'train lm' needs a training text"),
    ("vit", {"data": "d", "dim": 30, "heads": 4}, ValueError, r"train vit: heads: 4 must divide --dim 30"),
    ("vit", {"data": "d", "patch_size": 5}, ValueError, r"train vit: patch_size: must divide 28"),
    ("point", {"data": "d", "points": 8, "neighbors": 9}, ValueError, r"train point: neighbors: 9 exceeds"),
    ("sasrec", {}, ValueError, r"train sasrec: data: 'train sasrec' needs the ratings"),
])
def test_python_refuses(task, options, exception, message):
    with pytest.raises(exception, match=message):
        qkv.train(task, out="/nonexistent/never", **options)


def test_generate_takes_the_declared_options(tmp_path):
    """GPT2Model.generate's keywords are `qkv generate`'s, checked by the same declaration."""
    model = qkv.load_model(MODELS / "sotu-gpt")
    with pytest.raises(ValueError, match=r"generate: top_p: must be a finite number in \(0, 1\], got 1.5"):
        model.generate("the", top_p=1.5)
    with pytest.raises(TypeError, match=r"generate: unknown option top_pp \(did you mean top_p\?\)"):
        model.generate("the", top_pp=0.5)
    with pytest.raises(TypeError, match=r"generate: max_new_tokens: must be an int, got float"):
        model.generate("the", max_new_tokens=2.0)
    r = cli("generate", "--model", MODELS / "sotu-gpt", "--prompt", "the", "--top-p", "1.5")
    assert r.returncode == 2 and "--top-p: must be a finite number in (0, 1], got '1.5'" in r.stderr, r.stderr
    ids = model.generate("the nation", max_new_tokens=5, temperature=0.8, top_k=20, seed=7)
    r = cli("generate", "--model", MODELS / "sotu-gpt", "--prompt", "the nation", "--max-new-tokens", 5,
            "--temperature", 0.8, "--top-k", 20, "--seed", 7, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ids"] == ids


def test_methods_take_the_declared_options(tmp_path):
    """The inference methods' keywords are their commands' options: the same names (an old
    one names the new), ranges and defaults."""
    with pytest.raises(TypeError, match=r"search: rebuild is now reindex"):
        qkv.training._parsed("search", rebuild=True)
    assert qkv.training._parsed("search") == {"top": 10, "index": "", "reindex": False, "hybrid": False,
                                              "lexical": False}
    with pytest.raises(ValueError, match=r"search: lexical: and --hybrid pick the ranking: give one"):
        qkv.training._parsed("search", hybrid=True, lexical=True)
    assert qkv.training._parsed("classify", batch=None, tta=True) == {"batch": 256, "tta": True}
    model = qkv.load_model(MODELS / "sotu-gpt")
    with pytest.raises(ValueError, match=r"score: stride: must be an integer in \[0, 2\^63\), got -1"):
        model.score("the nation", stride=-1)
    text = tmp_path / "t.txt"
    text.write_text("My fellow citizens, the state of the union is strong.\n")
    r = cli("score", "--model", MODELS / "sotu-gpt", "--file", text, "--stride", 64, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["loss"] == pytest.approx(model.score(text.read_text(), stride=64)["loss"], abs=1e-6)
    classifier = qkv.load_model(MODELS / "fashion-vit")
    with pytest.raises(ValueError, match=r"classify: batch: must be an integer in \[1, 65536\], got 0"):
        classifier.classify(np.zeros((2, 28, 28), np.uint8), batch=0)
    with pytest.raises(TypeError, match=r"classify: tta: must be a bool, got int"):
        classifier.predict(np.zeros((28, 28), np.uint8), tta=1)


def test_python_task_and_progress_are_checked():
    with pytest.raises(ValueError, match=r"train: task must be one of dates, .*, got 'recommender'"):
        qkv.train("recommender")
    with pytest.raises(TypeError, match=r"train: task must be a str"):
        qkv.train(3)
    with pytest.raises(TypeError, match=r"train dates: progress must be callable"):
        qkv.train("dates", progress=3)


def test_old_cli_spellings_name_the_new_ones():
    for old, new in ((["recommender"], "qkv train mf"), (["recommender", "--model", "sasrec"], "qkv train sasrec"),
                     (["vision"], "qkv train vit"), (["vision", "--model", "point"], "qkv train point")):
        r = cli("train", *old, "--data", "x")
        assert r.returncode == 2 and f"is now '{new}'" in r.stderr, (old, r.stderr)


def test_none_takes_the_default():
    """None is the default in every binding (the old _train_lm read None as a value)."""
    with pytest.raises(ValueError, match=r"train lm: text: 'train lm' needs a training text"):
        qkv.train("lm", out="/nonexistent/never", batch=None, layers=None, tokenizer=None)
