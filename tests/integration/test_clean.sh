#!/usr/bin/env bash
# ckpt clean on generated run trees (real torch 1.13 DCP bytes), as
# directories and as every archive type; exact verdicts and the exact
# filesystem state after each command.
source "$(dirname "$0")/../support/lib.sh"

python3 "$SRC/tests/support/gen_runs.py" "$T/s" --archives
python3 "$SRC/tests/support/make_archives.py" "$T/bad"
cd "$T/s"

NOTRUN="does not look like a run (no config.yaml with wandb/ or train_data/, and no checkpoint directory); use --force to clean it"
R1="complete checkpoint step1000-unsharded (unsharded)"
R2="no complete checkpoint with step > 0 (step0: step 0)"
R3="no complete checkpoint with step > 0 (step0: step 0; step500: model_and_optim/.metadata missing)"
R4="no checkpoint"
R5="complete checkpoint step3000-unsharded (unsharded)"
R6="no complete checkpoint with step > 0 (step1500: model_and_optim/__1_0.distcp truncated)"

# --- dry run: verdicts for every run and archive; nothing changes
before=$(tree .)
out=$("$CKPT" clean --min-age 0 -n 2871001 2871002 2871003 2871004 2871005 2871006 notes \
      2871101.tar 2871102.tar.gz 2871103.tar.zst 2871105.zip 2871106.tar.xz \
      2871107.tar.bz2 2>/dev/null)
check "dry-run exit" 0 $?
check "dry-run verdicts" "keep	2871001	$R1
would-delete	2871002	$R2
would-delete	2871003	$R3
would-delete	2871004	$R4
keep	2871005	$R5
would-delete	2871006	$R6
skip	notes	$NOTRUN
keep	2871101.tar	$R1
would-delete	2871102.tar.gz	$R2
would-delete	2871103.tar.zst	$R3
keep	2871105.zip	$R5
would-delete	2871106.tar.xz	$R6
would-delete	2871107.tar.bz2	$R4" "$out"
check "dry-run changes nothing" "$before" "$(tree .)"

# --- JSON
out=$("$CKPT" clean --min-age 0 -n --json 2871003)
b3=$(find 2871003 ! -type d -printf '%s\n' | awk '{s+=$1} END {print s}')
check "json" '{"type":"run","schema":1,"action":"would-delete","run":"2871003","reason":"'"$R3"'","bytes":'"$b3"',"freed":'"$b3"',"checkpoints":[{"name":"step0","step":0,"format":"dcp","complete":true,"verdict":"complete"},{"name":"step500","step":500,"format":"dcp","complete":false,"verdict":"incomplete","reason":"model_and_optim/.metadata missing"}]}' "$out"

# --- a skip is reported once: its row on stdout, nothing on stderr
out=$("$CKPT" clean --min-age 0 -n notes 2>"$T/skip.err")
check "skip row" "skip	notes	$NOTRUN" "$out"
check "skip: no warning too" "" "$(cat "$T/skip.err")"

# --- real run: bad runs and archives go, the rest stays untouched
keep_before=$(tree 2871001; tree 2871005)
out=$("$CKPT" clean --min-age 0 2871002 2871003 2871004 2871006 2871001 2871005 notes \
      2871102.tar.gz 2871103.tar.zst 2871106.tar.xz 2871107.tar.bz2 \
      2871101.tar 2871105.zip 2>/dev/null)
check "clean exit" 0 $?
check "clean verdicts" "delete	2871002	$R2
delete	2871003	$R3
delete	2871004	$R4
delete	2871006	$R6
keep	2871001	$R1
keep	2871005	$R5
skip	notes	$NOTRUN
delete	2871102.tar.gz	$R2
delete	2871103.tar.zst	$R3
delete	2871106.tar.xz	$R6
delete	2871107.tar.bz2	$R4
keep	2871101.tar	$R1
keep	2871105.zip	$R5" "$out"
check "what is left" "d ./2871001
d ./2871005
d ./logs
d ./notes
f ./2871101.tar 501760
f ./2871105.zip 25197" "$(cd "$T/s" && find . -mindepth 1 -maxdepth 1 -printf '%y %p %s\n' | sed 's/^d \(.*\) [0-9]*$/d \1/' | LC_ALL=C sort)"
check "kept runs untouched" "$keep_before" "$(tree 2871001; tree 2871005)"

# --- --force cleans a non-run
out=$("$CKPT" clean --min-age 0 -n --force notes)
check "force" "would-delete	notes	no checkpoint" "$out"

# --- bad input: a clear error naming the path, nothing deleted, others go on
cp "$T/bad/"*.tar* .
ln -s does-not-exist dangling
before=$(tree .)
out=$("$CKPT" clean --min-age 0 truncated.tar.gz garbage.tar dotdot.tar absolute.tar \
      symlink.tar missing dangling 2871005 2>/dev/null)
rc=$?
check "bad input exit" 1 $rc
check "bad input rows" "$(printf '%s\n' \
"error	truncated.tar.gz	truncated.tar.gz: truncated gzip input" \
"error	garbage.tar	garbage.tar: Unrecognized archive format" \
"error	dotdot.tar	dotdot.tar: member 'run/../evil' has a '..' component" \
"error	absolute.tar	absolute.tar: member '/etc/evil' has an absolute path" \
"error	symlink.tar	symlink.tar: link 'run/link' points outside the archive ('../../outside')" \
"error	missing	stat 'missing': No such file or directory" \
"error	dangling	'dangling' is a symbolic link; not deleting through it (give the real path)" \
"keep	2871005	$R5")" "$out"
check "bad input deletes nothing" "$before" "$(tree .)"
rm -f truncated.tar.gz garbage.tar dotdot.tar absolute.tar symlink.tar \
      hardlink.tar okaylink.tar dangling

# --- archives above --max-archive-size are skipped unopened
out=$("$CKPT" clean --min-age 0 -n --max-archive-size 100K 2871101.tar 2871105.zip 2>/dev/null)
check "max archive size" "skip	2871101.tar	archive is 490.0 KiB, above --max-archive-size 100.0 KiB
keep	2871105.zip	$R5" "$out"

# --- a symlink to a bad run is judged but not deleted through
python3 "$SRC/tests/support/gen_runs.py" "$T/g2" >/dev/null
ln -s "$T/g2/2871002" linkrun
out=$("$CKPT" clean --min-age 0 linkrun 2>/dev/null)
check "symlink run" "error	linkrun	'linkrun' is a symbolic link; not deleting through it (give the real path)" "$out"
test -d "$T/g2/2871002/step0"; check "symlink target intact" 0 $?

# --- no spelling of a RUN deletes through a symlink, and -n predicts the
# real row exactly (the target stays intact either way)
ln -s "$T/g2/2871003" lnk3
mkdir -p "$T/g2/sub" && ln -s ../2871003 "$T/g2/sub/up"
for a in lnk3 lnk3/ lnk3/. ./lnk3 lnk3/./ ./lnk3/. lnk3/.. lnk3/step0/.. \
         "$T/g2/sub/up/." "$T/g2/sub/up/.."; do
    before=$(tree "$T/g2")
    dry=$("$CKPT" clean --min-age 0 -n "$a" 2>/dev/null)
    real=$("$CKPT" clean --min-age 0 "$a" 2>/dev/null)
    check "symlink spelling $a: -n predicts the real row" "$real" "$dry"
    check "symlink spelling $a: refused" "error	$a" "$(cut -f1,2 <<<"$real")"
    check "symlink spelling $a: target intact" "$before" "$(tree "$T/g2")"
done
out=$("$CKPT" clean --min-age 0 -n lnk3/. lnk3/.. 2>/dev/null)
check "symlink spelling messages" "error	lnk3/.	'lnk3/.' is a symbolic link; not deleting through it (give the real path)
error	lnk3/..	'lnk3/..' goes through the symbolic link 'lnk3'; not deleting through it (give the real path)" "$out"
# a good run given as a link is refused too (one rule with process, which
# would file it under the link's name and delete through it)
ln -s "$T/s/2871001" lnk1
out=$("$CKPT" clean --min-age 0 -n lnk1/. 2>/dev/null)
check "good run through a link" "error	lnk1/.	'lnk1/.' is a symbolic link; not deleting through it (give the real path)" "$out"
out=$("$CKPT" clean --min-age 0 -n --keep-last 1 lnk1/. 2>/dev/null)
check "no pruning through a link" "error	lnk1/.	'lnk1/.' is a symbolic link; not deleting through it (give the real path)" "$out"
# "." and ".." spellings of a real run are that run
cp -r "$T/g2/2871004" "$T/g2/dots"
out=$("$CKPT" clean --min-age 0 "$T/g2/dots/." 2>/dev/null)
check "dot spelling deletes the run" "delete	$T/g2/dots/.	$R4" "$out"
test ! -e "$T/g2/dots"; check "dot spelling: gone" 0 $?

# --- "/", $HOME (and what holds it) and mount points are refused up front
start=$(date +%s)
out=$("$CKPT" clean --min-age 0 -n / 2>/dev/null)
check "refuse / exit" 1 $?
check "refuse /" "error	/	refusing to clean '/': it is the root directory" "$out"
check "refuse / at once" 1 $(( $(date +%s) - start < 3 ))
mkdir -p "$T/home"
cp -r "$T/g2/2871004/." "$T/home/"
out=$(HOME="$T/home" "$CKPT" clean --min-age 0 --force "$T/home" "$T" 2>/dev/null)
check "refuse home" "error	$T/home	refusing to clean '$T/home' ($T/home): it is or holds the home directory
error	$T	refusing to clean '$T' ($T): it is or holds the home directory" "$out"
test -f "$T/home/config.yaml"; check "home intact" 0 $?
out=$("$CKPT" clean --min-age 0 -n /proc 2>/dev/null)
check "refuse mount point" "error	/proc	refusing to clean '/proc' (/proc): it is a mount point" "$out"

# --- refuse to delete the current directory
out=$(cd "$T/g2/2871004" && "$CKPT" clean --min-age 0 . 2>/dev/null)
check "refuse cwd" "error	.	refusing to delete '.' ($T/g2/2871004)" "$out"
out=$(cd "$T/g2/2871004" && "$CKPT" clean --min-age 0 -nf . 2>/dev/null)
check "refuse cwd, dry run" "error	.	refusing to delete '.' ($T/g2/2871004)" "$out"

# --- pruning inside kept runs
mk() { mkdir -p "$1"; cp "$SRC/tests/fixtures/runs/olmo-torch-new-1.13/model.pt" "$1/"; }
P="$T/p/run"
mkdir -p "$P/wandb"; echo "run_name: p" > "$P/config.yaml"
for s in 100 200 300 400 500; do mk "$P/step$s-unsharded"; done
mk "$P/step0-unsharded"
mkdir -p "$P/step600/model_and_optim"; echo x > "$P/step600/model_and_optim/__0_0.distcp"
out=$("$CKPT" clean --min-age 0 -n --keep-last 2 "$P" | cut -f1,3)
check "keep-last dry" "keep	complete checkpoint step500-unsharded (unsharded); would prune step0-unsharded, step100-unsharded, step200-unsharded, step300-unsharded" "$out"
out=$("$CKPT" clean --min-age 0 --keep-last 1 --keep-every 200 --json "$P" | python3 -c 'import json,sys; o=json.load(sys.stdin); print(o["action"], o["pruned"])')
check "keep-every" "keep ['step100-unsharded', 'step300-unsharded']" "$out"
check "pruned state" "step0-unsharded step200-unsharded step400-unsharded step500-unsharded step600" "$(ls "$P" | grep step | tr '\n' ' ' | sed 's/ $//')"

# --- two cleaners on the same runs at once (GNU parallel): never both fail
for i in $(seq 15); do
    python3 "$SRC/tests/support/gen_runs.py" "$T/c$i" >/dev/null
    ( "$CKPT" clean --min-age 0 "$T/c$i/2871002" "$T/c$i/2871003" >/dev/null 2>&1; echo $? > "$T/c$i.a" ) &
    ( "$CKPT" clean --min-age 0 "$T/c$i/2871002" "$T/c$i/2871003" >/dev/null 2>&1; echo $? > "$T/c$i.b" ) &
    wait
    ok=0
    [ "$(cat "$T/c$i.a")" = 0 ] && ok=1
    [ "$(cat "$T/c$i.b")" = 0 ] && ok=1
    gone=$([ ! -e "$T/c$i/2871002" ] && [ ! -e "$T/c$i/2871003" ] && echo yes)
    check "concurrent $i: one succeeds, runs gone" "1 yes" "$ok $gone"
done

# --- an unreadable directory is an error, never a verdict (as an
# unprivileged user: root reads everything)
# Root runs ckpt as nobody (setpriv, util-linux); anyone else as
# themselves.
asuser=()
[ "$(id -u)" = 0 ] && asuser=(setpriv --reuid=65534 --regid=65534 --clear-groups)
{
    U=$(mktemp -d /tmp/ckpt-unreadable-XXXXXX)
    chmod 755 "$U"
    python3 "$SRC/tests/support/gen_runs.py" "$U/g" >/dev/null
    chmod -R a+rX "$U/g"
    chmod 000 "$U/g/2871003/step500"
    # the checkout may sit in a private directory: run a copy of the binary
    cp "$CKPT" "$U/ckpt" && chmod 755 "$U/ckpt"
    before=$(tree "$U/g")
    out=$(cd "$U/g" && "${asuser[@]}" "$U/ckpt" clean --min-age 0 2871003 \
          2>/dev/null)
    check "unreadable exit" 1 $?
    check "unreadable dir" "error	2871003	open directory '2871003/step500': Permission denied" "$out"
    check "unreadable: nothing deleted" "$before" "$(tree "$U/g")"
    chmod -R u+rwx "$U"; rm -rf "$U"
}

# --- the live-run guard (--min-age, default 1d): a run or archive written
# to recently may still be growing and is skipped whatever it holds
# The guard reads the newer of mtime and ctime; touch -d cannot put a
# ctime in the past, so these runs see every ctime 10 days earlier
# (tests/support/age_preload.c).
old() {
    LD_PRELOAD="${CKPT_BUILD:-$SRC/build}/libage_preload.so" CKPT_TEST_OLD_CTIME=864000 \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        "$CKPT" "$@"
}
python3 "$SRC/tests/support/gen_runs.py" "$T/live" --archives >/dev/null
L="$T/live"
find "$L" -exec touch -h -d '2 days ago' {} +
touch -d '3 min ago' "$L/2871003/step500/model_and_optim/__0_0.distcp"
touch -d '3 hours ago' "$L/2871006/step1500/model_and_optim/.metadata"
touch -d '10 min ago' "$L/2871102.tar.gz"
out=$(cd "$L" && old clean -n 2871002 2871003 2871006 2871001 2871102.tar.gz 2871107.tar.bz2 2>/dev/null)
check "live default 1d" "would-delete	2871002	$R2
skip	2871003	live: newest file written 3 min ago
skip	2871006	live: newest file written 3 h ago
keep	2871001	$R1
skip	2871102.tar.gz	live: archive written 10 min ago
would-delete	2871107.tar.bz2	$R4" "$out"
out=$(cd "$L" && old clean -n --min-age 2h 2871003 2871006 2>/dev/null)
check "live 2h" "skip	2871003	live: newest file written 3 min ago
would-delete	2871006	$R6" "$out"
out=$(cd "$L" && old clean -n --min-age 90m 2871006 && old clean -n --min-age 10800 2871006 2>/dev/null)
check "live 90m, 10800 s" "would-delete	2871006	$R6
would-delete	2871006	$R6" "$out"
out=$(cd "$L" && old clean -n --min-age 4h 2871006 2>/dev/null)
check "live 4h" "skip	2871006	live: newest file written 3 h ago" "$out"
err=$(cd "$L" && old clean -n 2871003 2>&1 >/dev/null | sed -E 's/^[0-9TZ:-]+ //')
check "live: the row, and (every run skipped as live) one hint" "ckpt: hint: the run was skipped as live: written to within --min-age (1d, the default); a shorter one takes runs written to more recently ('--min-age 1h'; '--min-age 0' once nothing writes to them)" "$err"
before=$(tree "$L")
(cd "$L" && old clean 2871003 2871006 2871102.tar.gz >/dev/null 2>&1)
check "live exit" 0 $?
check "live runs untouched" "$before" "$(tree "$L")"
# ... and by ctime: a run copied in by a tool that keeps mtimes (tar x,
# rsync -a, cp -p) looks days old while half there, but every file it
# wrote has ctime now. A bad run and an archive with mtimes 3 days back:
# live, never deleted.
python3 "$SRC/tests/support/gen_runs.py" "$T/copied" --archives >/dev/null
find "$T/copied" -exec touch -h -d '3 days ago' {} +
before=$(tree "$T/copied")
secs() { sed 's/written [0-9]* s ago/written N s ago/'; }
out=$(cd "$T/copied" && "$CKPT" clean -n 2871002 2871102.tar.gz 2>/dev/null | secs)
check "ctime: half-copied run live" "skip	2871002	live: newest file written N s ago
skip	2871102.tar.gz	live: archive written N s ago" "$out"
out=$(cd "$T/copied" && "$CKPT" clean 2871002 2871102.tar.gz 2>/dev/null)
check "ctime: exit" 0 $?
check "ctime: real run as -n" "skip	2871002	live: newest file written N s ago
skip	2871102.tar.gz	live: archive written N s ago" "$(secs <<<"$out")"
check "ctime: nothing deleted" "$before" "$(tree "$T/copied")"
"$CKPT" clean --min-age 5x "$L/2871002" >/dev/null 2>&1; check "bad --min-age" 2 $?
"$CKPT" clean --min-age -1 "$L/2871002" >/dev/null 2>&1; check "negative --min-age" 2 $?

# --- an interrupted delete (SIGKILL after the rename that commits it) is
# finished by a rerun; temp siblings of live pids or other hosts stay.
python3 "$SRC/tests/support/gen_runs.py" "$T/k" >/dev/null
sleep 0 & dead=$!; wait $dead
H=$(hostname)
mv "$T/k/2871004" "$T/k/.2871004.ckpt-del-$H-$dead"
rm -r "$T/k/.2871004.ckpt-del-$H-$dead/wandb"
out=$(cd "$T/k" && "$CKPT" clean --min-age 0 -n 2871004 2>/dev/null)
check "interrupted delete -n" "would-delete	2871004	finishes an interrupted delete (.2871004.ckpt-del-$H-$dead)" "$out"
test -d "$T/k/.2871004.ckpt-del-$H-$dead"; check "interrupted delete -n keeps" 0 $?
out=$(cd "$T/k" && "$CKPT" clean --min-age 0 2871004 2>/dev/null)
check "interrupted delete finished" "delete	2871004	finished an interrupted delete (.2871004.ckpt-del-$H-$dead)" "$out"
test -e "$T/k/.2871004.ckpt-del-$H-$dead"; check "interrupted delete gone" 1 $?
# a dead delete's sibling that now holds a complete checkpoint (a trainer
# that kept the directory open wrote one after the rename) is judged again
# and left: error, never delete
mv "$T/k/2871002" "$T/k/.2871002.ckpt-del-$H-$dead"
cp -r "$T/k/2871001/step1000" "$T/k/.2871002.ckpt-del-$H-$dead/step1000"
out=$(cd "$T/k" && "$CKPT" clean --min-age 0 2871002 2>/dev/null)
check "interrupted delete, complete checkpoint since" "error	2871002	.2871002.ckpt-del-$H-$dead (an interrupted delete) now holds complete checkpoint step1000 (dcp); left in place" "$out"
test -d "$T/k/.2871002.ckpt-del-$H-$dead/step1000/model_and_optim"; check "interrupted delete, complete checkpoint kept" 0 $?
rm -r "$T/k/.2871002.ckpt-del-$H-$dead/step1000"
# ... and one written to within --min-age is live
touch "$T/k/.2871002.ckpt-del-$H-$dead/config.yaml"
out=$(cd "$T/k" && "$CKPT" clean --min-age 1h 2871002 2>/dev/null | secs)
check "interrupted delete, written since" "skip	2871002	live: newest file written N s ago" "$out"
test -d "$T/k/.2871002.ckpt-del-$H-$dead"; check "interrupted delete, written since kept" 0 $?
mv "$T/k/.2871002.ckpt-del-$H-$dead" "$T/k/2871002"
mv "$T/k/2871002" "$T/k/.2871002.ckpt-del-$H-$$"
mv "$T/k/2871003" "$T/k/.2871003.ckpt-del-otherhost-$dead"
before=$(tree "$T/k")
out=$(cd "$T/k" && "$CKPT" clean --min-age 0 2871002 2871003 2>/dev/null)
check "live pid / other host exit" 0 $?
check "live pid / other host untouched" "$before" "$(tree "$T/k")"
# (another cleaner is deleting them: GNU parallel over the same runs)
check "live pid / other host verdicts" "skip	2871002	being deleted by another process (.2871002.ckpt-del-$H-$$)
skip	2871003	being deleted by another process (.2871003.ckpt-del-otherhost-$dead)" "$out"
out=$(cd "$T/k" && "$CKPT" clean --min-age 0 2871099 2>/dev/null)
check "gone without a sibling: error" "error	2871099	stat '2871099': No such file or directory" "$out"
cp -r "$T/k/2871001/step0" "$T/k/2871001/.step0.ckpt-del-$H-$dead"
rm -r "$T/k/2871001/step0"
out=$(cd "$T/k" && "$CKPT" clean --min-age 0 -n 2871001 2>/dev/null)
check "interrupted prune -n" "keep	2871001	$R1; would finish an interrupted prune of step0" "$out"
out=$(cd "$T/k" && "$CKPT" clean --min-age 0 2871001 2>/dev/null)
check "interrupted prune" "keep	2871001	$R1; finished an interrupted prune of step0" "$out"
test -e "$T/k/2871001/.step0.ckpt-del-$H-$dead"; check "interrupted prune gone" 1 $?
# a pruned checkpoint goes through the same rename
out=$(cd "$T/k" && "$CKPT" clean --min-age 0 --keep-last 1 2871001 2>/dev/null)
check "prune leaves no temp" 0 "$(ls -A "$T/k/2871001" | grep -c ckpt-del)"

# --- older Orbax steps on local disk have no commit marker (they were
# committed by renaming the tmp directory): unknown, so the run is an
# error, never deleted; a run with a marked step > 0 is still kept.
/usr/bin/python3 "$SRC/tests/support/make_orbax.py" "$T/ob" >/dev/null
rm -f "$T/ob/run/"*/_CHECKPOINT_METADATA "$T/ob/run/"*/commit_success.txt
rm -r "$T/ob/run/4"
cp -r "$T/ob/run" "$T/ob/run2"
mkdir "$T/ob/run2/5"; cp -r "$T/ob/run/3/default" "$T/ob/run2/5/"
echo '{"commit_timestamp_nsecs": 1}' > "$T/ob/run2/5/_CHECKPOINT_METADATA"
before=$(tree "$T/ob")
OU="cannot tell whether Orbax step 3 is complete (no commit marker: older Orbax commits by rename)"
out=$(cd "$T/ob" && "$CKPT" clean --min-age 0 --force -n run run2 2>/dev/null)
check "orbax unmarked -n" "error	run	$OU
keep	run2	complete checkpoint 5 (orbax)" "$out"
out=$(cd "$T/ob" && "$CKPT" clean --min-age 0 --force run run2 2>/dev/null)
check "orbax unmarked exit" 1 $?
check "orbax unmarked" "error	run	$OU
keep	run2	complete checkpoint 5 (orbax)" "$out"
check "orbax unmarked untouched" "$before" "$(tree "$T/ob")"
# a step whose OCDBT database is missing a data file is still incomplete
rm -r "$T/ob/run/2" "$T/ob/run/3"
rm "$T/ob/run/1/state/d/"*
out=$(cd "$T/ob" && "$CKPT" clean --min-age 0 --force -n run 2>/dev/null)
check "orbax unmarked damaged" "would-delete" "$(cut -f1 <<<"$out")"

# --- usage errors
"$CKPT" clean >/dev/null 2>&1; check "no args" 2 $?
"$CKPT" clean --min-age 0 --bogus x >/dev/null 2>&1; check "bad option" 2 $?
"$CKPT" clean --min-age 0 --max-archive-size 5Q x >/dev/null 2>&1; check "bad size" 2 $?
"$CKPT" clean --help | head -1 > "$T/h"; check "help" "usage: ckpt clean [options] RUN..." "$(cat "$T/h")"
check "help command" "$("$CKPT" clean --help)" "$("$CKPT" help clean)"

finish
