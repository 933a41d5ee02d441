# Shared by the browser tests of tests/viz (source it after tests/cli/lib.sh, with TMP set):
# CHROMIUM, the headless browser (the test FAILS without it: `scripts/setup.sh test`
# installs it), and chrome ARGS... URL, one headless run with a fresh profile and nothing
# fetched in the background (its stderr appended to $TMP/chrome.err).
#   source tests/viz/chrome.sh NAME   (NAME: the test's name in its summary)

CHROMIUM=$(command -v chromium || true)
if [[ -z $CHROMIUM ]]; then
  fail "chromium is not installed; 'scripts/setup.sh test' (make test) installs it"
  finish "${1:-browser}"
fi

chrome() {
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$(mktemp -d -p "$TMP")" "$@" 2>>"$TMP/chrome.err"
}
