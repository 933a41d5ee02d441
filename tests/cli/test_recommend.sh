#!/usr/bin/env bash
# End-to-end tests of `qkv train mf`, `qkv train sasrec` and `qkv recommend`.
#   tests/cli/test_recommend.sh PATH/TO/qkv
# On a small synthetic ratings CSV written here (40 users, 30 movies, ~640 ratings; titles
# with commas and doubled quotes, one title on two movies of different years, one title and
# year on two movies, one movie without title or year, a user who rated every movie, tied
# timestamps): matrix factorisation and SASRec train in a few epochs and write their
# directories; recommend --user/--like/--predict/--json/--show/--html read them; bad input
# of every kind fails with a message naming the problem (and the line), never a crash.
# Every check asserts; the script prints each failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_recommend.sh PATH/TO/qkv}
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"

# After `run`: the process ended by itself (no signal, no abort, no uncaught exception).
no_crash() {  # no_crash DESCRIPTION
  if [[ $status -lt 128 ]] && ! grep -Eq "terminate called|Segmentation|Aborted|core dumped" "$TMP/err"; then
    pass
  else
    fail "$1: crashed (status $status): $(head -c 400 "$TMP/err")"
  fi
}
fails() { expect_failure "$@"; no_crash "qkv ${*:2}"; }              # fails NEEDLE ARGS...
usage_fails() { expect_usage_error "$@"; no_crash "qkv ${*:2}"; }    # usage_fails NEEDLE ARGS...

# The ratings: columns in the order of fetch_data.sh movielens, RFC 4180 quoting.
DATA="$TMP/ratings.csv"
"$PYTHON" - "$DATA" <<'PY'
import random, sys
rng = random.Random(7)
movies = [[m, f"Film {m:02d}", str(1980 + m), "Drama" if m % 2 else "Comedy|Drama"] for m in range(1, 31)]
movies[0][1] = "Hello, World"                       # a comma
movies[1][1] = 'The "Big" Night, Part 2'            # doubled quotes and a comma
movies[2][1:3] = ["Twin", "1990"]                   # one title, two years
movies[3][1:3] = ["Twin", "2001"]
movies[4][1:3] = ["Remake", "1999"]                 # one title and year, two movies
movies[5][1:3] = ["Remake", "1999"]
movies[6][1:4] = ["", "", "(no genres listed)"]     # no title, no year
def q(s):
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"') else s
lines = ["movieId,title,year,genres,userId,rating,timestamp"]
for u in range(1, 41):
    picked = list(range(30)) if u == 40 else rng.sample(range(30), 12 + u % 8)
    rng.shuffle(picked)
    for j, m in enumerate(picked):
        t = 1000000000 + u * 100000 + (j // 3 if u == 5 else j) * 37   # user 5: ties in threes
        r = rng.choice([0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5])
        mv = movies[m]
        lines.append(",".join([str(mv[0]), q(mv[1]), mv[2], q(mv[3]), str(u), f"{r:g}", str(t)]))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
RATINGS=$(($(wc -l <"$DATA") - 1))

# Checks a model directory and the split line of the training output in $TMP/out.
check_model_dir() {  # check_model_dir DIR KIND
  local d=$1 f
  for f in config.json model.safetensors movies.csv history.csv; do
    if [[ -s "$d/$f" ]]; then pass; else fail "train $2 did not write $f"; fi
  done
  expect_in out "^$RATINGS ratings by 40 users of 30 movies$" "$2: the data line"
  expect_in out "^split per user by time .* — [0-9]+ fit, [0-9]+ validation, [0-9]+ test ratings of 40 users$" \
    "$2: the split line"
  # The split adds up; history.csv holds every rating (what recommend excludes); movies.csv
  # round-trips the titles (commas, quotes, the untitled movie); config.json is the model's.
  "$PYTHON" - "$TMP/out" "$d" "$DATA" "$2" >"$TMP/check" 2>&1 <<'PY'
import csv, json, re, sys
out, d, data, kind = sys.argv[1:]
fit, val, test = map(int, re.search(r"— (\d+) fit, (\d+) validation, (\d+) test ratings", open(out).read()).groups())
rows = list(csv.DictReader(open(data, newline="")))
assert fit + val + test == len(rows), (fit, val, test, len(rows))
hist = list(csv.DictReader(open(d + "/history.csv", newline="")))
assert len(hist) == len(rows), (len(hist), len(rows))
pairs = {(r["userId"], r["movieId"]) for r in rows}
assert all((h["userId"], h["movieId"]) in pairs for h in hist), "history.csv has a pair not in the data"
assert test == sum(max(1, n // 5) for n in [sum(r["userId"] == str(u) for r in rows) for u in range(1, 41)])
movies = list(csv.DictReader(open(d + "/movies.csv", newline="")))
assert [int(m["movieId"]) for m in movies] == list(range(1, 31)), movies
want = {r["movieId"]: (r["title"], r["year"], r["genres"]) for r in rows}
assert all(want[m["movieId"]] == (m["title"], m["year"], m["genres"]) for m in movies), movies[:8]
assert movies[1]["title"] == 'The "Big" Night, Part 2' and movies[6]["title"] == "" and movies[6]["year"] == ""
c = json.load(open(d + "/config.json"))
assert c["model_type"] == "qkv-recommender" and c["model"] == kind, c
assert c["num_users"] == 40 and c["num_movies"] == 30 and "user_ids" not in c, c
users = list(csv.DictReader(open(d + "/users.csv", newline="")))
assert [int(u["userId"]) for u in users] == list(range(1, 41)), users
assert set(c["files"]) == {"model.safetensors", "users.csv", "movies.csv", "history.csv"}, c["files"]
print("ok")
PY
  expect_in check "^ok$" "$2: split, history.csv, movies.csv, users.csv, config.json: $(head -c 600 "$TMP/check")"
}

# ---------------------------------------------------------------------------------------
# Training.

MF="$TMP/mf"
SR="$TMP/sasrec"
run train mf --data "$DATA" --epochs 3 --out "$MF" --quiet
expect_status 0 "train mf"
no_crash "train mf"
expect_in out "^training matrix factorisation on $DATA: dim [0-9]+" "mf: the first line"
expect_in out "^test RMSE: global mean [0-9.]+, user \+ movie biases [0-9.]+ \(λ [0-9.]+ by validation\), matrix factorisation [0-9.]+" \
  "mf: the RMSE line"
expect_in out "^  mf +[0-9.]+ " "mf: the ranking line"
expect_in out "^wrote $MF/\{config.json, model.safetensors, users.csv, movies.csv, history.csv\}$" "mf: says what it wrote"
check_model_dir "$MF" mf

# --data DIR reads DIR/ratings.csv; --json is one object.
mkdir -p "$TMP/datadir" && cp "$DATA" "$TMP/datadir/ratings.csv"
run train mf --data "$TMP/datadir" --epochs 3 --out "$TMP/mf-json" --json --quiet
expect_status 0 "train mf --json (data directory)"
"$PYTHON" - "$TMP/out" "$RATINGS" <<'PY' && pass || fail "train mf --json: $(head -c 600 "$TMP/out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
j = json.loads(lines[0])
assert j["model"] == "mf" and j["users"] == 40 and j["movies"] == 30 and j["ratings"] == int(sys.argv[2]), j
for k in ("rmse_mf", "rmse_biases", "rmse_global_mean"):
    assert isinstance(j[k], float) and 0 < j[k] < 4.5, (k, j[k])
assert 0 <= j["trained"]["hr10"] <= 1 and j["trained"]["users"] == 40, j["trained"]
# The biases' λ is one of the grid's (recommender.h, kBiasL2Grid).
assert j["biases_l2"] in (0, 0.3, 1, 2, 3, 5, 10, 20, 50, 100), j["biases_l2"]
assert 1 <= j["best_epoch"] <= 3 and j["split"].startswith("split per user by time"), j
PY

run train sasrec --data "$DATA" --epochs 2 --dim 8 --max-len 20 --eval-every 1 --out "$SR" --quiet
expect_status 0 "train sasrec"
no_crash "train sasrec"
expect_in out "^training SASRec on $DATA: 2 blocks, dim 8, 1 heads, max_len 20" "sasrec: the first line"
expect_in out "^best validation HR@10 at epoch [12];" "sasrec: the validation line"
expect_in out "^  sasrec +[0-9.]+ " "sasrec: the ranking line"
expect_in out "try: qkv recommend --model $SR --user 1 --show" "sasrec: suggests --show"
check_model_dir "$SR" sasrec
if "$PYTHON" -c 'import json, sys; c = json.load(open(sys.argv[1])); sys.exit(not (c["dim"] == 8 and c["max_len"] == 20))' \
    "$SR/config.json"; then pass; else fail "sasrec config.json: $(head -c 300 "$SR/config.json")"; fi

run train sasrec --data "$DATA" --epochs 2 --dim 8 --max-len 20 --eval-every 1 \
  --out "$TMP/sasrec-json" --json --quiet
expect_status 0 "train sasrec --json"
"$PYTHON" - "$TMP/out" <<'PY' && pass || fail "train sasrec --json: $(head -c 600 "$TMP/out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
j = json.loads(lines[0])
assert j["model"] == "sasrec" and "rmse_mf" not in j, j
for part in ("trained", "popularity"):
    for k in ("hr10", "ndcg10", "hr10_catalogue", "hr10_all"):
        assert 0 <= j[part][k] <= 1, (part, k, j[part][k])
assert j["train_steps"] == 2 and j["num_parameters"] > 0, j
PY

# ---------------------------------------------------------------------------------------
# Recommending.

# --user: the top 5 movies, none of them in the user's history.csv (every rating of the
# data). User 40 rated every movie: nothing is left to recommend.
for model in "$MF" "$SR"; do
  kind=$(basename "$model")
  for user in 3 7; do
    run recommend --model "$model" --user $user --top 5
    expect_status 0 "$kind recommend --user $user"
    expect_in out "^top 5 for user $user \(" "$kind --user $user: the heading"
    if [[ $(grep -Ec "^ +[0-9]+\. " "$TMP/out") == 5 ]]; then pass; else
      fail "$kind --user $user --top 5: not 5 lines: $(cat "$TMP/out")"
    fi
    cp "$TMP/out" "$TMP/text"
    run recommend --model "$model" --user $user --top 5 --json
    expect_status 0 "$kind recommend --user $user --json"
    "$PYTHON" - "$TMP/out" "$model/history.csv" "$user" "$TMP/text" <<'PY' && pass || fail "$kind --user $user --json: $(head -c 600 "$TMP/out")"
import csv, json, sys
out, history, user, text = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
lines = open(out).read().splitlines()
assert len(lines) == 1, lines
j = json.loads(lines[0])
seen = {int(h["movieId"]) for h in csv.DictReader(open(history, newline="")) if int(h["userId"]) == user}
ids = [m["movieId"] for m in j["recommendations"]]
assert j["user"] == user and j["history"] == len(seen) and len(ids) == 5 == len(set(ids)), j
assert not seen & set(ids), ("recommended a movie the user rated", seen & set(ids))
scores = [m["score"] for m in j["recommendations"]]
assert scores == sorted(scores, reverse=True), scores
# The text and --json agree (the text lines end with the label and the genres).
for m, line in zip(j["recommendations"], [l for l in open(text).read().splitlines() if l.lstrip()[:1].isdigit()]):
    label = (m["title"] + (f' ({m["year"]})' if m["year"] else "")) if m["title"] else f'movie {m["movieId"]}'
    assert f"  {label}  [" in line, (label, line)
PY
  done
  run recommend --model "$model" --user 40 --top 10
  expect_status 0 "$kind recommend --user 40 --top 10"
  expect_in out "^user 40 has rated every one of the 30 movies: nothing is left to recommend" "$kind: a user who rated every movie"
done

# --like: by title, by title and year (any case); titles with commas and quotes.
run recommend --model "$MF" --like "Hello, World" --top 3
expect_status 0 "--like 'Hello, World'"
expect_in out "^movies like Hello, World \(1981\) \(mf embeddings" "--like names the liked movie"
if [[ $(grep -Ec "^ +[0-9]+\. cos +-?[0-9.]+  weight [0-9.]+  " "$TMP/out") == 3 ]]; then pass; else
  fail "--like --top 3: $(cat "$TMP/out")"
fi
run recommend --model "$MF" --like "twin (2001)" --json
expect_status 0 "--like 'twin (2001)' --json"
"$PYTHON" - "$TMP/out" <<'PY' && pass || fail "--like --json: $(head -c 600 "$TMP/out")"
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["like"] == {"movieId": 4, "title": "Twin", "year": 2001, "genres": "Comedy|Drama"}, j["like"]
s = j["similar"]
assert len(s) == 10 and 4 not in [m["movieId"] for m in s], s
assert all(-1.0001 <= m["cosine"] <= 1.0001 and 0 <= m["weight"] <= 1 for m in s), s
assert [m["weight"] for m in s] == sorted([m["weight"] for m in s], reverse=True), s
PY
run recommend --model "$SR" --like 'The "Big" Night, Part 2' --top 2 --json
expect_status 0 "--like with quotes in the title (sasrec)"
expect_in out '"like":\{"movieId":2,"title":"The \\"Big\\" Night, Part 2","year":1982' "--like with quotes in the title"
run recommend --model "$MF" --like "Twin (1990)" --top 2
expect_status 0 "--like 'Twin (1990)'"
expect_in out "^movies like Twin \(1990\) " "--like picks the year asked for"

# Ambiguous titles list the candidates; unknown ones list close matches.
fails "the title 'Twin' is ambiguous" recommend --model "$MF" --like "Twin"
expect_in err "'Twin \(1990\)' \(movieId 3\)" "ambiguous --like lists the 1990 movie"
expect_in err "'Twin \(2001\)' \(movieId 4\)" "ambiguous --like lists the 2001 movie"
fails "ambiguous" recommend --model "$MF" --like "Remake (1999)"
expect_in err "\(movieId 5\).*\(movieId 6\).*give the movieId instead" "same title and year: both candidates"
run recommend --model "$MF" --like 6 --top 2
expect_status 0 "--like a movieId where title and year are shared"
expect_in out "^movies like Remake \(1999\) " "--like 6 picks movie 6"
fails "--like: the title is empty" recommend --model "$MF" --like ""
fails "no movie is titled 'Hello World'; close matches: 'Hello, World (1981)'" recommend --model "$MF" --like "Hello World"
fails "no movie is titled 'Flim 09'" recommend --model "$SR" --like "Flim 09"
expect_in err "close matches:.*'Film 09 \(1989\)'" "unknown --like: the near title"

# --predict: userId,movieId lines, with or without a header; the ratings in input order.
printf 'userId,movieId\n3,8\n1,2\n40,30\n3,8\n7,1\n' >"$TMP/pairs-header.csv"
printf '3,8\n1,2\n40,30\n3,8\n7,1\n' >"$TMP/pairs.csv"
for f in pairs-header pairs; do
  run recommend --model "$MF" --predict "$TMP/$f.csv"
  expect_status 0 "--predict $f.csv"
  "$PYTHON" - "$TMP/out" <<'PY' && pass || fail "--predict $f.csv: $(head -c 600 "$TMP/out")"
import sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == "userId,movieId,rating", lines
rows = [l.split(",") for l in lines[1:]]
assert [(u, m) for u, m, _ in rows] == [("3", "8"), ("1", "2"), ("40", "30"), ("3", "8"), ("7", "1")], rows
r = [float(x) for _, _, x in rows]
assert all(0.5 <= x <= 5 for x in r) and r[0] == r[3], r
PY
  cp "$TMP/out" "$TMP/$f.out"
done
if cmp -s "$TMP/pairs-header.out" "$TMP/pairs.out"; then pass; else fail "--predict: the header changes the ratings"; fi
run recommend --model "$MF" --predict - <"$TMP/pairs.csv"
if [[ $status -eq 0 ]] && cmp -s "$TMP/out" "$TMP/pairs.out"; then pass; else fail "--predict - (standard input): $(cat "$TMP/err")"; fi
run recommend --model "$MF" --predict "$TMP/pairs.csv" --json
expect_status 0 "--predict --json"
"$PYTHON" - "$TMP/out" "$TMP/pairs.out" <<'PY' && pass || fail "--predict --json: $(head -c 600 "$TMP/out")"
import json, sys
p = json.loads(open(sys.argv[1]).read())["predictions"]
text = [l.split(",") for l in open(sys.argv[2]).read().splitlines()[1:]]
assert [(d["userId"], d["movieId"]) for d in p] == [(int(u), int(m)) for u, m, _ in text], p
assert all(abs(d["rating"] - float(r)) < 1e-4 for d, (_, _, r) in zip(p, text)), p
PY
fails "--predict: a sasrec model ranks movies and does not predict ratings" recommend --model "$SR" --predict "$TMP/pairs.csv"
expect_in err "qkv train mf" "--predict with sasrec says what to train"

# --show and --html: the attention of a SASRec model over a user's history (the last
# max_len of it: user 40's history of 30 is cut to 20).
run recommend --model "$SR" --user 3 --show --top 3
expect_status 0 "sasrec --show"
expect_in out "^top 3 for user 3 \(sasrec" "--show: the recommendations first"
expect_in out "attends over the last [0-9]+ movies of the history" "--show: the heading"
expect_in out "^layer 0, head 0: the 3 movies with the most weight" "--show: layer 0"
expect_in out "^layer 1, head 0: " "--show: layer 1"
expect_in out "[█·]{20}  #[0-9]+ " "--show draws bars"
run recommend --model "$SR" --user 40 --show
expect_status 0 "sasrec --show, a history longer than max_len"
expect_in out "attends over the last 20 movies" "--show keeps the last max_len movies"
run recommend --model "$SR" --user 40 --html "$TMP/view.html"
expect_status 0 "sasrec --html"
expect_in out "^wrote $TMP/view.html$" "--html says where"
if grep -q "qkv-attention-data" "$TMP/view.html" && grep -q "SASRec self-attention over user 40" "$TMP/view.html"; then
  pass
else
  fail "--html page content: $(head -c 300 "$TMP/view.html")"
fi
if ! grep -Eq "(src|href)=\"https?:" "$TMP/view.html"; then pass; else fail "--html fetches from the network"; fi
run recommend --model "$SR" --user 40 --html "$TMP/view2.html" --json --top 3
expect_status 0 "sasrec --html --json"
expect_in err "wrote $TMP/view2.html" "--html --json says where on stderr"
if grep -q "qkv-attention-data" "$TMP/view2.html"; then pass; else fail "--html --json did not write the page"; fi
"$PYTHON" - "$TMP/out" <<'PY' && pass || fail "--html --json attention: $(head -c 600 "$TMP/out")"
import json, sys
j = json.loads(open(sys.argv[1]).read())
a = j["attention"]
assert len(a) == 2 and all(len(b) == 1 and len(b[0]) == 20 for b in a), a
assert all(abs(sum(b[0]) - 1) < 1e-4 for b in a), [sum(b[0]) for b in a]
assert len(j["attended"]) == 20 and j["history"] == 30 and len(j["recommendations"]) == 0, j
PY
usage_fails "--show: needs a sasrec model" recommend --model "$MF" --user 3 --show
usage_fails "--html: needs a sasrec model" recommend --model "$MF" --user 3 --html "$TMP/mf.html"
if [[ ! -e "$TMP/mf.html" ]]; then pass; else fail "--html with an mf model wrote a page"; fi
usage_fails "--show: shows the attention behind a user's recommendation: it needs --user" \
  recommend --model "$SR" --like "Twin (1990)" --show
usage_fails "--user ID, --like TITLE or --predict FILE" recommend --model "$SR" --show

# ---------------------------------------------------------------------------------------
# Bad input: a message naming the problem, a non-zero status, no crash.

fails "unknown user 999" recommend --model "$MF" --user 999
expect_in err "40 users, ids 1 to 40" "unknown user: the known ids"
printf 'userId,movieId\n3,8\n1,999\n' >"$TMP/p-movie.csv"
fails "$TMP/p-movie.csv line 3: unknown movie 999" recommend --model "$MF" --predict "$TMP/p-movie.csv"
printf '3,8\n1,x\n' >"$TMP/p-int.csv"
fails "$TMP/p-int.csv line 2: movieId 'x' is not an integer" recommend --model "$MF" --predict "$TMP/p-int.csv"
printf '3,8\n1,2\n1,2,3\n' >"$TMP/p-fields.csv"
fails "$TMP/p-fields.csv line 3: expected userId,movieId, got 3 fields" recommend --model "$MF" --predict "$TMP/p-fields.csv"
printf 'userId,movieId\n' >"$TMP/p-none.csv"
fails "holds no userId,movieId line" recommend --model "$MF" --predict "$TMP/p-none.csv"
fails "cannot open" recommend --model "$MF" --predict "$TMP/p-missing.csv"
usage_fails "give exactly one of --user ID, --like TITLE or --predict FILE" recommend --model "$MF" --user 3 --like "Twin (1990)"
usage_fails "give exactly one of --user ID, --like TITLE or --predict FILE" recommend --model "$MF" --like "Twin (1990)" --predict "$TMP/pairs.csv"
usage_fails "give exactly one of --user ID, --like TITLE or --predict FILE" recommend --model "$MF" --user 3 --predict "$TMP/pairs.csv"
usage_fails "give exactly one of --user ID, --like TITLE or --predict FILE" recommend --model "$MF"
fails "$TMP/nomodel/config.json" recommend --model "$TMP/nomodel" --user 3
expect_in err "cannot open" "a model directory that does not exist"
cp -r "$MF" "$TMP/truncated"
truncate -s $(($(stat -c %s "$MF/model.safetensors") / 2)) "$TMP/truncated/model.safetensors"
fails "$TMP/truncated/model.safetensors" recommend --model "$TMP/truncated" --user 3
cp -r "$SR" "$TMP/truncated-sasrec"
truncate -s 5 "$TMP/truncated-sasrec/model.safetensors"
fails "$TMP/truncated-sasrec/model.safetensors" recommend --model "$TMP/truncated-sasrec" --user 3 --show

# Bad ratings: each file is the header, five good lines, then (line 7) the bad one.
NEVER="$TMP/never"
bad_csv() {  # bad_csv NAME LINE [REST]: REST = also the good lines after it
  {
    sed -n 1,6p "$DATA"
    printf '%s\n' "$2"
    if [[ ${3:-} == rest ]]; then sed -n 7,40p "$DATA"; fi
  } >"$TMP/$1.csv"
}
train_fails() {  # train_fails NEEDLE NAME: training on $TMP/NAME.csv fails naming NEEDLE
  fails "$1" train mf --data "$TMP/$2.csv" --epochs 1 --out "$NEVER" --quiet
}
bad_csv unclosed '8,"Film 08,1988,Drama,2,4,1000200000'
train_fails "$TMP/unclosed.csv line 7: a quoted field is never closed" unclosed
bad_csv fields '8,Film 08,1988,Drama,2,4' rest
train_fails "$TMP/fields.csv line 7: 6 fields, the header has 7" fields
bad_csv seven '8,Film 08,1988,Comedy|Drama,2,7,1000299999' rest
train_fails "$TMP/seven.csv line 7: rating 7 is outside [0.5, 5]" seven
bad_csv timestamp '8,Film 08,1988,Comedy|Drama,2,4,yesterday' rest
train_fails "$TMP/timestamp.csv line 7: timestamp 'yesterday' is not an integer" timestamp
bad_csv duplicate "$(sed -n 2p "$DATA")" rest
dup=$(sed -n 2p "$DATA" | awk -F, '{print "user " $(NF-2) " rated movie " $1 " already on line 2"}')
train_fails "$TMP/duplicate.csv line 7: $dup" duplicate
movie=$(sed -n 2p "$DATA" | cut -d, -f1)
bad_csv retitled "$movie,Another Title,1990,Drama,39,4,1003999999" rest
train_fails "$TMP/retitled.csv line 7: movie $movie is 'Another Title (1990)' here but '" retitled
expect_in err "' on line 2$" "a movie retitled between lines names the first line"
: >"$TMP/empty.csv"
train_fails "is empty" empty
sed -n 1p "$DATA" >"$TMP/header.csv"
train_fails "$TMP/header.csv: no ratings after the header" header
"$PYTHON" - "$DATA" "$TMP/notime.csv" <<'PY'
import csv, sys
w = csv.writer(open(sys.argv[2], "w", newline=""), lineterminator="\n")
for row in csv.reader(open(sys.argv[1], newline="")):
    w.writerow(row[:6])
PY
train_fails "$TMP/notime.csv line 1: the header has no 'timestamp' column" notime
# Two ratings per user: a fit and a test part, but no validation part to choose anything by.
printf 'userId,movieId,rating,timestamp\n1,1,4,1\n1,2,3,2\n2,1,5,1\n2,3,2,2\n' >"$TMP/two.csv"
for model in mf sasrec; do
  fails "train $model: $TMP/two.csv: the ratings are too few for a validation part" \
    train "$model" --data "$TMP/two.csv" --epochs 1 --out "$NEVER" --quiet
done
mkdir -p "$TMP/nodata"
fails "$TMP/nodata/ratings.csv does not exist; write it with: scripts/fetch_data.sh movielens $TMP/nodata" \
  train mf --data "$TMP/nodata" --out "$NEVER"
fails "$TMP/missing.csv does not exist" train mf --data "$TMP/missing.csv" --out "$NEVER"
usage_fails "--data is required" train mf --out "$NEVER"
usage_fails "--data is required" train sasrec --out "$NEVER"
usage_fails "--heads: 3 must divide --dim 8" train sasrec --data "$DATA" --dim 8 --heads 3 --out "$NEVER"
# One subcommand per model: --model is gone, and the other model's options are unknown.
usage_fails "unknown option --model; the options are --data, --solver, --epochs, --dim, --batch, --lr, --l2, --als-l2," \
  train mf --data "$DATA" --model sasrec --out "$NEVER"
usage_fails "unknown option --model; the options are --data, --epochs, --dim, --layers, --heads, --max-len," \
  train sasrec --data "$DATA" --model mf --out "$NEVER"
usage_fails "unknown option --steps; the options are --data" train mf --data "$DATA" --steps 3 --out "$NEVER"
usage_fails "unknown option --max-len; the options are --data" train mf --data "$DATA" --max-len 10 --out "$NEVER"
usage_fails "unknown option --heads; the options are --data" train mf --data "$DATA" --heads 2 --out "$NEVER"
usage_fails "unknown option --l2" train sasrec --data "$DATA" --l2 0.1 --out "$NEVER"
usage_fails "unknown option --patch-size; the options are --data" train sasrec --data "$DATA" --patch-size 4 --out "$NEVER"
usage_fails "unknown option --max-lem (did you mean --max-len?)" train sasrec --data "$DATA" --max-lem 10 --out "$NEVER"
# The old spelling names the new one.
usage_fails "'qkv train recommender' is now 'qkv train mf'" train recommender --data "$DATA" --out "$NEVER"
usage_fails "'qkv train recommender' is now 'qkv train sasrec'" train recommender --data "$DATA" --model sasrec --out "$NEVER"
# Ranges: the value as given.
usage_fails "--batch: must be an integer in [1, 65536], got '0'" train mf --data "$DATA" --batch 0 --out "$NEVER"
usage_fails "--dim: must be an integer in [0, 4096], got '-1'" train mf --data "$DATA" --dim -1 --out "$NEVER"
usage_fails "--dim: must be an integer in [1, 4096], got '0'" train sasrec --data "$DATA" --dim 0 --out "$NEVER"
usage_fails "--epochs: must be an integer in [1, 100000], got '0'" train sasrec --data "$DATA" --epochs 0 --out "$NEVER"
usage_fails "--l2: must be a finite number in [0, 100], got" train mf --data "$DATA" --l2 nan --out "$NEVER"
if [[ ! -e "$NEVER" ]]; then pass; else fail "a failed training wrote $NEVER"; fi

# qkv run through the model registry: SASRec's attention over a user's history (the keys:
# its movies), as recommend --show computes it; matrix factorisation has none.
run run --model "$SR" --user 1 --json
expect_status 0 "run sasrec --user --json"
if "$PYTHON" - "$TMP/out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["model_type"] == "qkv-recommender", j["model_type"]
g, = j["groups"]
T = len(j["tokens"])
assert 1 <= T <= 20 and g["query_tokens"] == g["key_tokens"] == j["tokens"]
assert len(g["attention"]) == 2                              # 2 blocks
for layer in g["attention"]:
    for head in layer:
        for i, row in enumerate(head):
            assert abs(sum(row) - 1) < 1e-5 and all(x == 0 for x in row[i + 1:]), (i, row)
PY
then pass; else fail "run sasrec --json: $(head -c 300 "$TMP/out")"; fi
run run --model "$SR" --user 1 --html "$TMP/run-sasrec.html"
expect_status 0 "run sasrec --html"
expect_in out "SASRec self-attention over user 1's history, layer 1, head 0 \(layers 0-1, head 0 only; rows: queries" "run sasrec: the heatmap"
fails "has no attention to show" run --model "$MF" --user 1
fails "unknown user 999999" run --model "$SR" --user 999999
usage_fails "--user" run --model "$SR"
usage_fails "--text: is for text models" run --model "$SR" --text hi

finish recommend
