# Shared by the CLI test scripts (source it after setting QKV and TMP):
# assertions that count checks and failures, and the closing summary.
# QKV_COMMAND (an array) is what `run` executes; it defaults to ("$QKV").

if [[ -z ${QKV_COMMAND+set} ]]; then QKV_COMMAND=("$QKV"); fi

failures=0
checks=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
pass() { checks=$((checks + 1)); }

# run ARGS...: runs the command, leaving stdout in $TMP/out, stderr in $TMP/err, status
# in $status.
run() {
  "${QKV_COMMAND[@]}" "$@" >"$TMP/out" 2>"$TMP/err"
  status=$?
}

expect_status() {  # expect_status WANT DESCRIPTION
  if [[ $status -eq $1 ]]; then pass; else
    fail "$2: exit status $status, expected $1; stderr: $(head -c 400 "$TMP/err")"
  fi
}

expect_in() {  # expect_in FILE PATTERN DESCRIPTION  (grep -E)
  if grep -Eq -- "$2" "$TMP/$1"; then pass; else
    fail "$3: '$2' not found in std$1: $(head -c 400 "$TMP/$1")"
  fi
}

expect_not_in() {  # expect_not_in FILE PATTERN DESCRIPTION
  if ! grep -Eq -- "$2" "$TMP/$1"; then pass; else
    fail "$3: '$2' unexpectedly found in std$1"
  fi
}

expect_equal() {  # expect_equal FILE EXPECTED DESCRIPTION  (the whole stream)
  local got
  got=$(cat "$TMP/$1")
  if [[ "$got" == "$2" ]]; then pass; else fail "$3: got '$got', expected '$2'"; fi
}

# A failure while running: status 1, "qkv: error: ..." naming NEEDLE on stderr.
expect_failure() {  # expect_failure NEEDLE ARGS...
  local needle=$1
  shift
  run "$@"
  local what="qkv $*"
  if [[ $status -eq 1 ]]; then pass; else fail "$what: exit status $status, expected 1"; fi
  if grep -q "^qkv: error: " "$TMP/err" && grep -Fq -- "$needle" "$TMP/err"; then pass; else
    fail "$what: stderr lacks 'qkv: error: ...$needle': $(head -c 400 "$TMP/err")"
  fi
}

# A usage error: status 2 (not a signal), exactly one line on stderr that names NEEDLE,
# nothing on stdout.
expect_usage_error() {  # expect_usage_error NEEDLE ARGS...
  local needle=$1
  shift
  run "$@"
  local what="qkv $*"
  if [[ $status -eq 2 ]]; then pass; else fail "$what: exit status $status, expected 2"; fi
  if grep -Fq -- "$needle" "$TMP/err"; then pass; else
    fail "$what: stderr does not name '$needle': $(cat "$TMP/err")"
  fi
  local lines
  lines=$(wc -l <"$TMP/err")
  if [[ $lines -eq 1 ]]; then pass; else fail "$what: $lines lines on stderr, expected 1: $(cat "$TMP/err")"; fi
  if [[ ! -s "$TMP/out" ]]; then pass; else fail "$what: unexpected stdout: $(head -c 200 "$TMP/out")"; fi
}

# finish LABEL: the summary line; exits 1 if any check failed, or if none ran (a script
# that checks nothing must not pass).
# json_check DESCRIPTION PYTHON-STATEMENTS: runs the assertions in /usr/bin/python3, with `j`
# the JSON of the last run's stdout and `text` the file $TMP/text (a previous terminal
# output the script saved; "" when there is none), and counts one check.
json_check() {
  if /usr/bin/python3 - "$TMP/out" "$TMP/text" 2>"$TMP/pyerr" <<PY
import json, os, sys
j = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read() if os.path.exists(sys.argv[2]) else ""
$2
PY
  then pass; else fail "$1: $(tail -c 600 "$TMP/pyerr")"; fi
}

finish() {
  if [[ $checks -eq 0 && $failures -eq 0 ]]; then
    echo "no checks ran ($1)" >&2
    exit 1
  fi
  if [[ $failures -ne 0 ]]; then
    echo "$failures of $((checks + failures)) checks failed ($1)" >&2
    exit 1
  fi
  echo "all $checks checks passed ($1)"
}
