#!/usr/bin/env python3
"""Runs the fenced code blocks of Markdown files, as a reader would type them.

    run_doc_blocks.py --build BUILD [--list] [--keep] FILE.md [FILE.md ...]

Every fenced block must name its language (the first word of its info string). Blocks in
sh/bash, python and cpp run; the others (text, json, cmake, ...) are shown, never run. More
words after the language:

    norun            shown, not run (the prose says why: a GPU, MPI ranks, hours of work)
    file=REL/PATH    not run: the block's text is written to that path for later blocks
    needs=A[,B]      fixtures made first, things a user brings: bert-dir (a Hugging Face BERT
                     directory), gpt2-dir (a Hugging Face GPT-2 directory), both synthetic
    exit=N           the block must exit with status N (an example of an error)
    timeout=S        seconds before the block counts as hung (default 300)

The runnable blocks of one file run in order in one fresh scratch directory, so a block may
use what an earlier one wrote. The directory holds links to the repository's models,
scripts, tests and python directories and to the build (as `build`), so paths read as from
the repository's root; the build directory leads PATH (`qkv` is the built CLI) and its
python directory leads PYTHONPATH. sh blocks run under `bash -euo pipefail`, python blocks
under /usr/bin/python3 (the interpreter with NumPy and PyTorch), cpp blocks are compiled with
g++ against the package `cmake --install` puts in a prefix (pkg-config qkv) and run.

A failing block is reported as FILE:LINE with the block and its output; the exit status is 1
when any block failed, 2 for a Markdown file the runner cannot read (an unclosed fence, a
block without a language, an unknown word or fixture).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = "/usr/bin/python3"
RUN_LANGUAGES = {"sh", "bash", "python", "cpp"}
SHOWN_LANGUAGES = {"text", "json", "cmake", "toml", "console", "html", "diff", "ini", "yaml", "svg",
                   "csv", "make", "js", "javascript", "c++", "jsonl"}
FIXTURES = ("bert-dir", "gpt2-dir")
LINKS = ("models", "scripts", "tests", "python")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


class DocError(Exception):
    """A Markdown file the runner cannot read: FILE:LINE and what is wrong."""


class Block:
    def __init__(self, path, line, language, words, text):
        self.path, self.line, self.language, self.text = path, line, language, text
        self.norun = False
        self.file = None
        self.needs = []
        self.exit = 0
        self.timeout = 300
        for word in words:
            key, _, value = word.partition("=")
            where = f"{path}:{line}"
            if word == "norun":
                self.norun = True
            elif key == "file" and value:
                self.file = value
            elif key == "needs" and value:
                self.needs = value.split(",")
                unknown = [n for n in self.needs if n not in FIXTURES]
                if unknown:
                    raise DocError(f"{where}: unknown fixture {', '.join(unknown)} "
                                   f"(known: {', '.join(FIXTURES)})")
            elif key in ("exit", "timeout") and value.isdigit():
                setattr(self, key, int(value))
            else:
                raise DocError(f"{where}: unknown word '{word}' after ```{language} "
                               "(known: norun, file=PATH, needs=FIXTURE, exit=N, timeout=S)")
        if self.file and (os.path.isabs(self.file) or ".." in self.file.split("/")):
            raise DocError(f"{path}:{line}: file={self.file} must be a path inside the scratch directory")

    @property
    def runs(self):
        return self.language in RUN_LANGUAGES and not self.norun and not self.file

    def describe(self):
        if self.file:
            return f"writes {self.file}"
        if self.language not in RUN_LANGUAGES:
            return "shown"
        return "norun" if self.norun else "runs"


def parse(path):
    """The fenced blocks of a Markdown file, in order. Raises DocError on a fence without a
    language or one that is never closed."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        start = i + 1
        words = info.split()
        if not words:
            raise DocError(f"{path}:{start}: a fenced block without a language: write ```text for "
                           "output, or the language and, if it must not run, norun")
        language = words[0].lower()
        if language not in RUN_LANGUAGES and language not in SHOWN_LANGUAGES:
            raise DocError(f"{path}:{start}: unknown language '{words[0]}' (run: "
                           f"{', '.join(sorted(RUN_LANGUAGES))}; shown: {', '.join(sorted(SHOWN_LANGUAGES))})")
        body, i = [], i + 1
        while i < len(lines):
            close = lines[i].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        else:
            raise DocError(f"{path}:{start}: the block opened here is never closed")
        blocks.append(Block(path, start, language, words[1:], "\n".join(body) + "\n"))
        i += 1
    return blocks


class Scratch:
    """One file's scratch directory: links into the repository and the build, the
    environment every block runs in, fixtures and the installed package made on demand."""

    def __init__(self, build, keep):
        self.build, self.keep = build, keep
        self.dir = tempfile.mkdtemp(prefix="qkv-doc-")
        for name in LINKS:
            os.symlink(os.path.join(ROOT, name), os.path.join(self.dir, name))
        os.symlink(build, os.path.join(self.dir, "build"))
        self.made = set()
        self.env = dict(os.environ)
        self.env["PATH"] = build + os.pathsep + self.env.get("PATH", "")
        self.env["PYTHONPATH"] = os.path.join(build, "python") + (
            os.pathsep + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"

    def close(self):
        if self.keep:
            print(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def fixture(self, name):
        """Synthetic stand-ins for what a user downloads from the Hugging Face hub, written by
        the writers the Python tests use."""
        if name in self.made:
            return
        target = os.path.join(self.dir, name)
        code = {
            "bert-dir": "from test_bert import write_checkpoint; write_checkpoint(sys.argv[1])",
            "gpt2-dir": "from test_gpt2 import make_weights, write_model; write_model(sys.argv[1], make_weights(0))",
        }[name]
        os.makedirs(target, exist_ok=True)
        script = f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'tests', 'python')!r}); {code}"
        done = subprocess.run([PYTHON, "-c", script, target], env=self.env, cwd=self.dir,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode:
            raise RuntimeError(f"the fixture {name} could not be made:\n{done.stdout}")
        self.made.add(name)

    def package(self):
        """`cmake --install` of the build into the scratch directory (once): the prefix's
        pkg-config directory and library directory."""
        prefix = os.path.join(self.dir, ".prefix")
        if "package" not in self.made:
            done = subprocess.run(["cmake", "--install", self.build, "--prefix", prefix],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if done.returncode:
                raise RuntimeError(f"cmake --install {self.build} failed:\n{done.stdout}")
            self.made.add("package")
        for base, _, files in os.walk(prefix):
            if "qkv.pc" in files:
                return base, os.path.dirname(base)
        raise RuntimeError(f"no qkv.pc under {prefix} after cmake --install")


def command_of(block, scratch, workdir):
    """The command that runs a block, after writing what it needs into workdir."""
    if block.language in ("sh", "bash"):
        script = os.path.join(workdir, "block.sh")
        with open(script, "w") as f:
            f.write(block.text)
        return ["bash", "-euo", "pipefail", script]
    if block.language == "python":
        script = os.path.join(workdir, "block.py")
        with open(script, "w") as f:
            f.write(block.text)
        return [PYTHON, script]
    pkgconfig, libdir = scratch.package()
    source = os.path.join(workdir, "main.cpp")
    with open(source, "w") as f:
        f.write(block.text)
    program = os.path.join(workdir, "main")
    env = f"PKG_CONFIG_PATH={shlex.quote(pkgconfig)}"
    return ["bash", "-euo", "pipefail", "-c",
            f"g++ -std=c++20 -O1 {shlex.quote(source)} -o {shlex.quote(program)} "
            f"$({env} pkg-config --cflags --libs qkv) -Wl,-rpath,{shlex.quote(libdir)} "
            f"&& {shlex.quote(program)}"]


def run_file(path, build, keep):
    """Runs one file's blocks; returns the number that failed."""
    blocks = parse(path)
    runnable = [b for b in blocks if b.runs or b.file]
    if not runnable:
        print(f"{path}: no block to run ({len(blocks)} shown)")
        return 0
    scratch = Scratch(build, keep)
    failed = 0
    try:
        for number, block in enumerate(blocks):
            if block.file:
                target = os.path.join(scratch.dir, block.file)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "w") as f:
                    f.write(block.text)
                continue
            if not block.runs:
                continue
            where = f"{path}:{block.line}"
            workdir = os.path.join(scratch.dir, ".blocks", str(number))
            os.makedirs(workdir)
            started = time.monotonic()
            try:
                for name in block.needs:
                    scratch.fixture(name)
                command = command_of(block, scratch, workdir)
                done = subprocess.run(command, cwd=scratch.dir, env=scratch.env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      timeout=block.timeout, start_new_session=True)
                output = done.stdout.decode("utf-8", "replace")
                status = done.returncode
                problem = None if status == block.exit else (
                    f"exit status {status}, expected {block.exit}")
            except subprocess.TimeoutExpired as e:
                output = (e.stdout or b"").decode("utf-8", "replace")
                problem = f"still running after {block.timeout} s"
            except RuntimeError as e:
                output, problem = str(e), "could not be prepared"
            seconds = time.monotonic() - started
            if problem:
                failed += 1
                print(f"{where}: FAIL ({block.language} block: {problem}, {seconds:.1f} s)")
                print("---- block ----")
                print(block.text, end="")
                print("---- output ----")
                print(output, end="" if output.endswith("\n") or not output else "\n")
                print("----")
            else:
                print(f"{where}: ok ({block.language}, {seconds:.1f} s)")
    finally:
        scratch.close()
    return failed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"),
                        help="the build directory (its qkv, python module and install)")
    parser.add_argument("--list", action="store_true", help="print each block and what it does; run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directories")
    parser.add_argument("files", nargs="+", metavar="FILE.md")
    args = parser.parse_args(argv)
    build = os.path.abspath(args.build)
    if not args.list and not os.path.isfile(os.path.join(build, "qkv")):
        print(f"run_doc_blocks: {build}/qkv does not exist: build first (cmake --build {args.build})",
              file=sys.stderr)
        return 2
    try:
        parsed = {path: parse(path) for path in args.files}
    except (DocError, OSError) as e:
        print(f"run_doc_blocks: {e}", file=sys.stderr)
        return 2
    if args.list:
        for path, blocks in parsed.items():
            for block in blocks:
                extra = f" needs {','.join(block.needs)}" if block.needs else ""
                print(f"{path}:{block.line}: {block.language} {block.describe()}{extra}")
        return 0
    failed = sum(run_file(path, build, args.keep) for path in args.files)
    if failed:
        print(f"run_doc_blocks: {failed} block(s) failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
