#!/usr/bin/env bash
# ctest-cost: 15
# ckpt clean on runs stored in S3 (s3rver behind the signature-verifying
# proxy): run prefixes and archive objects, exact verdicts, the exact objects
# left afterwards; a remote plain tar is classified from its headers only
# (bytes counted by the proxy).
source "$(dirname "$0")/../support/lib.sh"
source "$SRC/tests/support/s3env.sh"
s3env_start --bucket runs || exit 1
trap 's3env_stop; rm -rf "$T"' EXIT
aws() { command aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"; }

python3 "$SRC/tests/support/gen_runs.py" "$T/s" --archives
rm -f "$T/s/2871001/latest" # object stores have no symlinks
aws s3 cp --quiet --recursive "$T/s" s3://runs/scratch/

R1="complete checkpoint step1000-unsharded (unsharded)"
R2="no complete checkpoint with step > 0 (step0: step 0)"
R3="no complete checkpoint with step > 0 (step0: step 0; step500: model_and_optim/.metadata missing)"
R4="no checkpoint"
R5="complete checkpoint step3000-unsharded (unsharded)"
R6="no complete checkpoint with step > 0 (step1500: model_and_optim/__1_0.distcp truncated)"
NOTRUN="does not look like a run (no config.yaml with wandb/ or train_data/, and no checkpoint directory); use --force to clean it"

u=s3://runs/scratch
out=$("$CKPT" clean --min-age 0 -n $u/2871001 $u/2871002/ $u/2871003 $u/2871004 $u/2871005 \
      $u/2871006 $u/notes $u/2871101.tar $u/2871102.tar.gz $u/2871103.tar.zst \
      $u/2871105.zip $u/2871106.tar.xz $u/2871107.tar.bz2 $u/missing 2>/dev/null)
check "remote dry-run exit" 1 $?
check "remote dry-run verdicts" "keep	$u/2871001	$R1
would-delete	$u/2871002/	$R2
would-delete	$u/2871003	$R3
would-delete	$u/2871004	$R4
keep	$u/2871005	$R5
would-delete	$u/2871006	$R6
skip	$u/notes	$NOTRUN
keep	$u/2871101.tar	$R1
would-delete	$u/2871102.tar.gz	$R2
would-delete	$u/2871103.tar.zst	$R3
keep	$u/2871105.zip	$R5
would-delete	$u/2871106.tar.xz	$R6
would-delete	$u/2871107.tar.bz2	$R4
error	$u/missing	$u/missing: no such object or prefix" "$out"

# --- just uploaded: live (--min-age defaults to 1d), by LastModified
out=$("$CKPT" clean -n $u/2871002 2>/dev/null | sed 's/ [0-9]* s ago$/ N s ago/')
check "remote live" "skip	$u/2871002	live: newest file written N s ago" "$out"

listing() { aws s3 ls --recursive s3://runs/scratch/ | awk '{print $4}' | LC_ALL=C sort; }
before=$(listing)
"$CKPT" clean --min-age 0 $u/2871002 $u/2871003 $u/2871004 $u/2871006 $u/2871102.tar.gz \
    $u/2871103.tar.zst $u/2871106.tar.xz $u/2871107.tar.bz2 $u/2871001 \
    $u/2871101.tar >"$T/out" 2>/dev/null
check "remote clean exit" 0 $?
check "remote clean actions" "delete delete delete delete delete delete delete delete keep keep" \
    "$(cut -f1 "$T/out" | tr '\n' ' ' | sed 's/ $//')"
want=$(grep -v -e '^scratch/287100[2346]/' -e '^scratch/28711\(02\|03\|06\|07\)\.' <<<"$before")
check "objects left" "$want" "$(listing)"
check "kept run intact" "$(cd "$T/s" && find 2871001 -type f | LC_ALL=C sort)" \
    "$(aws s3 ls --recursive s3://runs/scratch/2871001/ | awk '{print $4}' | sed 's|^scratch/||' | LC_ALL=C sort)"

# --- a remote plain tar is judged from its member headers only
mkdir -p "$T/big/r/step7/model_and_optim" "$T/big/r/wandb"
cp "$T/s/2871001/config.yaml" "$T/big/r/"
cp -r "$T/s/2871001/step1000/model_and_optim/." "$T/big/r/step7/model_and_optim/"
for i in $(seq 40); do head -c 1000000 /dev/urandom > "$T/big/r/step7/blob$i"; done
(cd "$T/big" && tar cf big.tar r)
aws s3 cp --quiet "$T/big/big.tar" s3://runs/tars/big.tar
size=$(stat -c %s "$T/big/big.tar")
s3env_reset_stats >/dev/null
out=$("$CKPT" clean --min-age 0 -n s3://runs/tars/big.tar | cut -f1,3)
check "remote tar verdict" "keep	complete checkpoint step7 (dcp)" "$out"
fetched=$(s3env_stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["get_bytes"])')
echo "remote tar: fetched $fetched of $size bytes"
check "remote tar reads < 2% of the archive" 1 $((fetched * 50 < size))

# --- damaged archives: judged bad only when read to a proper end, also
# when the plain tar is read by ranged reads
python3 "$SRC/tests/support/make_damaged.py" "$T/d"
aws s3 cp --quiet --recursive "$T/d" s3://runs/damaged/
d=s3://runs/damaged
NOEOA="no end-of-archive marker (the archive is cut short, or still being written)"
KEEP="complete checkpoint step100 (unsharded)"
dlist() { aws s3 ls --recursive s3://runs/damaged/ | awk '{print $4}' | LC_ALL=C sort; }
dbefore=$(dlist)
out=$("$CKPT" clean --min-age 0 $d/hole.tar $d/garbled.tar $d/hole-bad.tar $d/cat.tar \
      $d/cat-bad.tar $d/cut.tar $d/cut.tar.gz $d/badcrc.tar.gz \
      $d/hardlink.tar $d/partial.tar 2>/dev/null)
check "remote damaged exit" 1 $?
check "remote damaged verdicts" "keep	$d/hole.tar	$KEEP
keep	$d/garbled.tar	$KEEP
error	$d/hole-bad.tar	$d/hole-bad.tar: data after the end-of-archive marker at offset 7168
keep	$d/cat.tar	$KEEP
error	$d/cat-bad.tar	$d/cat-bad.tar: data after the end-of-archive marker at offset 35328
error	$d/cut.tar	$d/cut.tar: $NOEOA
error	$d/cut.tar.gz	$d/cut.tar.gz: $NOEOA
error	$d/badcrc.tar.gz	$d/badcrc.tar.gz: gzip checksum mismatch (CRC-32 or length in the trailer does not match the data)
keep	$d/hardlink.tar	$KEEP
error	$d/partial.tar	$d/partial.tar: $NOEOA" "$out"
check "remote damaged: nothing deleted" "$dbefore" "$(dlist)"

# --- a checkpoint written while the run is being deleted survives: only
# the judged objects are deleted, and the run is then an error (the proxy
# stores the new object right before the DeleteObjects request)
aws s3 cp --quiet --recursive "$T/s/2871002" s3://runs/race/2871002/
judged=$(aws s3 ls --recursive s3://runs/race/ | awk '{print $4}' | LC_ALL=C sort)
s3env_faults '{"put_before_delete": {"path": "/runs/race/2871002/step1000/model.pt", "body": "weights"}}'
out=$("$CKPT" clean --min-age 0 s3://runs/race/2871002 2>/dev/null)
check "race exit" 1 $?
check "race row" "error	s3://runs/race/2871002	run changed during delete; left in place: step1000/model.pt" "$out"
check "race: the new object survives, the judged ones are gone" \
    "race/2871002/step1000/model.pt" \
    "$(aws s3 ls --recursive s3://runs/race/ | awk '{print $4}')"
check "race: the judged run had objects" 1 $(( $(wc -l <<<"$judged") > 3 ))

# --- refusing to delete a whole bucket: a bucket holding a bad run's
# files at its root is an error, never deleted
aws s3 mb --quiet s3://loose 2>/dev/null || aws s3 mb s3://loose >/dev/null
aws s3 cp --quiet --recursive "$T/s/2871002" s3://loose/
out=$("$CKPT" clean --min-age 0 --force s3://loose 2>/dev/null | cut -f1,3)
check "no whole-bucket delete" "error	refusing to delete a whole bucket ('s3://loose')" "$out"
# ... and a bucket of runs is judged run by run (issue 27: a directory
# or prefix that holds runs is never itself one run, --force or not)
out=$("$CKPT" clean -n --min-age 0 --force s3://runs 2>/dev/null | cut -f2 |
      grep -c -v '^s3://runs/.')
check "a bucket of runs: no row for the bucket itself" 0 "$out"

finish
