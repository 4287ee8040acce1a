#!/usr/bin/env bash
# ctest-cost: 3
# upload_wmap_archive.sh - `upload --wandb-map` of an archive SRC without
# --extract: the run id is the archive's stem (as map-wandb maps it), and
# the archive lands whole inside the run's directory,
# DEST/ENTITY/PROJECT/RUN_ID/NAME. An archive whose stem is not in the map
# is refused with the stem as the run's name.
. "$(dirname "$0")/../support/lib.sh"
# ckpt upload's rows without the total row that ends them; its status.
export CKPT_STATE_DIR=$T/state
mkdir -p "$T/r" "$T/src"
echo hi >"$T/r/a"
tar czf "$T/src/1234567.tar.gz" -C "$T" r
printf '1234567\tent/proj/abc123\tslurm\n' >"$T/map.tsv"
printf '999\tent/proj/x\tslurm\n' >"$T/other.tsv"

out=$(up -q --wandb-map "$T/map.tsv" "$T/src/1234567.tar.gz" \
      "$T/dest" 2>"$T/err")
check "archive mapped exit" 0 $?
check "archive mapped rows" "" "$out"
check "archive placed" "d ./ent
d ./ent/proj
d ./ent/proj/abc123
f ./ent/proj/abc123/1234567.tar.gz $(stat -c %s "$T/src/1234567.tar.gz")" \
    "$(tree "$T/dest")"
cmp -s "$T/src/1234567.tar.gz" "$T/dest/ent/proj/abc123/1234567.tar.gz"
check "archive bytes" 0 $?

out=$(up -q --wandb-map "$T/other.tsv" \
      "$T/src/1234567.tar.gz" "$T/dest2" 2>"$T/err")
check "archive unmapped exit" 1 $?
check "archive unmapped row" "error	$T/src/1234567.tar.gz	-	run '1234567' is not in the W&B map '$T/other.tsv'" "$out"
check "nothing written" "" "$(ls "$T/dest2" 2>/dev/null)"

# With --extract the contents go to the run's directory as before.
out=$(up -q --extract --wandb-map "$T/map.tsv" \
      "$T/src/1234567.tar.gz" "$T/dest3" 2>"$T/err")
check "extract exit" 0 $?
check "extract placed" "hi" "$(cat "$T/dest3/ent/proj/abc123/a" 2>&1)"
finish
