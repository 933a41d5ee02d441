#!/usr/bin/python3
"""docs/cli.md, the command-line reference, made from the binary's own --help: `qkv --help`,
then every command's, and every `qkv train` task's. The options of the training tasks and of
generate, search, recommend, classify and score come from their one declaration
(include/qkv/options.h), so this page, --help and Python's keywords cannot disagree.

  scripts/cli_reference.py build/qkv            # writes docs/cli.md
  scripts/cli_reference.py build/qkv --check    # exit 1 (with a diff) when docs/cli.md differs

The ctest docs.cli_reference runs the check: a change to an option's name, range, default or
help fails it until the page is made again.
"""
import argparse
import difflib
import os
import re
import subprocess
import sys

import atomic_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "cli.md")


def help_of(qkv, *command):
    r = subprocess.run([qkv, *command, "--help"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"cli_reference: {' '.join(['qkv', *command, '--help'])} exited {r.returncode}: {r.stderr}")
    return r.stdout.rstrip("\n")


def subcommands(help_text):
    """The names listed under "Subcommands:" in a --help text, in its order."""
    names, inside = [], False
    for line in help_text.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
            continue
        if inside:
            m = re.match(r"^  ([a-z][a-z0-9-]*)\s", line)
            if m:
                names.append(m.group(1))
            elif line and not line.startswith("    "):
                break
    return names


def page(qkv):
    top = help_of(qkv)
    out = ["# qkv command-line reference", "",
           "Made by `scripts/cli_reference.py` from the binary's `--help` (the ctest",
           "`docs.cli_reference` fails when this page and the binary differ). Each training",
           "task's options, and those of generate, search, recommend, classify and score, are",
           "declared once and are also the keywords of their Python functions",
           "(`qkv.options(\"train lm\")` lists them).", ""]
    sections = [("qkv", top)]
    for command in subcommands(top):
        text = help_of(qkv, command)
        sections.append((f"qkv {command}", text))
        for task in subcommands(text):
            sections.append((f"qkv {command} {task}", help_of(qkv, command, task)))
    out += [f"- [`{name}`](#{name.replace(' ', '-')})" for name, _ in sections] + [""]
    for name, text in sections:
        out += [f"## {name}", "", "```text", text, "```", ""]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("qkv", help="the qkv binary (build/qkv)")
    parser.add_argument("--check", action="store_true", help="compare with docs/cli.md instead of writing it")
    args = parser.parse_args()
    made = page(args.qkv)
    if not args.check:
        # Whole or not at all (scripts/atomic_file.py): a failure leaves the page as it was.
        atomic_file.write(PAGE, made)
        print(f"wrote {os.path.relpath(PAGE)}")
        return 0
    try:
        with open(PAGE, encoding="utf-8") as f:
            written = f.read()
    except FileNotFoundError:
        written = ""
    if written == made:
        print("docs/cli.md equals the binary's --help")
        return 0
    sys.stdout.writelines(difflib.unified_diff(written.splitlines(True), made.splitlines(True),
                                               "docs/cli.md", "qkv --help", n=1))
    print("\ndocs/cli.md differs from the binary's --help: make it again with "
          "scripts/cli_reference.py build/qkv")
    return 1


if __name__ == "__main__":
    sys.exit(main())
