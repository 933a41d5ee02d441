#!/usr/bin/env bash
# The CUDA backend on a GPU machine, in one call from the repository root:
#   bash scripts/cuda/device_check.sh
# Needs .device/ (scripts/cuda/pack_device.sh made it on the build machine): the prebuilt
# qkv_cuda_tests, qkv and libqkv_cuda.so, and libs.tar.xz with the shared libraries a stock
# Ubuntu lacks. Prints a compact summary; full logs go to $OUT (default /tmp/qkv_device_out).
# When the prebuilt binaries cannot run here, libqkv_cuda.so is rebuilt from the .cu files
# with nvcc alone (it needs only CUDA and qkv's headers) and the torch checks still run.
set -u
OUT=${OUT:-/tmp/qkv_device_out}
mkdir -p "$OUT"
DEV=.device
START=$(date +%s)
SUMMARY=()
say() { echo "$*"; SUMMARY+=("$*"); }

echo "== GPU"
nvidia-smi -L || say "nvidia-smi failed"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null

mkdir -p /tmp/qkvlibs
if [ -f $DEV/libs.tar.xz ]; then tar -xJf $DEV/libs.tar.xz -C /tmp/qkvlibs; fi
export LD_LIBRARY_PATH=/tmp/qkvlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

echo "== qkv_cuda_tests (GoogleTest vs the CPU reference)"
if ! $DEV/qkv_cuda_tests --gtest_list_tests > "$OUT/tests_list.log" 2>&1; then
  say "tests: PREBUILT qkv_cuda_tests DOES NOT RUN HERE: $(head -c 400 "$OUT/tests_list.log")"
else
  timeout 150 $DEV/qkv_cuda_tests --gtest_brief=1 > "$OUT/cuda_tests.log" 2>&1
  rc=$?
  # Brief mode prints only failures; the first ones in full, then the summary lines.
  grep -v '^\[  *\(OK\|RUN\) ' "$OUT/cuda_tests.log" | head -n 60
  grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/cuda_tests.log" | head -n 20
  say "tests: exit $rc ($(grep -E '^\[  PASSED' "$OUT/cuda_tests.log" | head -1)$(grep -cE '^\[  FAILED  \] [A-Za-z]' "$OUT/cuda_tests.log" | sed 's/^/ failed cases: /'))"
  [ $rc = 124 ] && say "tests: TIMED OUT after 150 s (log: $OUT/cuda_tests.log)"
fi

echo "== libqkv_cuda.so"
LIB=$DEV/libqkv_cuda.so
if ! python3 -c "import ctypes,sys; ctypes.CDLL(sys.argv[1])" "$LIB" > "$OUT/lib_load.log" 2>&1; then
  say "lib: prebuilt libqkv_cuda.so does not load ($(tail -c 300 "$OUT/lib_load.log")); building it with nvcc"
  mkdir -p /tmp/qkvbuild
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  if $NVCC -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -Xcompiler -fPIC -shared \
      -Iinclude -Isrc src/attention/cuda/forward.cu src/attention/cuda/forward_sm90.cu src/attention/cuda/backward.cu src/attention/cuda/device.cpp src/attention/cuda/capi.cpp \
      -cudart static -o /tmp/qkvbuild/libqkv_cuda.so > "$OUT/nvcc.log" 2>&1; then
    LIB=/tmp/qkvbuild/libqkv_cuda.so
    say "lib: rebuilt with nvcc"
  else
    say "lib: nvcc build FAILED: $(tail -c 600 "$OUT/nvcc.log")"
  fi
fi

echo "== PyTorch: correctness and speed"
timeout 260 python3 scripts/cuda/check_torch.py --lib "$LIB" --json "$OUT/torch.json" > "$OUT/check_torch.log" 2>&1
rc=$?
head -n 2 "$OUT/check_torch.log"
grep -E '^(FAIL|  FAILED)' "$OUT/check_torch.log" | head -n 40
grep -E '^correctness:' "$OUT/check_torch.log"
sed -n '/^== speed/,$p' "$OUT/check_torch.log"
grep -E 'Traceback|Error' "$OUT/check_torch.log" | grep -v '^ok\|^FAIL' | head -n 10
say "torch: exit $rc ($(grep -E '^correctness:' "$OUT/check_torch.log" | head -1))"
[ $rc = 124 ] && { say "torch: TIMED OUT (partial log follows)"; tail -n 30 "$OUT/check_torch.log"; }

echo "== PyTorch: the backward against float64 autograd"
timeout 180 python3 scripts/cuda/check_torch_backward.py --lib "$LIB" > "$OUT/check_torch_backward.log" 2>&1
rc=$?
grep -vE '^ok' "$OUT/check_torch_backward.log" | head -n 40
say "torch backward: exit $rc ($(grep -E 'backward cases within tolerance' "$OUT/check_torch_backward.log"))"

echo "== qkv bench --device cuda (the default, then QKV_CUDA_KERNEL=mma's mma.sync kernel)"
for kernel in "" mma; do
  if QKV_CUDA_KERNEL=$kernel timeout 60 $DEV/qkv bench --device cuda --batch 4 --heads 16 --seq 4096 --dim 128 --dtype bf16 \
      --repeats 20 --warmup 5 > "$OUT/bench$kernel.log" 2>&1; then
    cat "$OUT/bench$kernel.log"
    say "bench${kernel:+ (kernel $kernel)}: $(tail -n 1 "$OUT/bench$kernel.log" | tr -s ' ')"
  else
    say "bench${kernel:+ (kernel $kernel)}: FAILED: $(tail -c 400 "$OUT/bench$kernel.log")"
  fi
done
echo
echo "== summary ($(( $(date +%s) - START )) s; logs in $OUT)"
printf '%s\n' "${SUMMARY[@]}"
