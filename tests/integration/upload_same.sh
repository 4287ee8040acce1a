#!/usr/bin/env bash
# ctest-cost: 20
# upload_same.sh - SRC and DEST that are the same place, or one inside the
# other, under any spelling (absolute path, file://, a symlink on either
# side, trailing slashes, ./, ..): `upload --delete-source` refuses before
# copying or deleting anything (exit 2), and a copy onto itself is refused
# without --delete-source too. The source file always survives. Remote
# locations are compared by endpoint, bucket and key.
. "$(dirname "$0")/../support/lib.sh"
. "$SRC/tests/support/s3env.sh"
# ckpt upload's rows without the total row that ends them; its status.
s3env_start --bucket ckpt-test || exit 1
trap 's3env_stop; chmod -R u+rwx "$T" 2>/dev/null; rm -rf "$T"' EXIT
export CKPT_STATE_DIR=$T/state
cd "$T" || exit 1
E="ckpt upload: error:"

fresh() {
    rm -rf sf lnk alink
    mkdir -p sf/sub
    echo precious >sf/a.txt
    echo deep >sf/sub/b.txt
    ln -s sf lnk
    ln -s sf/a.txt alink
}

# refused NAME MESSAGE ARGS...: exit 2, that message on stderr, nothing on
# stdout, and the source tree exactly as it was.
refused() {
    local name=$1 msg=$2
    shift 2
    fresh
    local before out
    before=$(tree sf)
    out=$(up "$@" 2>err)
    check "$name: exit" 2 $?
    check "$name: message" "$msg" "$(cat err)"
    check "$name: no rows" "" "$out"
    check "$name: source intact" "$before" "$(tree sf)"
    check "$name: content intact" "precious" "$(cat sf/a.txt)"
}

same() { echo "$E SRC '$1' and DEST '$2' are the same location (a copy onto itself)"; }
dinside() { echo "$E --delete-source: DEST '$1' is inside SRC '$2': deleting SRC would delete the copy"; }
sinside() { echo "$E --delete-source: SRC '$1' is inside DEST '$2': the copy could overwrite the source before it is deleted"; }

# --- the same directory, every spelling
refused "absolute" "$(same sf "$PWD/sf")" --delete-source sf "$PWD/sf"
refused "file://" "$(same sf "$PWD/sf")" --delete-source sf "file://$PWD/sf"
refused "DEST a symlink" "$(same sf lnk)" --delete-source sf lnk
refused "SRC a symlink" "$(same lnk sf)" --delete-source lnk sf
refused "trailing slashes" "$(same sf/ sf)" --delete-source sf/ sf//
refused "./" "$(same ./sf sf)" --delete-source ./sf sf
refused ".." "$(same sf sf/../sf)" --delete-source sf sf/../sf
refused "symlink/.." "$(same sf lnk/sub/..)" --delete-source sf lnk/sub/..
refused "without --delete-source" "$(same sf "$PWD/sf")" sf "$PWD/sf"

# --- the same file
refused "file onto itself" "$(same sf/a.txt sf/a.txt)" --delete-source sf/a.txt sf/a.txt
refused "file into its directory" "$(same sf/a.txt sf/a.txt)" --delete-source sf/a.txt sf
refused "file into its directory/" "$(same sf/a.txt sf/a.txt)" --delete-source sf/a.txt sf/
refused "file through a symlink" "$(same alink "$PWD/sf/a.txt")" --delete-source alink "$PWD/sf/a.txt"
refused "file onto itself, no --delete-source" "$(same sf/a.txt "$PWD/sf/a.txt")" sf/a.txt "$PWD/sf/a.txt"
refused "file among several SRC" "$(same sf/a.txt sf/a.txt)" sf/sub/b.txt sf/a.txt sf
fresh; ln sf/a.txt hard.txt
out=$(up --delete-source hard.txt sf/a.txt 2>err)
check "hard link: exit" 2 $?
check "hard link: message" "$(same hard.txt sf/a.txt)" "$(cat err)"
check "hard link: both names kept" "precious precious" "$(cat hard.txt) $(cat sf/a.txt)"
rm -f hard.txt

# --- one inside the other (only --delete-source refuses)
refused "DEST inside SRC (not there yet)" "$(dinside "$PWD/sf/new/deeper" sf)" --delete-source sf "$PWD/sf/new/deeper"
refused "DEST inside SRC via symlink" "$(dinside lnk/sub sf)" --delete-source sf lnk/sub
refused "DEST inside SRC via .." "$(dinside "sf/x/../sub/y" sf)" --delete-source sf sf/x/../sub/y
refused "SRC inside DEST" "$(sinside sf/sub "$PWD")" --delete-source sf/sub "$PWD"
refused "SRC inside DEST via symlink" "$(sinside lnk/sub sf)" --delete-source lnk/sub sf

# Without --delete-source, DEST inside SRC stays a failed row (exit 1).
fresh
out=$(up sf "$PWD/sf/in" 2>err)
check "DEST inside SRC, no --delete-source: exit" 1 $?
check "DEST inside SRC, no --delete-source: row" "error	sf	-	DEST '$PWD/sf/in' is inside SRC 'sf'" "$out"

# A sibling whose name starts like SRC is not inside it; a real move works.
fresh
out=$(up -q --delete-source sf sf2 2>err)
check "move to a sibling: exit" 0 $?
check "move to a sibling: moved" "precious no" "$(cat sf2/a.txt) $([ -e sf ] && echo yes || echo no)"
rm -rf sf2

# --- remote: same endpoint, bucket and key
echo precious >r.txt
"$CKPT" upload -q r.txt s3://ckpt-test/r/a.txt
check "remote seed" 0 $?
out=$(up --delete-source s3://ckpt-test/r s3://ckpt-test/r/ 2>err)
check "remote same: exit" 2 $?
check "remote same: message" "$(same s3://ckpt-test/r s3://ckpt-test/r)" "$(cat err)"
out=$(up --delete-source s3://ckpt-test/r/a.txt s3://ckpt-test//r/a.txt 2>err)
check "remote same file: exit" 2 $?
check "remote same file: message" "$(same s3://ckpt-test/r/a.txt s3://ckpt-test/r/a.txt)" "$(cat err)"
out=$(up --delete-source s3://ckpt-test/r s3://ckpt-test/r/in 2>err)
check "remote DEST inside SRC: exit" 2 $?
check "remote DEST inside SRC: message" "$(dinside s3://ckpt-test/r/in s3://ckpt-test/r)" "$(cat err)"
out=$(up --delete-source s3://ckpt-test/r s3://ckpt-test 2>err)
check "remote SRC inside DEST: exit" 2 $?
check "remote SRC inside DEST: message" "$(sinside s3://ckpt-test/r s3://ckpt-test)" "$(cat err)"
"$CKPT" upload -q s3://ckpt-test/r back
check "remote source kept" "precious" "$(cat back/a.txt)"
# A key that only starts like SRC is elsewhere: the move goes ahead.
out=$(up -q --delete-source s3://ckpt-test/r s3://ckpt-test/r2 2>err)
check "remote move to a sibling prefix: exit" 0 $?
"$CKPT" upload -q s3://ckpt-test/r2 back2
check "remote move arrived" "precious" "$(cat back2/a.txt)"
finish
