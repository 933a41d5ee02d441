"""Hostile cases of issue 48: atomic writes, model directories that change as a whole, resume.
Read by cases.py (see its docstring for what a Case checks).

A full disk is simulated with the file-size limit (`ulimit -f`, with SIGXFSZ ignored so that
write(2) fails with EFBIG as it would with ENOSPC); a kill with QKV_TEST_CRASH_AT=N (the
writer kills itself at its N-th durable step, qkv/files.h) or with kill -9 at random times.
"""

import os
import subprocess

from cases import Case, qkv, py, PY_ENV  # noqa: F401

# A tiny language model: trains in well under a second.
LM = ("--vocab-size 300 --layers 1 --embd 32 --heads 2 --context 8 --batch 2 --quiet")


def fixtures(tmp, fx):
    qkv_bin = fx["qkv"]
    fx["lm_text_b"] = os.path.join(tmp, "lm_text_b.txt")
    with open(fx["lm_text_b"], "wb") as f:
        f.write(b"".join(b"a different text about %d cats and %d dogs, told again\n" % (i, i * 7)
                         for i in range(300)))
    # lm_a: a finished run on lm_text; lm_b: the same options on lm_text_b (the new model a
    # retraining over lm_a would write).
    for name, text in (("lm_a", fx["lm_text"]), ("lm_b", fx["lm_text_b"])):
        fx[name] = os.path.join(tmp, name)
        subprocess.run([qkv_bin, "train", "lm", "--text", text, *LM.split(), "--steps", "3",
                        "--out", fx[name]], check=True, stdout=subprocess.DEVNULL)


# The score of lm_text under the model in $1 (deterministic): a model's fingerprint.
SCORE = "score() { {qkv} score --model \"$1\" --file {lm_text} --json 2>&1; }; "


def _full_disk(name, command, files, row, blocks=4):
    """`command` (a qkv command line writing `files`, each made first with the text 'old')
    under a file-size limit of `blocks` KiB: it must fail naming the problem, and every file
    must still hold 'old'."""
    make = " ".join(f"printf old > {f};" for f in files)
    check = " ".join(f"[ \"$(cat {f})\" = old ] || {{ echo '{f} was changed' >&2; exit 99; }};"
                     for f in files)
    script = (f"{make} ( trap '' XFSZ; ulimit -f {blocks}; exec {command} ); rc=$?; "
              f"{check} exit $rc")
    return Case(name, [script], shell=True, expect="failure",
                stderr="File too large", issue=48, row=row, seconds=30)


def cases():
    c = []
    # Row 3: retraining over a finished run with another text, on a disk that fills while
    # the weights are written: the old model must stay whole (it once kept its weights with
    # the new run's tokenizer: generate exit 0 with garbage, score 7.14 bits per byte).
    c.append(Case(
        "issue 48 row 3 train lm over a finished run, disk full",
        [SCORE + "D={tmp}/r3; cp -r {lm_a} $D; before=$(score $D); "
         "( trap '' XFSZ; ulimit -f 24; exec {qkv} train lm --text {lm_text_b} " + LM +
         " --steps 3 --out $D ); rc=$?; after=$(score $D); "
         "[ \"$before\" = \"$after\" ] || { echo \"the model changed: $before -> $after\" >&2; exit 99; }; "
         "exit $rc"],
        shell=True, expect="failure", stderr="File too large", issue=48, row=3, seconds=30))
    # Row 3 with --tokenizer: its files are copied with the weights at the end, not at the start.
    c.append(Case(
        "issue 48 row 3 train lm --tokenizer over a finished run, disk full",
        [SCORE + "D={tmp}/r3t; cp -r {lm_a} $D; before=$(score $D); "
         "( trap '' XFSZ; ulimit -f 24; exec {qkv} train lm --text {lm_text_b} --tokenizer {lm_b} "
         + LM + " --steps 3 --out $D ); rc=$?; after=$(score $D); "
         "[ \"$before\" = \"$after\" ] || { echo \"the model changed: $before -> $after\" >&2; exit 99; }; "
         "exit $rc"],
        shell=True, expect="failure", stderr="File too large", issue=48, row=3, seconds=30))
    # Rows 3-4: a retraining killed at each of its durable steps (QKV_TEST_CRASH_AT=N): the
    # directory scores as the old model, or holds the new run's tokenizer and scores (one
    # of the new run's saves), or is refused naming a file; never a mix (the old weights with
    # the new tokenizer), never an empty config.json.
    c.append(Case(
        "issue 48 rows 3-4 train lm killed at every durable step",
        [SCORE + "old=$(score {lm_a}); "
         "for n in $(seq 1 14); do D={tmp}/r34_$n; cp -r {lm_a} $D; "
         "QKV_TEST_CRASH_AT=$n {qkv} train lm --text {lm_text_b} " + LM +
         " --steps 3 --checkpoint-every 1 --out $D >/dev/null 2>&1; "
         "[ -s $D/config.json ] || { echo \"step $n: config.json empty\" >&2; exit 97; }; "
         "s=$(score $D); case \"$s\" in \"$old\") ;; *records*) ;; "
         "*) cmp -s $D/vocab.json {lm_b}/vocab.json && [ \"${s#*bits_per_byte}\" != \"$s\" ] || "
         "{ echo \"step $n: neither model: $s\" >&2; exit 98; };; esac; done; echo ok"],
        shell=True, expect="ok", stdout="ok\n", issue=48, row=4, seconds=120))
    # Row 4: kill -9 at random moments of a run that saves every step, 20 times.
    c.append(Case(
        "issue 48 row 4 train lm --checkpoint-every 1 killed at random",
        ["D={tmp}/r4; RANDOM=48; for i in $(seq 20); do "
         "{qkv} train lm --text {lm_text} " + LM + " --steps 400 --checkpoint-every 1 --out $D >/dev/null & p=$!; "
         "sleep 0.$((RANDOM % 7 + 2)); kill -9 $p; wait $p 2>/dev/null; "
         "if [ -e $D/config.json ]; then [ -s $D/config.json ] || { echo \"kill $i: config.json empty\" >&2; exit 97; }; "
         "{qkv} generate --model $D --prompt the --max-new-tokens 2 >/dev/null 2>$D.err || "
         "grep -q records $D.err || { cat $D.err >&2; exit 96; }; fi; done; echo ok"],
        shell=True, expect="ok", stdout="ok\n", issue=48, row=4, seconds=120))
    # Row 6: a symlink planted at the writers' old fixed temporary name is never written
    # through; two trainings into one directory at once both finish (unique temporary names).
    c.append(Case(
        "issue 48 row 6 a symlink at the old temporary name",
        ["printf precious > {tmp}/victim6; mkdir -p {tmp}/r6; "
         "ln -s {tmp}/victim6 {tmp}/r6/model.safetensors.tmp; ln -s {tmp}/victim6 {tmp}/r6/config.json.tmp; "
         "{qkv} train lm --text {lm_text} " + LM + " --steps 2 --out {tmp}/r6 >/dev/null || exit $?; "
         "[ \"$(cat {tmp}/victim6)\" = precious ] || { echo 'the symlink target was overwritten' >&2; exit 99; }; echo ok"],
        shell=True, expect="ok", stdout="ok\n", issue=48, row=6, seconds=30))
    c.append(Case(
        "issue 48 row 6 two trainings into one directory at once",
        ["D={tmp}/r6c; for i in 1 2 3; do "
         "{qkv} train lm --text {lm_text} " + LM + " --steps 3 --checkpoint-every 1 --out $D >/dev/null & p1=$!; "
         "{qkv} train lm --text {lm_text} " + LM + " --steps 3 --checkpoint-every 1 --out $D >/dev/null & p2=$!; "
         "wait $p1 || exit 91; wait $p2 || exit 92; done; "
         "{qkv} generate --model $D --prompt the --max-new-tokens 2 >/dev/null && echo ok"],
        shell=True, expect="ok", stdout="ok\n", issue=48, row=6, seconds=60))
    # Row 7: pages and configs on a full disk: the old file stays, the error names the problem.
    c.append(_full_disk("issue 48 row 7 generate --html on a full disk",
                        "{qkv} generate --model {lm_a} --prompt the --max-new-tokens 4 --html {tmp}/r7g.html",
                        ["{tmp}/r7g.html"], 7, blocks=1))
    c.append(_full_disk("issue 48 row 7 translate --html --svg on a full disk",
                        "{qkv} translate --html {tmp}/r7t.html --svg {tmp}/r7t.svg 21.11.2026",
                        ["{tmp}/r7t.html", "{tmp}/r7t.svg"], 7, blocks=1))
    c.append(_full_disk("issue 48 row 7 tokenizer training on a full disk",
                        "{qkv} train tokenizer --text {lm_text} --vocab-size 300 --out {tmp}/r7tok",
                        [], 7, blocks=1))
    # Row 8: a loaded model's file truncated, then rewritten in place with zeros, between
    # calls: the model was copied at load, so every call gives the first call's logits (it
    # once died of SIGBUS, or read zeros silently).
    c.append(Case(
        "issue 48 row 8 truncate and rewrite the weights of a loaded model",
        py("import os, shutil, sys, numpy as np, qkv\n"
           "d = sys.argv[1] + '/r8'\n"
           "shutil.copytree(sys.argv[2], d)\n"
           "m = qkv.load_model(d)\n"
           "ids = np.array([[1, 2, 3, 4]])\n"
           "first = np.array(m(ids))\n"
           "w = d + '/model.safetensors'\n"
           "size = os.path.getsize(w)\n"
           "for i in range(6):\n"
           "    if i % 2 == 0:\n"
           "        os.truncate(w, 100)\n"
           "    else:\n"
           "        with open(w, 'r+b') as f: f.write(bytes(size))\n"
           "    again = np.array(m(ids))\n"
           "    assert np.array_equal(first, again), f'call {i}: the logits changed'\n"
           "print('ok')\n") + ["{tmp}", "{lm_a}"],
        env=PY_ENV, expect="ok", stdout="ok\n", issue=48, row=8, seconds=30))
    # Row 16: resuming a finished run is an error naming it, not "training loss 0.0000".
    c.append(Case("issue 48 row 16 train lm --resume on a finished run",
                  ["D={tmp}/r16; cp -r {lm_a} $D; {qkv} train lm --text {lm_text} " + LM +
                   " --steps 3 --resume --out $D"],
                  shell=True, expect="failure", stderr="is finished \\(step 3 of 3\\)",
                  no_stderr="0\\.0000", issue=48, row=16, seconds=30))
    return c
