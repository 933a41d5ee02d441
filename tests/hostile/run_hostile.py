#!/usr/bin/env python3
"""Runs the hostile-input cases of tests/hostile/cases.py (issue 29) and checks each.

  /usr/bin/python3 tests/hostile/run_hostile.py --qkv build/qkv [--only REGEX] [--jobs N]
                                                [--list] [--verbose]

Every case runs as `timeout -k 2 SECONDS prlimit --as=BYTES -- COMMAND` (SECONDS is 10
unless the case says otherwise), in a fresh temporary
directory of fixtures (cases.make_fixtures), with QKV_NUM_THREADS=2 unless the case says
otherwise (so that the address space a run needs does not grow with the machine's CPUs).
Whatever a case expects, these always fail it: a signal or a timeout (exit >= 124), an
exit status other than 0, 1 and 2, a non-zero exit without a message on stderr, and a crash
report on stderr (terminate, a sanitizer). A case marked xfail that fails is reported and
does not fail the run; one that passes is reported as XPASS, so the mark can go.
Exit status: 0 when every case passed or failed as expected, 1 otherwise.
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as table  # noqa: E402

CRASH = re.compile(r"terminate called|Segmentation fault|AddressSanitizer|runtime error:|Aborted|"
                   r"core dumped|what\(\):|std::bad_alloc")


def expand(item, fx, index):
    if isinstance(item, bytes):
        return item
    values = dict(fx, case=str(index))
    return re.sub(r"\{([a-z0-9_]+)\}", lambda m: values.get(m.group(1), m.group(0)), item)


def check(case, status, out, err):
    """The problems with one run: a list of strings, empty when it passed."""
    problems = []
    if status == 124 or status == 137:
        return [f"timed out after {case.seconds} s"]
    # `qkv train ... --stop-at N` stops as Ctrl-C does, with a checkpoint and exit 130 (128 +
    # SIGINT): the run ended as asked, by no signal.
    if (status == 130 and "--stop-at" in case.argv
            and re.search(r"stopped at step \d+ of \d+; checkpoint saved", out)):
        status = 0
    if status < 0 or status >= 128:
        return [f"ended by a signal (exit {status})"]
    if status not in (0, 1, 2):
        return [f"exit status {status}, not 0, 1 or 2"]
    if CRASH.search(err):
        problems.append("stderr reports a crash or an unhandled exception")
    if status != 0:
        # What qkv prints: "qkv: error: ..." for a failure, "qkv <command>: ..." for a
        # usage error (other lines may come first: libgomp's, generate's timings).
        lines = err.split("\n")
        ours = case.argv[0] == "{qkv}" or (case.shell and "{qkv}" in case.argv[0])
        if not err.strip():
            problems.append("no message on stderr")
        elif ours and status == 1 and not any(x.startswith("qkv: error: ") for x in lines):
            problems.append("no line of stderr starts 'qkv: error: '")
        elif ours and status == 2 and not any(re.match(r"qkv( [a-z]+){0,2}: ", x) for x in lines):
            problems.append("no line of stderr starts 'qkv <command> [<subcommand>]: '")
    want = case.expect
    if want == "usage":
        if status != 2:
            problems.append(f"exit {status}, expected 2 (a usage error)")
        elif err.count("\n") != 1:
            problems.append(f"{err.count(chr(10))} lines on stderr, expected 1")
        if case.names and case.names not in err:
            problems.append(f"the message does not name {case.names}")
    elif want == "failure" and status != 1:
        problems.append(f"exit {status}, expected 1 (a failure)")
    elif want == "error" and status not in (1, 2):
        problems.append(f"exit {status}, expected 1 or 2 (an error)")
    elif want == "ok" and status != 0:
        problems.append(f"exit {status}, expected 0")
    elif want == "date" and status == 0 and (case.stdout is None or out != case.stdout):
        problems.append("exit 0 with an answer that is not the date the input names")
    if case.stdout is not None and out != case.stdout:
        problems.append(f"stdout {out[:300]!r}, expected {case.stdout[:300]!r}")
    if case.stdout_re is not None and not re.search(case.stdout_re, out):
        problems.append(f"stdout lacks /{case.stdout_re}/")
    if case.stderr is not None and not re.search(case.stderr, err):
        problems.append(f"stderr lacks /{case.stderr}/")
    if case.no_stderr is not None and re.search(case.no_stderr, err):
        problems.append(f"stderr has /{case.no_stderr}/")
    return problems


def run_case(index, case, fx):
    if case.shell:
        command = ["bash", "-c", expand(case.argv[0], fx, index)]
    else:
        command = [expand(a, fx, index) for a in case.argv]
    command = ["timeout", "-k", "2", str(case.seconds),
               "prlimit", f"--as={case.memory}", "--", *command]
    env = dict(os.environ, QKV_NUM_THREADS="2", LC_ALL="C.UTF-8")
    for k, v in case.env.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = expand(v, fx, index)
    stdin = subprocess.DEVNULL
    opened = None
    if isinstance(case.stdin, bytes):
        stdin = subprocess.PIPE
    elif case.stdin is not None:
        opened = open(expand(case.stdin, fx, index), "rb")
        stdin = opened
    start = time.monotonic()
    try:
        p = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env, cwd=fx["tmp"], start_new_session=True)
        try:
            out, err = p.communicate(case.stdin if isinstance(case.stdin, bytes) else None,
                                     timeout=case.seconds + 10)
            status = p.returncode
        except subprocess.TimeoutExpired:  # timeout itself did not end it: end the group
            os.killpg(p.pid, 9)
            out, err = p.communicate()
            status = 124
    finally:
        if opened:
            opened.close()
    seconds = time.monotonic() - start
    out_text = out.decode("utf-8", "replace")
    err_text = err.decode("utf-8", "replace")
    return status, out_text, err_text, check(case, status, out_text, err_text), seconds


def shown(command):
    text = " ".join(a.decode("utf-8", "backslashreplace") if isinstance(a, bytes) else a
                    for a in command)
    return text if len(text) < 300 else text[:300] + f"... ({len(text)} characters)"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qkv", required=True, help="the qkv binary")
    parser.add_argument("--only", help="run the cases whose name matches this regex")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--verbose", action="store_true", help="print every case's outcome")
    args = parser.parse_args()
    selected = [c for c in table.CASES if not args.only or re.search(args.only, c.name)]
    names = [c.name for c in table.CASES]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        print(f"duplicate case names: {sorted(duplicates)}", file=sys.stderr)
        return 1
    if args.list:
        for c in selected:
            print(c.name)
        return 0
    if not selected:
        print("no case matches", file=sys.stderr)
        return 1
    for tool in ("timeout", "prlimit"):
        if shutil.which(tool) is None:
            print(f"{tool} is missing (coreutils, util-linux)", file=sys.stderr)
            return 1

    start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="qkv-hostile-")
    try:
        fx = table.make_fixtures(tmp, os.path.abspath(args.qkv))
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(run_case, i, c, fx) for i, c in enumerate(selected)]
            results = [f.result() for f in futures]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    failed, xfailed, xpassed = [], [], []
    for i, (case, (status, out, err, problems, seconds)) in enumerate(zip(selected, results)):
        if problems and case.xfail:
            xfailed.append(case)
            verdict = "XFAIL"
        elif problems:
            failed.append(case)
            verdict = "FAIL"
        elif case.xfail:
            xpassed.append(case)
            verdict = "XPASS"
        else:
            verdict = "ok"
        if verdict in ("FAIL", "XPASS") or args.verbose:
            print(f"{verdict}: {case.name} ({seconds:.1f} s)")
            print(f"    $ {shown([expand(a, fx, i) for a in case.argv])}")
            print(f"    exit {status}; stderr: {err[:400].rstrip()!r}")
            if out:
                print(f"    stdout: {out[:200]!r}")
            for p in problems:
                print(f"    - {p}")
            if case.xfail:
                print(f"    (marked xfail: {case.xfail})")
    rows = ", ".join(f"{issue}: {sorted({c.row for c in selected if c.row and c.issue == issue})}"
                     for issue in sorted({c.issue for c in selected if c.row}))
    passed = len(selected) - len(failed) - len(xfailed) - len(xpassed)
    print(f"hostile: {len(selected)} cases in {time.monotonic() - start:.1f} s: {passed} passed, "
          f"{len(failed)} failed, {len(xfailed)} failed as expected, {len(xpassed)} passed "
          f"unexpectedly; rows by issue {rows}")
    for c in xfailed:
        print(f"  expected failure: {c.name}: {c.xfail}")
    # The slowest cases against their limits: how near a loaded machine is to a timeout.
    slowest = sorted(zip(selected, results), key=lambda x: x[1][4] / x[0].seconds, reverse=True)
    print("slowest: " + "; ".join(f"{c.name} {r[4]:.1f} of {c.seconds} s" for c, r in slowest[:5]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
