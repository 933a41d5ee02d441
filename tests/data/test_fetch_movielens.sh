#!/usr/bin/env bash
# data.movielens: scripts/fetch_data.sh movielens DIR writes dslabs' MovieLens ratings as
# DIR/ratings.csv exactly: the SHA-256 pins the package version, the row order and the CSV
# quoting; the checks after it say what a changed hash broke (the header, a doubled quote,
# the 2 untitled movies' empty fields, UTF-8, the 671 users the recommender splits by).
#   test_fetch_movielens.sh FETCH_DATA_SH
set -euo pipefail
fetch=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out=$("$fetch" movielens "$tmp/data") || fail "fetch_data.sh movielens exited $?"
grep -q "100004 ratings" <<<"$out" || fail "rating count: $out"
check ratings.csv 19f5e87134bdc86679f2cf98da460fd884f41f59713e0d25b5dc153a0ab6c39c
csv=$tmp/data/ratings.csv
header='"movieId","title","year","genres","userId","rating","timestamp"'
[[ $(head -n 1 "$csv") == "$header" ]] || fail "header is not $header: $(head -n 1 "$csv")"
# A quote in a title is doubled inside a quoted field (RFC 4180).
grep -qF ',"""Great Performances"" Cats",' "$csv" || fail "no title with doubled quotes"
# 108583 and 162376 have neither title nor year: both are empty fields, not NA.
for movie in 108583 162376; do
  grep -q "^$movie,,," "$csv" || fail "movie $movie is not written with empty title and year"
  ! grep -qE "^$movie,[^,]|^$movie,,[^,]" "$csv" || fail "movie $movie has a title or year"
done
iconv -f utf-8 -t utf-8 "$csv" >/dev/null 2>&1 || fail "ratings.csv is not valid UTF-8"
users=$(/usr/bin/python3 - "$csv" <<'PY'
import csv, sys
with open(sys.argv[1], newline="", encoding="utf-8") as f:
    rows = list(csv.reader(f))
print(len({row[4] for row in rows[1:]}))
PY
) || fail "ratings.csv does not parse as CSV"
[[ $users -eq 671 ]] || fail "$users distinct userIds, expected 671"
echo "data.movielens: ratings.csv as pinned"
