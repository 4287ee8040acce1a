#!/usr/bin/env bash
# ctest-cost: 10
# upload_journals.sh - journals do not pile up in the state directory: a
# copy keeps its journal (the next run skips on its word), a
# --delete-source move that deleted its whole source removes it, and any
# upload removes journals untouched for 30 days that hold no unfinished
# upload and that no running copy holds; a second upload of the same copy
# while the first runs is refused ("journal locked").
. "$(dirname "$0")/../support/lib.sh"
export CKPT_STATE_DIR=$T/state
S=$CKPT_STATE_DIR
cd "$T" || exit 1
mkdir -p src/d
echo a >src/a
echo b >src/d/b
names() { (cd "$S" && ls | LC_ALL=C sort | tr '\n' ' '); }
newest() { ls -t "$S"/upload-*.journal | head -1; }

"$CKPT" upload -q src dst1
check "copy exit" 0 $?
j1=$(newest)
check "a copy keeps its journal and lock" "$(basename "${j1%.journal}").journal $(basename "${j1%.journal}").lock " "$(names)"

cp -a src mv
"$CKPT" upload -q --delete-source mv dst2
check "move exit" 0 $?
check "the source is gone" "no" "$([ -e mv ] && echo yes || echo no)"
check "a move leaves no journal behind" "$(basename "${j1%.journal}").journal $(basename "${j1%.journal}").lock " "$(names)"

# A move that could not delete everything keeps its journal. The unlink
# of mv2/d/b is refused by an LD_PRELOAD shim (a read-only directory
# would stop only a user who is not root).
cp -a src mv2
LD_PRELOAD=${CKPT_BUILD:-$SRC/build}/libunlink_fail_preload.so \
    CKPT_TEST_UNLINK_FAIL=b \
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
    "$CKPT" upload -q --delete-source mv2 dst2b 2>/dev/null
check "partial move exit" 1 $?
check "partial move: the refused file is left" "b" "$(ls mv2/d)"
check "a partial move keeps its journal" 2 "$(ls "$S"/upload-*.journal | wc -l)"
rm -f "$(newest)" "$(newest | sed 's/journal$/lock/')"

# The same copy twice at once: the second is refused while the first runs.
flock "${j1%.journal}.lock" "$CKPT" upload -q src dst1 >out 2>err
check "locked journal: exit" 1 $?
check "locked journal: row" "error	src	dst1	another ckpt upload of the same SRC to the same DEST is running (journal '${j1%.journal}.lock' is locked)" "$(grep -v '^total	' out)"

# Age: journals untouched for 30 days go, unless unfinished or in use.
old=$S/upload-0123456789abcdef0123456789abcdef
printf '# ckpt upload journal v1\nS\tk\t%s/.k.ckpt-up-1\t100\t8388608\tm1\n' "$T" >"$old.journal"
: >"$old.lock"
"$CKPT" upload -q src dst3
j3=$(newest)
"$CKPT" upload -q src dst4
j4=$(newest)
touch -d '40 days ago' "$j1" "$old.journal" "$j4"
touch -d '29 days ago' "$j3"
flock "${j4%.journal}.lock" "$CKPT" upload -q src dst5
check "pruning run exit" 0 $?
j5=$(newest)
want=$(for j in "$old" "${j3%.journal}" "${j4%.journal}" "${j5%.journal}"; do
    b=$(basename "$j"); printf '%s.journal\n%s.lock\n' "$b" "$b"; done |
    LC_ALL=C sort | tr '\n' ' ')
check "old finished journal pruned, the rest kept" "$want" "$(names)"
# The pruned copy still works: its rerun skips by comparing DEST.
out=$(up -v src dst1 2>err)
check "rerun after pruning" "skip	src/a	dst1/a	same size and modification time
skip	src/d/b	dst1/d/b	same size and modification time" "$out"
finish
