#!/usr/bin/env bash
# End-to-end tests of the qkv command-line tool.
#   tests/cli/test_cli.sh PATH/TO/qkv GROUP     GROUP: help | version | explain | bench | errors | all
# Every check asserts; the script prints each failure and exits 1 if there was any.
set -u

QKV=${1:?usage: test_cli.sh PATH/TO/qkv GROUP}
GROUP=${2:-all}
PYTHON=/usr/bin/python3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Checks the explain output in $TMP/out: every row of every weight matrix has its
# "sum" column equal to 1 to the printed precision, and there are WANT such rows.
check_row_sums() {  # check_row_sums WANT_ROWS ONE DESCRIPTION
  if "$PYTHON" - "$TMP/out" "$1" "$2" <<'EOF'; then pass; else fail "$3: row sums"; fi
import re, sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
want_rows, one = int(sys.argv[2]), sys.argv[3]
rows = 0
for n, line in enumerate(lines):
    for m in re.finditer(r"\bsum\b", line):
        end = m.end()
        for below in lines[n + 1:]:
            cell = below[end - len(one):end]
            if not re.fullmatch(r"[ \d.-]*\d", cell.strip() or "x"):
                break
            if cell.strip() != one:
                print(f"row sum {cell.strip()!r} != {one} in: {below}")
                sys.exit(1)
            rows += 1
if rows != want_rows:
    print(f"found {rows} weight rows with sums, expected {want_rows}")
    sys.exit(1)
EOF
}

# Runs bench --json with ARGS and checks the object with the Python expression CHECK
# (over `d`, the parsed object).
check_bench_json() {  # check_bench_json DESCRIPTION CHECK ARGS...
  local what=$1 check=$2
  shift 2
  run bench --json --repeats 3 "$@"
  expect_status 0 "$what"
  if "$PYTHON" -c "
import json, math, sys
d = json.load(open(sys.argv[1]))
required = ['ms', 'ms_min', 'gflops', 'impl', 'dtype', 'threads', 'batch', 'heads', 'kv_heads',
            'seq_q', 'seq_k', 'dim', 'dim_v', 'causal', 'flops',
            'baseline_rss_mib', 'peak_rss_mib', 'io_mib']
missing = [k for k in required if k not in d]
assert not missing, f'missing keys {missing}'
# Memory (MiB): positive; the peak is at least the baseline; io_mib is exactly q, k, v
# and the output at the dtype's size.
assert d['baseline_rss_mib'] > 0 and d['peak_rss_mib'] > 0 and d['io_mib'] > 0, d
assert d['peak_rss_mib'] >= d['baseline_rss_mib'], (d['peak_rss_mib'], d['baseline_rss_mib'])
size = {'f32': 4, 'bf16': 2, 'f16': 2}[d['dtype']]
elements = d['batch'] * (d['heads'] * d['seq_q'] * d['dim'] + d['kv_heads'] * d['seq_k'] * (d['dim'] + d['dim_v'])
                         + d['heads'] * d['seq_q'] * d['dim_v'])
assert math.isclose(d['io_mib'], elements * size / 2**20, rel_tol=1e-12), (d['io_mib'], elements * size / 2**20)
assert d['ms'] > 0 and d['ms_min'] > 0 and d['ms_min'] <= d['ms'], (d['ms'], d['ms_min'])
assert d['gflops'] > 0, d['gflops']
# gflops is flops / median time: gflops * ms * 1e6 == flops.
assert math.isclose(d['gflops'] * d['ms'] * 1e6, d['flops'], rel_tol=1e-9), d
pairs = d['batch'] * d['heads'] * d['seq_q'] * d['seq_k']
full = 2 * pairs * d['dim'] + 2 * pairs * d['dim_v']
expected = full / 2 if d['causal'] and d['seq_q'] == d['seq_k'] else full
assert math.isclose(d['flops'], expected, rel_tol=1e-12), (d['flops'], expected)
assert eval(sys.argv[2]), 'check failed: ' + sys.argv[2] + '; got ' + json.dumps(d)
" "$TMP/out" "$check" 2>"$TMP/py"; then pass; else fail "$what: $(cat "$TMP/py") (output: $(head -c 400 "$TMP/out"))"; fi
}

test_help() {
  run --help
  expect_status 0 "--help"
  for command in version explain bench; do
    expect_in out "^ +$command +[A-Z]" "--help lists '$command' with a description"
  done
  for command in version explain bench; do
    run "$command" --help
    expect_status 0 "$command --help"
    expect_in out "qkv $command" "$command --help names the command"
  done
  run bench --help
  for option in --batch --heads --kv-heads --seq --kv-seq --dim --dim-v --causal --dtype \
                --threads --impl --repeats --warmup --json; do
    expect_in out "$option" "bench --help lists $option"
  done
  run explain --help
  expect_in out "--text" "explain --help lists --text"
  expect_in out "--seed" "explain --help lists --seed"
  # No command: the usage, and a failure status (as git).
  run
  expect_status 1 "no command"
  expect_in out "explain" "no command prints the usage"

  # qkv train: one subcommand per task, each --help listing that task's options only (an
  # option line starts with the option), their defaults, and what --batch counts.
  run train --help
  expect_status 0 "train --help"
  for task in dates tokenizer lm mf sasrec vit point; do
    expect_in out "^ +$task +[A-Z]" "train --help lists the task '$task' with a description"
  done
  expect_not_in out "^ +(recommender|vision)\b" "train --help lists no old task"
  expect_not_in out "^ +--[a-z]" "train --help lists no training option (each task has its own)"
  train_help() {  # train_help TASK "OPTIONS IT LISTS" "OPTIONS IT DOES NOT" REGEX...
    local task=$1 has=$2 lacks=$3 option pattern
    shift 3
    run train "$task" --help
    expect_status 0 "train $task --help"
    expect_in out "^Usage: qkv train $task " "train $task --help names the command"
    for option in $has --out --json --quiet; do
      expect_in out "^ +$option\b" "train $task --help lists $option"
    done
    for option in $lacks --model --help-all; do
      expect_not_in out "^ +$option\b" "train $task --help does not list $option (not an option of $task)"
    done
    for pattern in "$@"; do
      expect_in out "$pattern" "train $task --help: '$pattern'"
    done
  }
  local loop="--resume --checkpoint-every --stop-at"
  train_help dates "--steps --batch --lr --label-smoothing --seed --eval-size $loop" \
    "--data --text --epochs --dim --layers --patch-size --l2 --vocab-size" \
    "^ +--out PATH=dates-model " "^ +--batch INT=128 +Pairs per step" "^ +--steps INT=1500 " \
    "^ +--checkpoint-every INT=500 " "^ +--stop-at INT=0 .*0 = never"
  train_help tokenizer "--text --vocab-size --min-frequency" \
    "--steps --batch --data --resume --checkpoint-every --stop-at --layers --heldout" \
    "^ +--text TEXT REQUIRED" "^ +--out PATH=tokenizer " "^ +--vocab-size INT=8192 "
  train_help lm "--text --heldout --data --data-dir --tokenizer --vocab-size --layers --embd --heads --context \
    --steps --batch --lr --warmup --eval-every --seed $loop" \
    "--patch-size --l2 --epochs --dim --min-frequency --eval-size --max-len --points --bf16" \
    "^ +--out PATH=lm-model " "^ +--batch INT=16 +Windows per step" "^ +--heads INT=4 .*must divide --embd" \
    "^ +--checkpoint-every INT=500 " "^ +--stop-at INT=0 .*0 = never" "^ +--data CHOICE .*one of sotu, brown"
  train_help mf "--data --epochs --dim --batch --lr --l2 --seed --patience $loop" \
    "--steps --layers --heads --max-len --eval-every --weight-decay --text --patch-size --points" \
    "^ +--data PATH REQUIRED" "^ +--out PATH=recommender-model" "^ +--batch INT=256 +Ratings per step" \
    "^ +--epochs INT=30 " "^ +--dim INT=64 .*0 = biases only" "^ +--checkpoint-every INT=0 " \
    "^ +--stop-at INT=0 .*0 = never"
  train_help sasrec "--data --epochs --dim --layers --heads --max-len --batch --lr --weight-decay --eval-every \
    --seed --patience $loop" \
    "--steps --l2 --text --patch-size --points --mlp-dim" \
    "^ +--data PATH REQUIRED" "^ +--out PATH=recommender-model" "^ +--batch INT=128 +Users per step" \
    "^ +--epochs INT=200 " "^ +--heads INT=1 .*must divide --dim" "^ +--checkpoint-every INT=0 "
  train_help vit "--data --epochs --batch --lr --label-smoothing --seed --train-limit --patience --bf16 $loop \
    --dim --layers --heads --patch-size --mlp-dim --positions --shifted-patches --erase --patch-dropout \
    --patch-dropout-epochs" \
    "--steps --points --neighbors --l2 --max-len --text --embd" \
    "^ +--data PATH REQUIRED" "^ +--out PATH=vision-model " "^ +--batch INT=128 +Images per step" \
    "^ +--patch-size INT=4 " "^ +--dim INT=128 " "^ +--positions CHOICE=learned .*one of learned, sincos" \
    "^ +--checkpoint-every INT=500 "
  train_help point "--data --epochs --batch --lr --label-smoothing --seed --train-limit --patience --bf16 $loop \
    --dim --layers --points --neighbors --patch-size" \
    "--steps --heads --mlp-dim --positions --shifted-patches --erase --patch-dropout --l2 --max-len --text" \
    "^ +--data PATH REQUIRED" "^ +--out PATH=vision-model " "^ +--batch INT=128 +Images per step" \
    "^ +--patch-size INT=7 " "^ +--dim INT=32 " "^ +--points INT=128 "
}

test_version() {
  run version
  expect_status 0 "version"
  expect_in out "^qkv 0\.1\.0$" "version prints the version"
  expect_in out "^compiler: " "version prints the compiler"
  expect_in out "^cpu: " "version prints the CPU"
  expect_in out "^threads: +[1-9][0-9]*$" "version prints the thread count"
  expect_in out "^impls: +auto, reference" "version lists the implementations"
  QKV_NUM_THREADS=1 run version
  expect_in out "^threads: +1$" "version follows QKV_NUM_THREADS"
}

test_explain() {
  run explain
  expect_status 0 "explain"
  cp "$TMP/out" "$TMP/explain1"
  for section in "1\. Embeddings" "2\. Raw self-attention" "3\. Queries, keys and values" \
                 "4\. Multi-head attention" "5\. Causal attention" "6\. The rest of the layer"; do
    expect_in out "^$section" "explain prints section '$section'"
  done
  expect_in out 'Text "the cat sat": 3 tokens' "explain's default text"
  expect_in out "self_attention_raw" "explain uses qkv::self_attention_raw"
  expect_in out "scaled_dot_product_attention" "explain uses qkv::scaled_dot_product_attention"
  expect_in out "All [0-9]+ library results match" "explain's library checks pass"
  expect_not_in out "MISMATCH" "explain's library checks pass"
  # After attention: each step checked against its nn module, and the whole layer.
  for module in "nn::LayerNorm gives the same rows" "nn::FeedForward gives the same rows" \
                "nn::LayerNorm gives the same output" "nn::TransformerEncoderLayer\(X\) gives the same Y"; do
    expect_in out "✓ qkv::$module" "explain checks qkv::$module"
  done
  expect_in out "post-LN" "explain names post-LN"
  expect_in out "pre-LN" "explain names pre-LN"
  check_row_sums 15 1.000 "explain (3 tokens, 5 weight matrices)"
  # Causal: the first row of the causal weights is 1 0 0.
  expect_in out "^ +the +1\.000 +0\.000 +0\.000 +1\.000 " "explain's causal first row is (1, 0, 0)"
  # Readable in 100 columns.
  if "$PYTHON" -c "
import sys
w = max(len(l) for l in open('$TMP/out', encoding='utf-8').read().split('\n'))
assert w <= 100, w" 2>"$TMP/py"; then pass; else fail "explain wider than 100 columns: $(cat "$TMP/py")"; fi

  run explain
  if cmp -s "$TMP/out" "$TMP/explain1"; then pass; else fail "explain is not deterministic"; fi
  run explain --seed 0
  if cmp -s "$TMP/out" "$TMP/explain1"; then pass; else fail "explain --seed 0 differs from the default"; fi
  run explain --seed 7
  expect_status 0 "explain --seed 7"
  if ! cmp -s "$TMP/out" "$TMP/explain1"; then pass; else fail "explain --seed 7 equals seed 0"; fi

  run explain --text "the cat sat down"
  expect_status 0 "explain with 4 words"
  expect_in out 'Text "the cat sat down": 4 tokens' "explain --text with 4 words"
  expect_in out "All [0-9]+ library results match" "explain with 4 words: library checks pass"
  check_row_sums 20 1.000 "explain (4 tokens)"

  run explain --text "one"
  expect_status 0 "explain with 1 word"
  check_row_sums 5 1.000 "explain (1 token)"

  run explain --text "a b c d e f g h i j k l"
  expect_status 0 "explain with 12 words"
  expect_in out "All [0-9]+ library results match" "explain with 12 words: library checks pass"
  check_row_sums 60 1.00 "explain (12 tokens)"
}

test_bench() {
  check_bench_json "bench --json" \
    "d['impl'] == 'auto' and d['dtype'] == 'f32' and not d['causal'] and d['kv_heads'] == 2" \
    --batch 1 --heads 2 --seq 8 --dim 4
  check_bench_json "bench --json --causal (flops halved)" "d['causal'] and d['seq_q'] == d['seq_k']" \
    --batch 1 --heads 2 --seq 16 --dim 8 --causal
  check_bench_json "bench --json --causal with Lq != Lk (not halved)" "d['causal'] and d['seq_k'] == 24" \
    --batch 1 --heads 2 --seq 16 --kv-seq 24 --dim 8 --causal
  check_bench_json "bench GQA, Dv != Dk, reference, bf16, 1 thread" \
    "d['heads'] == 4 and d['kv_heads'] == 2 and d['dim_v'] == 6 and d['impl'] == 'reference' and d['isa'] == 'none' and d['dtype'] == 'bf16' and d['threads'] == 1" \
    --batch 2 --heads 4 --kv-heads 2 --seq 5 --kv-seq 9 --dim 4 --dim-v 6 --impl reference \
    --dtype bf16 --threads 1
  check_bench_json "bench f16" "d['dtype'] == 'f16' and d['seq_q'] == 7" \
    --batch 1 --heads 1 --seq 7 --dim 16 --dtype f16 --warmup 0
  check_bench_json "bench explicit --impl auto" "d['impl'] == 'auto'" \
    --batch 1 --heads 1 --seq 4 --dim 4 --impl auto

  run bench --batch 1 --heads 2 --seq 32 --dim 16 --repeats 3
  expect_status 0 "bench (text)"
  expect_in out "B=1 Hq=2 Hkv=2 Lq=32 Lk=32 Dk=16 Dv=16" "bench prints the shape"
  expect_in out "impl auto \\((simd128|avx2|avx512|avx512_bf16|amx)\\) +dtype f32 +threads [0-9]+ +median [0-9.]+ ms +min [0-9.]+ ms +[0-9.]+ GFLOP/s" \
    "bench prints impl, dtype, threads, times and GFLOP/s"
  expect_in out "3 runs after 1 warm-up" "bench reports repeats and warm-up"
  run bench --batch 1 --heads 2 --seq 32 --dim 16 --causal --repeats 1
  expect_status 0 "bench --causal (text)"
  expect_in out "causal" "bench --causal says so"

  # --impl fast: the fused kernel, on every ISA this CPU runs (QKV_ISA forces one).
  check_bench_json "bench --impl fast" "d['impl'] == 'fast'" --batch 1 --heads 2 --seq 8 --dim 4 \
    --impl fast
  local isa flag
  for isa in simd128 avx2 avx512 avx512_bf16 amx amx_emulated; do
    case $isa in
      simd128) flag= ;; avx2) flag=avx2 ;; avx512) flag=avx512f ;; avx512_bf16 | amx_emulated) flag=avx512_bf16 ;;
      amx) flag=amx_bf16 ;;
    esac
    if [[ -n $flag ]] && ! grep -qw "$flag" /proc/cpuinfo; then continue; fi
    QKV_ISA=$isa check_bench_json "bench --impl fast, QKV_ISA=$isa" "d['impl'] == 'fast' and d['isa'] == '$isa'" \
      --batch 1 --heads 2 --kv-heads 1 --seq 40 --kv-seq 70 --dim 24 --causal --impl fast --dtype bf16
  done
  # scalar, simd128's former name, still selects it.
  QKV_ISA=scalar check_bench_json "bench --impl fast, QKV_ISA=scalar" "d['isa'] == 'simd128'" \
    --batch 1 --heads 2 --seq 8 --dim 4 --impl fast
}

test_errors() {
  local shape=(--batch 1 --heads 2 --seq 8 --dim 4)
  expect_usage_error --batch bench --batch 0 --heads 2 --seq 8 --dim 4
  expect_usage_error --heads bench --batch 1 --heads -3 --seq 8 --dim 4
  expect_usage_error --seq bench --batch 1 --heads 2 --seq abc --dim 4
  expect_usage_error --dim bench --batch 1 --heads 2 --seq 8 --dim 1.5
  expect_usage_error --kv-seq bench "${shape[@]}" --kv-seq 0
  expect_usage_error --dim-v bench "${shape[@]}" --dim-v x
  expect_usage_error --batch bench --batch 99999999999999999999 --heads 2 --seq 8 --dim 4
  expect_usage_error --batch bench --heads 2 --seq 8 --dim 4
  expect_usage_error --batch bench --heads 2 --seq 8 --dim 4 --batch
  expect_usage_error --dtype bench "${shape[@]}" --dtype f64
  expect_usage_error --kv-heads bench --batch 1 --heads 4 --kv-heads 3 --seq 8 --dim 4
  expect_usage_error --kv-heads bench --batch 1 --heads 4 --kv-heads 0 --seq 8 --dim 4
  expect_usage_error --threads bench "${shape[@]}" --threads 0
  expect_usage_error --threads bench "${shape[@]}" --threads two
  expect_usage_error --threads bench "${shape[@]}" --threads 5000
  expect_usage_error --repeats bench "${shape[@]}" --repeats 0
  expect_usage_error --warmup bench "${shape[@]}" --warmup -1
  expect_usage_error --impl bench "${shape[@]}" --impl turbo
  expect_usage_error --seed bench "${shape[@]}" --seed -1
  expect_usage_error GiB bench --batch 100000 --heads 100000 --seq 100000 --dim 100000
  expect_usage_error --bogus bench "${shape[@]}" --bogus
  expect_usage_error frobnicate frobnicate
  expect_usage_error --bogus --bogus
  expect_usage_error --text explain --text ""
  expect_usage_error --text explain --text "   "
  expect_usage_error --text explain --text "a b c d e f g h i j k l m"
  expect_usage_error --seed explain --seed abc
  expect_usage_error extra version extra

  # Library errors (malformed environment variables) are reported, not crashes.
  QKV_ISA=bogus run bench "${shape[@]}" --impl fast
  if [[ $status -eq 1 ]]; then pass; else fail "QKV_ISA=bogus: exit status $status, expected 1"; fi
  expect_in err "^qkv: error: .*QKV_ISA" "QKV_ISA=bogus names the variable"
  QKV_NUM_THREADS=abc run version
  if [[ $status -eq 1 ]]; then pass; else fail "QKV_NUM_THREADS=abc: exit status $status, expected 1"; fi
  expect_in err "^qkv: error: .*QKV_NUM_THREADS" "QKV_NUM_THREADS=abc names the variable"
  # Read at the first tensor large enough for the storage cache (1 MiB of output here).
  QKV_STORAGE_CACHE_MB=-1 run bench --batch 1 --heads 4 --seq 1024 --dim 64 --repeats 1
  if [[ $status -eq 1 ]]; then pass; else fail "QKV_STORAGE_CACHE_MB=-1: exit status $status, expected 1"; fi
  expect_in err "^qkv: error: .*QKV_STORAGE_CACHE_MB" "QKV_STORAGE_CACHE_MB=-1 names the variable"
  QKV_STORAGE_CACHE_MB=0 run bench --batch 1 --heads 4 --seq 1024 --dim 64 --repeats 1
  if [[ $status -eq 0 ]]; then pass; else fail "QKV_STORAGE_CACHE_MB=0 (cache off): exit status $status"; fi
  # The memory limit (qkv/memory.h): over it is a message naming the sizes, not a crash.
  QKV_MEMORY_LIMIT=lots run bench --batch 1 --heads 4 --seq 1024 --dim 64 --repeats 1
  if [[ $status -eq 1 ]]; then pass; else fail "QKV_MEMORY_LIMIT=lots: exit status $status, expected 1"; fi
  expect_in err "^qkv: error: .*QKV_MEMORY_LIMIT" "QKV_MEMORY_LIMIT=lots names the variable"
  # 256 KiB of inputs and output, 2 × 17 MiB of kernel scratch at D = 16384.
  QKV_MEMORY_LIMIT=8M run bench --batch 1 --heads 1 --seq 1 --dim 16384 --threads 2 --repeats 1
  if [[ $status -eq 1 ]]; then pass; else fail "QKV_MEMORY_LIMIT=8M: exit status $status, expected 1"; fi
  expect_in err "^qkv: error: scaled_dot_product_attention: needs .*kernel scratch.*set by QKV_MEMORY_LIMIT=8M" \
    "QKV_MEMORY_LIMIT=8M: the sizes and the limit"
  # Issue 29, row 2: per-thread scratch grew with the head dimension (1.1 GiB at 2^20) and
  # its allocation failed inside a parallel region (SIGABRT); wide heads run the reference.
  if command -v prlimit >/dev/null; then
    local command=("${QKV_COMMAND[@]}")
    QKV_COMMAND=(prlimit --as=3000000000 "${command[@]}")
    run bench --batch 1 --heads 1 --seq 8 --dim 1048576 --repeats 1 --warmup 0
    QKV_COMMAND=("${command[@]}")
    if [[ $status -eq 0 ]]; then pass; else fail "D = 2^20 under a 3 GB address space: exit status $status: $(head -c 400 "$TMP/err")"; fi
  fi
}

case "$GROUP" in
  help) test_help ;;
  version) test_version ;;
  explain) test_explain ;;
  bench) test_bench ;;
  errors) test_errors ;;
  all) test_help; test_version; test_explain; test_bench; test_errors ;;
  *) echo "unknown group '$GROUP'" >&2; exit 2 ;;
esac

finish "$GROUP"
