"""Hostile cases of issue 48: bounded parsers: JSON nesting and size, PNG chunk lengths and palettes, runs of combining marks.
Read by cases.py (see its docstring for what a Case checks)."""

import os
import shutil
import struct
import zlib

from cases import Case, qkv, py, PY_ENV  # noqa: F401

# ---------------------------------------------------------------------------------------
# Row 1: JSON nested 100000 levels deep crashed every reader (exit 139: nlohmann's dump()
# recursed quoting the value for the message). Each loader gets nested text of several
# shapes; nesting over 64 levels is refused before parsing (src/io/json_bounded.h).

N = 100000
DEEP = {
    "arrays": b"[" * N + b"]" * N,
    "objects": b'{"a":' * N + b"1" + b"}" * N,
    "mixed": b'[{"k":' * N + b"1" + b"}]" * N,
    "unclosed": b"[" * N,
}
DEPTH = r"nested more than 64 levels deep"


def _copy_dir(src, dst):
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def _safetensors_with_entry(src, dst, key, value):
    """src's safetensors file with one more header entry `key` whose JSON is `value` (bytes,
    written as is: Python's json cannot write 100000 levels)."""
    data = open(src, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = data[8:8 + n]
    assert header.startswith(b"{")
    new = b'{"' + key.encode() + b'":' + value + b"," + header[1:]
    _write(dst, struct.pack("<Q", len(new)) + new + data[8 + n:])


def _png(width, height, colour, depth, rows, palette=None, extra=b""):
    """A PNG by hand: IHDR, PLTE (palette: bytes of RGB triples), `extra` chunks, one IDAT
    of the rows (each with filter byte 0), IEND."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0))
    if palette is not None:
        out += chunk(b"PLTE", palette)
    out += extra
    out += chunk(b"IDAT", zlib.compress(b"".join(b"\x00" + r for r in rows)))
    return out + chunk(b"IEND", b"")


def fixtures(tmp, fx):
    # Model directories whose config.json is deeply nested, of each shape.
    for shape, text in DEEP.items():
        fx[f"gpt2_deep_{shape}"] = d = _copy_dir(fx["gpt2"], os.path.join(tmp, f"gpt2_deep_{shape}"))
        _write(os.path.join(d, "config.json"), text)
    # The nesting inside a config value, and in a string (which is not nesting at all).
    config = open(os.path.join(fx["gpt2"], "config.json"), "rb").read().strip()
    assert config.endswith(b"}")
    fx["gpt2_deep_value"] = d = _copy_dir(fx["gpt2"], os.path.join(tmp, "gpt2_deep_value"))
    _write(os.path.join(d, "config.json"), config[:-1] + b', "task_specific_params": ' + DEEP["arrays"] + b"}")
    fx["gpt2_brackets_in_string"] = d = _copy_dir(fx["gpt2"], os.path.join(tmp, "gpt2_brackets_in_string"))
    _write(os.path.join(d, "config.json"),
           config[:-1] + b', "note": "' + b"[{" * N + b'\\"' + b"[" * 10 + b'"}')
    # 100 levels: under Python's own recursion limit, so qkv.load_model reaches the C++ reader.
    fx["gpt2_deep_100"] = d = _copy_dir(fx["gpt2"], os.path.join(tmp, "gpt2_deep_100"))
    _write(os.path.join(d, "config.json"), config[:-1] + b', "n": ' + b"[" * 100 + b"]" * 100 + b"}")
    # The other loaders: the date model's config and weights header, BERT's config, the
    # vision and recommender configs, tokenizer.json, vocab.json.
    fx["dates_deep_config"] = d = _copy_dir(fx["dates"], os.path.join(tmp, "dates_deep_config"))
    _write(os.path.join(d, "config.json"), DEEP["objects"])
    fx["dates_deep_header"] = d = _copy_dir(fx["dates"], os.path.join(tmp, "dates_deep_header"))
    _safetensors_with_entry(os.path.join(fx["dates"], "model.safetensors"), os.path.join(d, "model.safetensors"),
                            "deep", DEEP["arrays"])
    fx["dates_deep_metadata"] = d = _copy_dir(fx["dates"], os.path.join(tmp, "dates_deep_metadata"))
    _safetensors_with_entry(os.path.join(fx["dates"], "model.safetensors"), os.path.join(d, "model.safetensors"),
                            "__metadata__", b'{"a":' + DEEP["mixed"] + b"}")
    fx["bert_deep_config"] = d = _copy_dir(fx["bert"], os.path.join(tmp, "bert_deep_config"))
    _write(os.path.join(d, "config.json"), DEEP["arrays"])
    fx["vit_deep_config"] = d = _copy_dir(fx["vit"], os.path.join(tmp, "vit_deep_config"))
    _write(os.path.join(d, "config.json"), DEEP["mixed"])
    fx["rec_mf_deep_config"] = d = _copy_dir(fx["rec_mf"], os.path.join(tmp, "rec_mf_deep_config"))
    _write(os.path.join(d, "config.json"), DEEP["arrays"])
    fx["tokenizer_json_deep"] = d = os.path.join(tmp, "tokenizer_json_deep")
    os.makedirs(d)
    _write(os.path.join(d, "tokenizer.json"), b'{"model":' + DEEP["objects"] + b"}")
    fx["bpe_vocab_deep"] = d = _copy_dir(fx["bpe"], os.path.join(tmp, "bpe_vocab_deep"))
    _write(os.path.join(d, "vocab.json"), DEEP["arrays"])
    # A search index whose header nests 100000 levels (a safetensors file, as indexes are).
    fx["corpus"] = os.path.join(tmp, "parsers_corpus.txt")
    _write(fx["corpus"], b"the cat sat\na dog ran\n")
    fx["index_deep"] = os.path.join(tmp, "index_deep.qkv-index")
    _write(fx["index_deep"], struct.pack("<Q", 2 * N + 8) + b'{"a":' + b"[" * N + b"]" * N + b"}  ")

    # Rows 10 and 18: PNG chunk lengths and palette indices.
    ihdr_1x1 = _png(1, 1, 0, 8, [b"\x00"])[:33]  # signature and IHDR only
    fx["png_text_2g"] = os.path.join(tmp, "text_2g.png")  # the 44 bytes of row 10
    _write(fx["png_text_2g"], ihdr_1x1 + b"\x7f\xff\xff\xfftEXtabc")
    assert os.path.getsize(fx["png_text_2g"]) == 44
    fx["png_text_4g"] = os.path.join(tmp, "text_4g.png")
    _write(fx["png_text_4g"], ihdr_1x1 + b"\xff\xff\xff\xfftEXtabc")
    fx["png_idat_256m"] = os.path.join(tmp, "idat_256m.png")
    _write(fx["png_idat_256m"], ihdr_1x1 + b"\x10\x00\x00\x00IDAT" + b"\x78\x9c" * 8)
    # 28 x 28 (the ViT's size), one palette entry, indices 0..255.
    rows = [bytes((x + 28 * y) % 256 for x in range(28)) for y in range(28)]
    fx["png_palette_1"] = os.path.join(tmp, "palette_1.png")
    _write(fx["png_palette_1"], _png(28, 28, 3, 8, rows, palette=b"\x10\x20\x30"))
    # 4 bits a pixel, 15 entries, one pixel index 15 (the last of the image).
    packed = [b"\x00" * 14] * 27 + [b"\x00" * 13 + b"\x0f"]
    fx["png_palette_4bit"] = os.path.join(tmp, "palette_4bit.png")
    _write(fx["png_palette_4bit"], _png(28, 28, 3, 4, packed, palette=bytes(range(45))))
    fx["png_palette_ok"] = os.path.join(tmp, "palette_ok.png")
    _write(fx["png_palette_ok"], _png(28, 28, 3, 4, [b"\x00" * 14] * 28, palette=bytes(range(45))))


def _load_model(path):
    """qkv.load_model(path); an exception becomes exit 1 with its type and message."""
    return py("import sys, qkv\n"
              f"try:\n    qkv.load_model({path!r})\n"
              "except Exception as e:\n    sys.exit(f'{type(e).__name__}: {e}')\n")


def cases():
    c = []
    gen = ["generate", "--prompt", "x", "--max-new-tokens", "2", "--model"]
    for shape in DEEP:
        c.append(Case(f"issue 48 row 1 generate config.json nested 1e5 {shape}", qkv(*gen, "{gpt2_deep_" + shape + "}"),
                      expect="failure", stderr=r"config '.*config\.json': JSON " + DEPTH, issue=48, row=1))
    c += [
        Case("issue 48 row 1 generate config value nested 1e5", qkv(*gen, "{gpt2_deep_value}"),
             expect="failure", stderr=DEPTH, issue=48, row=1),
        Case("issue 48 row 1 generate brackets in a config string", qkv(*gen, "{gpt2_brackets_in_string}"),
             expect="ok", issue=48, row=1),
        Case("issue 48 row 1 translate config.json nested 1e5",
             qkv("translate", "--model", "{dates_deep_config}", "21.11.2026"),
             expect="failure", stderr=r"config\.json': JSON " + DEPTH, issue=48, row=1),
        Case("issue 48 row 1 translate safetensors header entry nested 1e5",
             qkv("translate", "--model", "{dates_deep_header}", "21.11.2026"),
             expect="failure", stderr=r"model\.safetensors': header: JSON " + DEPTH, issue=48, row=1),
        Case("issue 48 row 1 translate safetensors __metadata__ nested 1e5",
             qkv("translate", "--model", "{dates_deep_metadata}", "21.11.2026"),
             expect="failure", stderr=r"model\.safetensors': header: JSON " + DEPTH, issue=48, row=1),
        Case("issue 48 row 1 run config.json nested 1e5", qkv("run", "--model", "{bert_deep_config}", "--text", "x"),
             expect="failure", stderr=r"config\.json': JSON " + DEPTH, issue=48, row=1),
        Case("issue 48 row 1 classify config.json nested 1e5",
             qkv("classify", "--model", "{vit_deep_config}", "--images", "{vit_images}"),
             expect="failure", stderr=r"config\.json': JSON " + DEPTH, issue=48, row=1),
        Case("issue 48 row 1 recommend config.json nested 1e5",
             qkv("recommend", "--model", "{rec_mf_deep_config}", "--user", "1"),
             expect="failure", stderr=r"config\.json': JSON " + DEPTH, issue=48, row=1),
        Case("issue 48 row 1 tokenize tokenizer.json nested 1e5",
             qkv("tokenize", "--model", "{tokenizer_json_deep}", "--text", "x"),
             expect="failure", stderr=r"tokenizer\.json': JSON " + DEPTH, issue=48, row=1),
        Case("issue 48 row 1 tokenize vocab.json nested 1e5",
             qkv("tokenize", "--model", "{bpe_vocab_deep}", "--text", "x"),
             expect="failure", stderr=r"vocab\.json': JSON " + DEPTH, issue=48, row=1),
        # The index is checked before the model loads (so {gpt2}, not a USE-lite model, is
        # enough): a header that cannot be read is not a qkv index.
        Case("issue 48 row 1 search index header nested 1e5",
             qkv("search", "--model", "{gpt2}", "--corpus", "{corpus}", "--query", "x", "--index", "{index_deep}"),
             expect="failure", stderr=r"--index: index '.*index_deep\.qkv-index' is not a qkv search index",
             issue=48, row=1),
        # Python: 1e5 levels are past Python's json recursion limit; 100 reach the C++ reader.
        Case("issue 48 row 1 python load_model config.json nested 1e5", _load_model("{gpt2_deep_arrays}"),
             env=PY_ENV, expect="failure", stderr=r"ValueError: load_model: malformed JSON in '.*config\.json'",
             issue=48, row=1),
        Case("issue 48 row 1 python load_model config value nested 100", _load_model("{gpt2_deep_100}"),
             env=PY_ENV, expect="failure", stderr=r"ValueError: .*config\.json': JSON " + DEPTH, issue=48, row=1),
    ]
    # Rows 10 and 18: PNG chunks longer than the file, palette indices past the palette.
    classify = ["classify", "--model", "{vit}", "--images"]
    c += [
        Case("issue 48 row 10 classify 44-byte PNG, tEXt of 2^31-1 bytes", qkv(*classify, "{png_text_2g}"),
             memory=1 << 30, seconds=3, expect="failure",
             stderr=r"text_2g\.png'.*truncated.*chunk 'tEXt' at byte 33 declares 2147483647 bytes", issue=48, row=10),
        Case("issue 48 row 10 classify PNG, tEXt of 2^32-1 bytes", qkv(*classify, "{png_text_4g}"),
             memory=1 << 30, seconds=3, expect="failure",
             stderr=r"chunk 'tEXt' at byte 33 declares 4294967295 bytes, over PNG's limit", issue=48, row=10),
        Case("issue 48 row 10 classify PNG, IDAT of 256 MiB in 16 bytes", qkv(*classify, "{png_idat_256m}"),
             memory=1 << 30, seconds=3, expect="failure",
             stderr=r"chunk 'IDAT' at byte 33 declares 268435456 bytes", issue=48, row=10),
        Case("issue 48 row 18 classify palette of 1 entry, indices to 255", qkv(*classify, "{png_palette_1}"),
             expect="failure", stderr=r"pixel \(row 0, column 1\) is palette index 1, past the 1 entries of its PLTE",
             issue=48, row=18),
        Case("issue 48 row 18 classify 4-bit palette of 15 entries, index 15", qkv(*classify, "{png_palette_4bit}"),
             expect="failure", stderr=r"pixel \(row 27, column 27\) is palette index 15, past the 15 entries",
             issue=48, row=18),
        Case("issue 48 row 18 classify 4-bit palette, indices within", qkv(*classify, "{png_palette_ok}"),
             expect="ok", issue=48, row=18),
    ]
    return c
