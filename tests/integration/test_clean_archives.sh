#!/usr/bin/env bash
# ckpt clean on damaged and unusual tar archives (tests/support/
# make_damaged.py): an archive is judged bad only when it was read to a
# proper end; a complete checkpoint found past damage (as `tar -i` finds
# it) keeps it; everything else is an error and the file stays.
source "$(dirname "$0")/../support/lib.sh"

python3 "$SRC/tests/support/make_damaged.py" "$T/d"
cd "$T/d"

KEEP="complete checkpoint step100 (unsharded)"
NOEOA="no end-of-archive marker (the archive is cut short, or still being written)"
# what `tar -i` lists past the damage: the checkpoint is really there
check "tar -i sees the checkpoint past the hole" "run/step100/model.pt" \
    "$(tar -tif hole.tar 2>/dev/null | grep model.pt)"

names="good.tar hole.tar zhdr.tar garbled.tar hole-bad.tar cat.tar cat-bad.tar junk.tar
cut.tar cut-ok.tar cut.tar.gz badcrc.tar.gz tail.tar.gz hardlink.tar
dangling.tar partial.tar"
want="keep	good.tar	$KEEP
keep	hole.tar	$KEEP
keep	zhdr.tar	$KEEP
keep	garbled.tar	$KEEP
error	hole-bad.tar	hole-bad.tar: data after the end-of-archive marker at offset 7168
keep	cat.tar	$KEEP
error	cat-bad.tar	cat-bad.tar: data after the end-of-archive marker at offset 35328
error	junk.tar	junk.tar: data after the end-of-archive marker at offset 35328
error	cut.tar	cut.tar: $NOEOA
keep	cut-ok.tar	$KEEP
error	cut.tar.gz	cut.tar.gz: $NOEOA
error	badcrc.tar.gz	badcrc.tar.gz: gzip checksum mismatch (CRC-32 or length in the trailer does not match the data)
error	tail.tar.gz	tail.tar.gz: 100 bytes after the end of the compressed stream
keep	hardlink.tar	$KEEP
error	dangling.tar	dangling.tar: hard link 'run/step100/model.pt' names 'run/blob/gone.bin', which is not a file in the archive
error	partial.tar	partial.tar: $NOEOA"
before=$(tree .)
# shellcheck disable=SC2086
out=$("$CKPT" clean -n --min-age 0 $names 2>/dev/null)
check "dry-run exit" 1 $?
check "dry-run verdicts" "$want" "$out"
# shellcheck disable=SC2086
out=$("$CKPT" clean --min-age 0 $names 2>/dev/null)
check "clean exit" 1 $?
check "clean verdicts (the same)" "$want" "$out"
check "nothing deleted" "$before" "$(tree .)"

# the same, compressed: the tar inside is read on past its damage too
gzip -c hole.tar > hole.tar.gz && xz -c cat-bad.tar > cat-bad.tar.xz &&
    zstd -q -c garbled.tar -o garbled.tar.zst
out=$("$CKPT" clean --min-age 0 hole.tar.gz cat-bad.tar.xz garbled.tar.zst 2>/dev/null)
check "compressed damaged" "keep	hole.tar.gz	$KEEP
error	cat-bad.tar.xz	cat-bad.tar.xz: data after the end-of-archive marker at offset 35328
keep	garbled.tar.zst	$KEEP" "$out"
test -f cat-bad.tar.xz; check "compressed damaged: kept on disk" 0 $?

# the extracted hard-link archive is judged the same as the archive
mkdir x && tar -xf hardlink.tar -C x
check "extracted hard link" "keep	x/run	$KEEP" \
    "$("$CKPT" clean -n --min-age 0 x/run 2>/dev/null)"

# a tar still being written: refused while the writer pauses between
# members; once finished, judged (and here kept)
cp partial.tar growing.tar
check "growing: refused" "error	growing.tar	growing.tar: $NOEOA" \
    "$("$CKPT" clean --min-age 0 growing.tar 2>/dev/null)"
tail -c +$(($(stat -c %s partial.tar) + 1)) good.tar >> growing.tar
cmp -s growing.tar good.tar; check "growing: finished by the writer" 0 $?
check "growing: finished" "keep	growing.tar	$KEEP" \
    "$("$CKPT" clean --min-age 0 growing.tar 2>/dev/null)"

# a properly ended archive without a checkpoint is still deleted, plain
# and compressed
python3 - <<'PY'
import gzip, io, tarfile
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as tf:
    for name, data in (("run/config.yaml", b"a: 1\n"), ("run/wandb/x", b"y")):
        info = tarfile.TarInfo(name); info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
open("bad.tar", "wb").write(buf.getvalue())
open("bad.tar.gz", "wb").write(gzip.compress(buf.getvalue()))
PY
# bytes freed: per run in JSON ("bytes"), the total on stderr
mkdir -p dirrun/wandb && echo "a: 1" > dirrun/config.yaml && head -c 1000 /dev/urandom > dirrun/wandb/log
want_bytes="$(stat -c %s bad.tar) $(stat -c %s bad.tar.gz) 1005"
out=$("$CKPT" clean -n --json --min-age 0 bad.tar bad.tar.gz dirrun good.tar 2>"$T/err" |
      python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["freed"]) for l in sys.stdin))')
check "bytes per run" "$want_bytes 0" "$out"
total=$(( $(stat -c %s bad.tar) + $(stat -c %s bad.tar.gz) + 1005 ))
check "would free total" "ckpt: would free $(python3 -c "print('%.1f KiB' % ($total / 1024))") in 3 runs" \
    "$(sed 's/^[0-9TZ:-]* //' "$T/err")"
"$CKPT" clean --min-age 0 dirrun 2>"$T/err" >/dev/null
check "freed total" "ckpt: freed 1005 B in 1 run" "$(sed 's/^[0-9TZ:-]* //' "$T/err")"
out=$("$CKPT" clean --min-age 0 bad.tar bad.tar.gz 2>/dev/null)
check "proper bad archives go" "delete	bad.tar	no checkpoint
delete	bad.tar.gz	no checkpoint" "$out"
test ! -e bad.tar && test ! -e bad.tar.gz; check "deleted" 0 $?

finish
