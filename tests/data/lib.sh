# What the data.* tests share (sourced): fail, a temporary directory $tmp removed on exit,
# and check FILE SHA256 (a file under $tmp/data must have exactly that SHA-256).
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/qkv-data.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
check() {
  local file=$1 want=$2 got
  got=$(sha256sum "$tmp/data/$file" | cut -d' ' -f1)
  [[ $got == "$want" ]] || fail "$file: SHA-256 $got, expected $want"
}
