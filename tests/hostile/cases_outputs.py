"""Hostile cases of issue 48: outputs that are inputs, and --index files that are not qkv indexes.
Read by cases.py (see its docstring for what a Case checks).

Row 17: every output path (--html, --svg, --output, --index, train's --out files) that is the
same file as one of the command's inputs (the model directory's files, --images, --file,
--corpus, --text, --data ...) is refused naming both, and the input is unchanged afterwards:
each case works in its own directory ({tmp}/c{case}) on copies, runs qkv, then compares every
copy it could have destroyed with its original (exit 99 when one changed, which fails the case
whatever qkv printed). Variants: a symlink to the input, a hard link, ./ and ../ spellings.

Row 5: qkv search's --index must be a qkv search index (judged by its header) or not exist;
anything else is refused as "not a qkv search index", even with --reindex, and never called
damaged. --model is a directory that is no Universal Sentence Encoder here (no such model is
a fixture of this suite): the index is checked before the model loads, so the refusals need
none; the cases that accept an index then fail loading the model, and check only that the
index was not refused."""

import json
import struct
import zlib

from cases import Case, qkv, py, PY_ENV, write_fixture  # noqa: F401


def _png_gray(width, height):
    """An 8-bit greyscale PNG, by hand (signature, IHDR, one IDAT, IEND)."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    rows = b"".join(b"\x00" + bytes((x * 9 + y * 5) % 256 for x in range(width))
                    for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _search_index_bytes(lines=1, width=512):
    """A qkv search index as SearchIndex::save lays it out: compact header, metadata first
    (corpus, format, lines, model), then "embeddings" (lines, width) f32."""
    header = {"__metadata__": {"corpus": "ab" * 32, "format": "qkv-search-index/1",
                               "lines": str(lines), "model": "cd" * 32},
              "embeddings": {"dtype": "F32", "shape": [lines, width],
                             "data_offsets": [0, 4 * lines * width]}}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"\x00" * (4 * lines * width)


def fixtures(tmp, fx):
    def w(name, data):
        return write_fixture(tmp, name, data)
    fx["png28"] = w("outputs_image.png", _png_gray(28, 28))
    fx["outputs_corpus"] = w("outputs_corpus.txt", b"I like pizza\nthe weather is nice today\n"
                                            b"play chess against the computer\n")
    fx["search_index"] = w("outputs_index.qkv-index", _search_index_bytes())
    fx["search_index_cut"] = w("outputs_index_cut.qkv-index", _search_index_bytes()[:100])


def _alias(name, setup, command, keep, stderr, row=17, seconds=10, no_stderr=None):
    """A shell case in its own directory $d: `setup` makes the copies, `command` runs qkv
    (expected to fail naming `stderr`), then each (original, copy) of `keep` must be equal."""
    checks = "".join(f' cmp -s {a} {b} || {{ echo "changed: {b}" >&2; exit 99; }};' for a, b in keep)
    script = (f"set -e; d={{tmp}}/c{{case}}; rm -rf $d; mkdir -p $d; cd $d; {setup}; set +e; "
              f"{command}; s=$?;{checks} exit $s")
    return Case(f"issue 48 row {row} {name}", [script], shell=True, expect="failure",
                stderr=stderr, no_stderr=no_stderr, row=row, issue=48, seconds=seconds)


SAME = "is the same file as"


def _row17():
    c = []
    g = "cp -r {gpt2} g"
    gen = "{qkv} generate --model g --prompt x --max-new-tokens 1"
    c += [
        _alias("generate --html the model's weights", g, gen + " --html g/model.safetensors",
               [("{gpt2}/model.safetensors", "g/model.safetensors")],
               rf"--html 'g/model.safetensors' {SAME} 'model.safetensors' of --model 'g'"),
        _alias("generate --html a symlink to config.json", g + "; ln -s g/config.json page.html",
               gen + " --html page.html", [("{gpt2}/config.json", "g/config.json")],
               rf"--html 'page.html' {SAME} 'config.json' of --model 'g'"),
        _alias("generate --html a hard link to vocab.json", g + "; ln g/vocab.json page.html",
               gen + " --html page.html", [("{gpt2}/vocab.json", "g/vocab.json")],
               rf"--html 'page.html' {SAME} 'vocab.json' of --model 'g'"),
        _alias("generate --html merges.txt by ./ and ../", g + "; mkdir sub",
               "(cd sub && {qkv} generate --model ../g --prompt x --max-new-tokens 1 "
               "--html ./../g/./merges.txt)", [("{gpt2}/merges.txt", "g/merges.txt")],
               rf"--html './../g/./merges.txt' {SAME} 'merges.txt' of --model '../g'"),
        _alias("generate --html the model's weights by an absolute path", g,
               "{qkv} generate --model $d/g/ --prompt x --max-new-tokens 1 --html $d/g/model.safetensors",
               [("{gpt2}/model.safetensors", "g/model.safetensors")], SAME),
    ]
    cls = "{qkv} classify --model {vit} --images x.png"
    c += [
        _alias("classify --images x.png --html x.png", "cp {png28} x.png", cls + " --html x.png",
               [("{png28}", "x.png")], rf"--html 'x.png' {SAME} --images 'x.png'"),
        _alias("classify --html a hard link to --images", "cp {png28} x.png; ln x.png page.html",
               cls + " --html page.html", [("{png28}", "x.png")],
               rf"--html 'page.html' {SAME} --images 'x.png'"),
        _alias("classify --html a symlink to --images by ../", "cp {png28} x.png; mkdir sub; "
               "ln -s ../x.png sub/page.html", cls + " --html ./sub/../sub/page.html",
               [("{png28}", "x.png")], rf"{SAME} --images 'x.png'"),
        _alias("classify --html --labels", "cp {vit_labels} labels.gz",
               "{qkv} classify --model {vit} --images {vit_images} --labels labels.gz --html labels.gz",
               [("{vit_labels}", "labels.gz")], rf"--html 'labels.gz' {SAME} --labels 'labels.gz'"),
        _alias("classify --html the model's config.json", "cp -r {vit} m",
               "{qkv} classify --model m --images {png28} --html m/config.json",
               [("{vit}/config.json", "m/config.json")],
               rf"--html 'm/config.json' {SAME} 'config.json' of --model 'm'"),
    ]
    tr = "{qkv} translate --file f.txt"
    c += [
        _alias("translate --file f --html f", "cp {dates_file} f.txt", tr + " --html f.txt",
               [("{dates_file}", "f.txt")], rf"--html 'f.txt' {SAME} --file 'f.txt'"),
        _alias("translate --file f --svg f", "cp {dates_file} f.txt", tr + " --svg f.txt",
               [("{dates_file}", "f.txt")], rf"--svg 'f.txt' {SAME} --file 'f.txt'"),
        _alias("translate --html --file by ./ and ../", "cp {dates_file} f.txt; mkdir sub",
               "(cd sub && {qkv} translate --file ../f.txt --html ./../f.txt)",
               [("{dates_file}", "f.txt")], rf"--html './../f.txt' {SAME} --file '../f.txt'"),
        _alias("translate --svg a symlink to --file", "cp {dates_file} f.txt; ln -s f.txt a.svg",
               tr + " --svg a.svg", [("{dates_file}", "f.txt")], rf"--svg 'a.svg' {SAME} --file 'f.txt'"),
        _alias("translate --html the model's weights", "cp -r {dates} m",
               "{qkv} translate --model m 21.11.2026 --html m/model.safetensors",
               [("{dates}/model.safetensors", "m/model.safetensors")],
               rf"--html 'm/model.safetensors' {SAME} 'model.safetensors' of --model 'm'"),
    ]
    run = "{qkv} run --model b --text x"
    c += [
        _alias("run --output the model's weights", "cp -r {bert} b", run + " --output b/model.safetensors",
               [("{bert}/model.safetensors", "b/model.safetensors")],
               rf"--output 'b/model.safetensors' {SAME} 'model.safetensors' of --model 'b'"),
        _alias("run --html vocab.txt by ./", "cp -r {bert} b", run + " --html ./b/./vocab.txt",
               [("{bert}/vocab.txt", "b/vocab.txt")],
               rf"--html './b/./vocab.txt' {SAME} 'vocab.txt' of --model 'b'"),
        _alias("run --output a hard link to config.json", "cp -r {bert} b; ln b/config.json o.safetensors",
               run + " --output o.safetensors", [("{bert}/config.json", "b/config.json")],
               rf"--output 'o.safetensors' {SAME} 'config.json' of --model 'b'"),
    ]
    c += [
        _alias("recommend --html the model's movies.csv", "cp -r {rec_sasrec} r",
               "{qkv} recommend --model r --user 1 --html r/movies.csv",
               [("{rec_sasrec}/movies.csv", "r/movies.csv")],
               rf"--html 'r/movies.csv' {SAME} 'movies.csv' of --model 'r'"),
        _alias("recommend --html a symlink to history.csv", "cp -r {rec_sasrec} r; ln -s r/history.csv p.html",
               "{qkv} recommend --model r --user 1 --html p.html",
               [("{rec_sasrec}/history.csv", "r/history.csv")],
               rf"--html 'p.html' {SAME} 'history.csv' of --model 'r'"),
    ]
    # qkv train --out DIR: the files it writes there against its inputs.
    lm = ("{qkv} train lm --layers 1 --embd 8 --heads 1 --context 8 --steps 2 --batch 2 "
          "--vocab-size 260 --warmup 1 --eval-every 1 --quiet")
    c += [
        _alias("train lm --text DIR/vocab.json --out DIR", "mkdir D; cp {lm_text} D/vocab.json",
               lm + " --text D/vocab.json --out D", [("{lm_text}", "D/vocab.json")],
               rf"--out 'D': the vocab.json written there would overwrite --text 'D/vocab.json'",
               seconds=30),
        _alias("train lm --heldout DIR/config.json --out DIR", "mkdir D; cp {lm_text} D/config.json",
               lm + " --text {lm_text} --heldout D/config.json --out D", [("{lm_text}", "D/config.json")],
               rf"--out 'D': the config.json written there would overwrite --heldout 'D/config.json'",
               seconds=30),
        _alias("train lm --out DIR holding a hard link to --text", "mkdir D; cp {lm_text} t.txt; "
               "ln t.txt D/merges.txt", lm + " --text t.txt --out D", [("{lm_text}", "t.txt")],
               rf"--out 'D': the merges.txt written there would overwrite --text 't.txt'", seconds=30),
        _alias("train tokenizer --text DIR/merges.txt --out DIR", "mkdir D; cp {lm_text} D/merges.txt",
               "{qkv} train tokenizer --text D/merges.txt --vocab-size 260 --out D",
               [("{lm_text}", "D/merges.txt")],
               rf"--out 'D': the merges.txt written there would overwrite --text 'D/merges.txt'"),
        _alias("train mf --data DIR/movies.csv --out DIR", "mkdir D; cp {ratings} D/movies.csv",
               "{qkv} train mf --data D/movies.csv --epochs 1 --dim 4 --quiet --out D",
               [("{ratings}", "D/movies.csv")],
               rf"--out 'D': the movies.csv written there would overwrite --data 'D/movies.csv'",
               seconds=30),
    ]
    # Not refused: --tokenizer DIR --out DIR is one directory on purpose (the run keeps the
    # tokenizer's files).
    c += [
        Case("issue 48 row 17 train lm --tokenizer DIR --out DIR is allowed",
             ["set -e; d={tmp}/c{case}; rm -rf $d; mkdir -p $d; cd $d; cp -r {bpe} D; " + lm.replace(
                 "--vocab-size 260 ", "") + " --text {lm_text} --tokenizer D --out D >/dev/null; "
              "cmp {bpe}/vocab.json D/vocab.json; cmp {bpe}/merges.txt D/merges.txt"],
             shell=True, expect="ok", row=17, issue=48, seconds=60),
    ]
    return c


def _row5():
    c = []
    s = "{qkv} search --model {bert} --query x"
    not_index = "not a qkv search index"
    c += [
        _alias("search --index the corpus", "cp {outputs_corpus} c.txt", s + " --corpus c.txt --index c.txt",
               [("{outputs_corpus}", "c.txt")], rf"--index 'c.txt' {SAME} --corpus 'c.txt'", row=5,
               no_stderr="damaged"),
        _alias("search --index the corpus --reindex", "cp {outputs_corpus} c.txt",
               s + " --corpus c.txt --index c.txt --reindex", [("{outputs_corpus}", "c.txt")],
               rf"--index 'c.txt' {SAME} --corpus 'c.txt'", row=5, no_stderr="damaged"),
        _alias("search --index a symlink to the corpus by ../", "cp {outputs_corpus} c.txt; mkdir sub; "
               "ln -s ../c.txt sub/i", s + " --corpus ./c.txt --index sub/../sub/i --reindex",
               [("{outputs_corpus}", "c.txt")], rf"--index 'sub/../sub/i' {SAME} --corpus './c.txt'", row=5),
        _alias("search the default index a hard link to the corpus", "cp {outputs_corpus} c.txt; "
               "ln c.txt c.txt.qkv-index", s + " --corpus c.txt --reindex", [("{outputs_corpus}", "c.txt")],
               rf"--index 'c.txt.qkv-index' {SAME} --corpus 'c.txt'", row=5),
        _alias("search --index a file of --model", "cp -r {bert} m; cp {outputs_corpus} c.txt",
               "{qkv} search --model m --query x --corpus c.txt --index m/model.safetensors --reindex",
               [("{bert}/model.safetensors", "m/model.safetensors")],
               rf"--index 'm/model.safetensors' {SAME} 'model.safetensors' of --model 'm'", row=5),
        _alias("search --index another model's weights", "cp {gpt2}/model.safetensors w.safetensors",
               s + " --corpus {outputs_corpus} --index w.safetensors",
               [("{gpt2}/model.safetensors", "w.safetensors")],
               rf"index 'w.safetensors' is {not_index} \(a safetensors file of format", row=5,
               no_stderr="damaged"),
        _alias("search --index another model's weights --reindex", "cp {gpt2}/model.safetensors w.safetensors",
               s + " --corpus {outputs_corpus} --index w.safetensors --reindex",
               [("{gpt2}/model.safetensors", "w.safetensors")], not_index, row=5, no_stderr="damaged"),
        _alias("search --index a text file --reindex", "cp {lm_text} notes.txt",
               s + " --corpus {outputs_corpus} --index notes.txt --reindex", [("{lm_text}", "notes.txt")],
               rf"index 'notes.txt' is {not_index} \(its header is not one", row=5, no_stderr="damaged"),
        _alias("search --index an empty file --reindex", ": > e",
               s + " --corpus {outputs_corpus} --index e --reindex", [("/dev/null", "e")], not_index, row=5),
        _alias("search --index /dev/null", "true", s + " --corpus {outputs_corpus} --index /dev/null", [],
               rf"index '/dev/null' is {not_index}: it is a character device", row=5,
               no_stderr="damaged|delete it"),
        _alias("search --index /dev/null --reindex", "true",
               s + " --corpus {outputs_corpus} --index /dev/null --reindex", [],
               rf"index '/dev/null' is {not_index}: it is a character device", row=5,
               no_stderr="damaged|delete it"),
        _alias("search --index a FIFO", "mkfifo p", s + " --corpus {outputs_corpus} --index p --reindex", [],
               rf"--index 'p': cannot write|{not_index}", row=5),
    ]
    # Accepted as an index (whole, or cut short: damaged): the failure is then the model's,
    # never "not a qkv search index"; the index file is left as it was.
    for name, fixture in (("a qkv index", "search_index"), ("a qkv index cut short", "search_index_cut")):
        c.append(_alias(f"search --index {name} --reindex is not refused as another file",
                        f"cp {{{fixture}}} i", s + " --corpus {outputs_corpus} --index i --reindex",
                        [(f"{{{fixture}}}", "i")], "model", row=5, no_stderr=not_index))
    return c


def cases():
    return _row17() + _row5()
