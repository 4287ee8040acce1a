#!/usr/bin/env bash
# upload_local.sh - `ckpt upload` between local paths: trees, reruns,
# dry runs, single files, bad input (missing SRC, DEST a file, DEST inside
# SRC, symlinks and their loops, an unreadable file), --wandb-map and
# --logs placement, --delete-source, and a copy killed with -9 resumed
# without leaving temporary files.
. "$(dirname "$0")/../support/lib.sh"
# ckpt upload's rows without the total row that ends them; its status.
export CKPT_STATE_DIR=$T/state
cd "$T" || exit 1
mkdir -p src/a/b
printf 'one\n' >src/a/one.txt
printf 'two\n' >"src/a/b/t w+o=.txt"
: >src/a/b/empty
head -c 20000000 /dev/urandom >src/big.bin
sorted() { LC_ALL=C sort; }

# --- a tree, then a rerun
out=$(up -v src dst 2>err)
check "copy exit" 0 $?
check "copy rows" "copy	src/a/b/empty	dst/a/b/empty
copy	src/a/b/t w+o=.txt	dst/a/b/t w+o=.txt
copy	src/a/one.txt	dst/a/one.txt
copy	src/big.bin	dst/big.bin" "$(echo "$out" | sorted)"
check "copy identical" "" "$(diff -r src dst)"
check "mtimes kept" "$(stat -c %Y src/big.bin)" "$(stat -c %Y dst/big.bin)"
out=$(up -v src dst 2>err)
check "rerun rows" "skip	src/a/b/empty	dst/a/b/empty	same size and modification time
skip	src/a/b/t w+o=.txt	dst/a/b/t w+o=.txt	same size and modification time
skip	src/a/one.txt	dst/a/one.txt	same size and modification time
skip	src/big.bin	dst/big.bin	same size and modification time" \
    "$(echo "$out" | sorted)"
out=$(up -q src dst)
check "default output: nothing when all is well" "" "$out"

# Same size and mtime but other bytes: only --checksum notices.
printf 'ONE\n' >dst/a/one.txt
touch -r src/a/one.txt dst/a/one.txt
out=$(up -v --checksum src dst 2>err | grep -v '^skip\|^total')
check "--checksum finds the change, a conflict without --overwrite" "error	src/a/one.txt	dst/a/one.txt	conflict: dst/a/one.txt already exists at DEST with different bytes; not replaced (DEST keeps its copy: it may be the only one)" "$out"
check "--checksum without --overwrite: DEST kept" "ONE" "$(cat dst/a/one.txt)"
out=$(up -v --checksum --overwrite src dst 2>err | grep -v '^skip\|^total')
check "--checksum --overwrite replaces it" "copy	src/a/one.txt	dst/a/one.txt" "$out"
check "--checksum repaired it" "" "$(diff -r src dst)"

# --- dry run: says, changes nothing
printf 'new\n' >src/a/new.txt
out=$(up -n src dst 2>err | sorted)
check "dry-run rows" "skip	src/a/b/empty	dst/a/b/empty	same size and modification time
skip	src/a/b/t w+o=.txt	dst/a/b/t w+o=.txt	same size and modification time
skip	src/a/one.txt	dst/a/one.txt	same size and modification time
skip	src/big.bin	dst/big.bin	same size and modification time
would-copy	src/a/new.txt	dst/a/new.txt	not at DEST" "$out"
check "dry-run wrote nothing" "no" "$([ -e dst/a/new.txt ] && echo yes || echo no)"
out=$(up -n --json src dst 2>/dev/null | tail -1 |
      python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["dry_run"], d["copy"], d["skip"])')
check "dry-run summary" "True 1 4" "$out"

# --- single files
"$CKPT" upload -q src/a/one.txt dst2/
check "file into DEST/" "one" "$(cat dst2/one.txt)"
"$CKPT" upload -q src/a/one.txt dst2/renamed.txt
check "file to a name" "one" "$(cat dst2/renamed.txt)"
"$CKPT" upload -q src/a/one.txt src/a/new.txt dst3
check "several files go below DEST" "f ./new.txt 4
f ./one.txt 4" "$(tree dst3 | sed 's/^d .*//' | grep .)"

# --- bad input: clear one-line errors
out=$(up nothere dstx 2>err)
check "missing SRC exit" 1 $?
check "missing SRC row" "error	nothere	-	SRC 'nothere' does not exist" "$out"
printf 'x' >afile
out=$(up src afile 2>err)
check "DEST a file exit" 1 $?
check "DEST a file row" "error	src	afile	DEST 'afile' is a file, not a directory" "$out"
out=$(up src src/a 2>err)
check "DEST inside SRC" "error	src	-	DEST 'src/a' is inside SRC 'src'" "$out"
"$CKPT" upload src 2>err
check "usage exit" 2 $?
check "usage message" "ckpt upload: error: give SRC and DEST
usage: ckpt cp [options] SRC... DEST" "$(cat err)"
"$CKPT" upload --part-size 1M src dsty 2>err
check "part size bounds" "ckpt upload: error: --part-size must be between 5M and 5G" "$(head -1 err)"
"$CKPT" upload --extract src/a/one.txt dsty >out 2>err
check "--extract of a non-archive" "error	src/a/one.txt	dsty	--extract: 'src/a/one.txt' is not an archive (.tar, .tar.gz, .tar.zst, .zip, ...)" "$(grep -v "^total	" out)"

# --- symlinks: not followed by default; with -L, loops are errors
mkdir -p ln/d && printf 'x\n' >ln/d/f && ln -s d/f ln/flink && ln -s .. ln/d/up &&
    ln -s missing ln/broken
out=$(up ln lndst 2>err)
check "links default exit" 0 $?
check "links default warnings" "ckpt: warning: ln/broken: symbolic link not followed (use --follow-links)
ckpt: warning: ln/d/up: symbolic link not followed (use --follow-links)
ckpt: warning: ln/flink: symbolic link not followed (use --follow-links)" \
    "$(grep warning err | sed 's/^[0-9TZ:-]* //' | sorted)"
check "links default copied" "f ./d/f 2" "$(tree lndst | grep '^f')"
out=$(up -L ln lndst2 2>err)
check "links -L exit" 1 $?
check "links -L rows" "error	ln/broken	-	'ln/broken': broken symbolic link
error	ln/d/up	-	'ln/d/up': symbolic link loop (points to '$T/ln', which contains it)" \
    "$(echo "$out" | sorted)"
check "links -L copied the file link" "f ./d/f 2
f ./flink 2" "$(tree lndst2 | grep '^f')"

# --- an unreadable file: reported, the rest arrives (as an unprivileged
# user: root reads everything)
# Root runs ckpt as nobody (setpriv, util-linux); anyone else as
# themselves.
asuser=()
[ "$(id -u)" = 0 ] && asuser=(setpriv --reuid=65534 --regid=65534 --clear-groups)
{
    U=$(mktemp -d /tmp/ckpt-unreadable-XXXXXX)
    chmod 755 "$U"
    mkdir -p "$U/s/d" && printf 'ok\n' >"$U/s/d/ok" && printf 'no\n' >"$U/s/no"
    chmod 000 "$U/s/no"
    chmod -R a+rX "$U/s/d" && chmod a+rx "$U/s" && chmod a+rwx "$U"
    cp "$CKPT" "$U/ckpt" && chmod 755 "$U/ckpt"
    out=$(cd "$U" && CKPT_STATE_DIR=$U/state "${asuser[@]}" "$U/ckpt" \
          upload s d 2>/dev/null)
    check "unreadable exit" 1 $?
    out=$(grep -v '^total	' <<<"$out")
    check "unreadable row" "error	s/no	d/no	open 's/no': Permission denied" "$out"
    check "the rest arrived" "ok" "$(cat "$U/d/d/ok")"
    chmod -R u+rwx "$U"; rm -rf "$U"
}

# --- --wandb-map and --logs
mkdir -p runs/1234567/step10 runs/local1 runs/dup logs/2024
printf 'cfg\n' >runs/1234567/config.yaml
printf 'w\n' >runs/1234567/step10/model.pt
printf 'l\n' >runs/local1/config.yaml
printf 'd\n' >runs/dup/config.yaml
printf 'a\n' >logs/slurm-1234567.out
printf 'b\n' >logs/2024/olmo-1234567-rank0.log
printf 'c\n' >logs/slurm-12345678.out
printf 'e\n' >logs/train-ef56gh78.log
printf '1234567\tai2-llm/olmo-small/ab12cd34\tslurm job\ndup\t-\tambiguous: 2 runs\n{"run":"local1","path":"ai2-llm/olmo-small/ef56gh78"}\n' >map.tsv
out=$(up --wandb-map map.tsv --logs logs runs/1234567 runs/local1 runs/dup wdst 2>err)
check "wandb-map exit" 1 $?
check "wandb-map unmapped run" "error	runs/dup	-	run 'dup' is unmapped in the W&B map 'map.tsv': ambiguous: 2 runs" "$out"
check "wandb-map placement" "f ./ai2-llm/olmo-small/ab12cd34/config.yaml 4
f ./ai2-llm/olmo-small/ab12cd34/logs/2024/olmo-1234567-rank0.log 2
f ./ai2-llm/olmo-small/ab12cd34/logs/slurm-1234567.out 2
f ./ai2-llm/olmo-small/ab12cd34/step10/model.pt 2
f ./ai2-llm/olmo-small/ef56gh78/config.yaml 2
f ./ai2-llm/olmo-small/ef56gh78/logs/train-ef56gh78.log 2" "$(tree wdst | grep '^f')"

# --- --delete-source: only when everything arrived
cp -a runs/1234567 mv1
"$CKPT" upload -q --delete-source --wandb-map map.tsv runs/1234567 runs/nothere wdst2 >out 2>err
check "delete refused after a failure" "yes" "$([ -e runs/1234567/config.yaml ] && echo yes || echo no)"
out=$(up -v --delete-source --logs logs --wandb-map map.tsv runs/1234567 wdst2 2>err)
check "delete exit" 0 $?
check "delete rows" "delete	runs/1234567/config.yaml	-
delete	runs/1234567/step10/model.pt	-" "$(echo "$out" | grep '^delete' | sorted)"
check "run directory gone" "no" "$([ -e runs/1234567 ] && echo yes || echo no)"
check "logs kept" "a" "$(cat logs/slurm-1234567.out)"
check "DEST holds the run" "" "$(diff -r mv1 wdst2/ai2-llm/olmo-small/ab12cd34 | grep -v '^Only in wdst2.*: logs$')"

# --- --delete-source re-checks each source right before its delete: z,
# rewritten in place with its mtime put back (the change shim, at the
# first unlink below the source: a's) after it was copied and verified,
# stays with its new bytes; DEST keeps what was copied
mkdir -p rc/src && printf 'aaaa\n' >rc/src/a && printf 'zzzz\n' >rc/src/z
out=$(LD_PRELOAD=${CKPT_BUILD:-$SRC/build}/libchange_preload.so \
      CKPT_TEST_CHANGE=$T/rc/src/z CKPT_TEST_CHANGE_MODE=rewrite \
      CKPT_TEST_CHANGE_UNDER=$T/rc/src \
      ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
      "$CKPT" upload --transfers 1 --delete-source rc/src rc/dst 2>/dev/null)
check "re-check exit" 1 $?
check "re-check row" "error	rc/src/z	-	not deleted: rc/src/z: changed during upload (ctime differs)" "$(grep '^error' <<<"$out")"
check "re-check: z kept with its new bytes, a gone" "f ./z 5" "$(tree rc/src | grep '^f')"
check "re-check: z rewritten" "yes" "$([ "$(cat rc/src/z)" != zzzz ] && echo yes)"
check "re-check: DEST has what was copied" "zzzz" "$(cat rc/dst/z)"

# --- a step being deleted (renamed aside by clean or unshard
# --delete-sharded, or left so by a killed one) is not content
mkdir -p deld/step10 deld/.step20.ckpt-del-somehost-4242
printf 'a' >deld/step10/model.pt; printf 'b' >deld/.step20.ckpt-del-somehost-4242/model.pt
out=$(up deld deldst 2>err)
check "del sibling: exit" 0 $?
check "del sibling: not copied" "f ./step10/model.pt 1" "$(tree deldst | grep '^f')"
check "del sibling: warned" "1" "$(grep -c 'deld/.step20.ckpt-del-somehost-4242: left by an interrupted delete; not copied' err)"

# --- killed mid-copy: the rerun finishes it, no temporary file is left
mkdir big && head -c 300000000 /dev/urandom >big/z
"$CKPT" upload -q --part-size 5M --transfers 2 big bigdst & pid=$!
sleep 0.1; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
"$CKPT" upload -q big bigdst
check "killed copy finished" "" "$(cmp big/z bigdst/z)"
check "no temporary files left" "" "$(find bigdst -name '.ckpt-*')"
finish
