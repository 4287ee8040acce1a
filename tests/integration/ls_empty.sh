#!/usr/bin/env bash
# ctest-cost: 10
# ls_empty.sh - `ckpt ls` of a location with nothing in it: an empty local
# directory and an s3 prefix with no objects under it (the same thing as a
# prefix never written, for an object store) list no rows and exit 0; a
# local path that does not exist and a bucket that does not exist are
# still errors (exit 1, their one error row and no message: each event
# once, on one stream, docs/output.md).
. "$(dirname "$0")/../support/lib.sh"
. "$SRC/tests/support/s3env.sh"
s3env_start --bucket ckpt-test || exit 1
trap 's3env_stop; rm -rf "$T"' EXIT
export CKPT_STATE_DIR=$T/state

mkdir -p "$T/empty"
out=$("$CKPT" ls "$T/empty" 2>"$T/err")
check "local empty exit" 0 $?
check "local empty rows" "" "$out"
check "local empty stderr" "" "$(cat "$T/err")"

out=$("$CKPT" ls "$T/nope" 2>"$T/err")
check "local missing exit" 1 $?
check "local missing error row" \
    "$T/nope	-	-	-	error: stat '$T/nope': No such file or directory	-	-" \
    "$out"
check "local missing stderr" "" "$(cat "$T/err")"

for loc in s3://ckpt-test s3://ckpt-test/ s3://ckpt-test/none \
           s3://ckpt-test/none/deeper; do
    out=$("$CKPT" ls "$loc" 2>"$T/err")
    check "s3 empty exit $loc" 0 $?
    check "s3 empty rows $loc" "" "$out"
    check "s3 empty stderr $loc" "" "$(cat "$T/err")"
done

# A prefix next to objects (another run's) is still empty.
echo x >"$T/x"
"$CKPT" upload -q "$T/x" s3://ckpt-test/other/x >/dev/null 2>&1
out=$("$CKPT" ls s3://ckpt-test/none 2>"$T/err")
check "s3 empty beside objects exit" 0 $?
check "s3 empty beside objects rows" "" "$out"

out=$("$CKPT" ls s3://no-such-bucket/run 2>"$T/err")
check "s3 missing bucket exit" 1 $?
check "s3 missing bucket error row" \
    "s3://no-such-bucket/run	-	-	-	error: s3://no-such-bucket/: no such bucket	-	-" \
    "$out"
check "s3 missing bucket stderr" "" "$(cat "$T/err")"
finish
