#!/usr/bin/env bash
# archives.sh - compressed run archives (issue 22): ckpt against the best
# command-line tools, in the same run, median of ROUNDS (default 3).
# Input: one run (config.yaml, wandb/, step1000 = a real torch 1.13 DCP
# checkpoint of STEP_MB MiB, default 256, 4 ranks, bench/gen_dcp_big.py:
# seeded normal bf16/fp32 tensors, random-ish but compressible) tarred
# and compressed four ways, made once under BENCH_DIR:
#   .tar.bz2 lbzip2 (-9)   .tar.gz pigz (-6)
#   .tar.xz  xz -T0 (-6, multi-block)   .tar.zst zstd -T0 (-3)
# For each kind:
#   (a) ls      `ckpt ls ARCHIVE` against the decompressor alone writing
#               to /dev/null (lbzip2 -dc, pigz -dc, xz -T0 -dc, zstd -dc)
#   (b) process `ckpt process --no-wandb --keep-source --min-age 0
#               ARCHIVE --dest DIR` against the manual route: the parallel
#               decompressor | tar x, then the same `ckpt process` of the
#               extracted run (PROCESS=0 skips (b))
#   (c) S3=1: (b) with the archive in a bucket of a local s3rver
#               (connected directly, as bench/upload.sh): `ckpt process
#               s3://bench/ARCHIVE` against `aws s3 cp s3://... - |
#               decompressor | tar x`, then `ckpt process DIR`
# Peak RSS of each ckpt (/usr/bin/time -f %M, the median round's worst).
# Every result is checked: process's DEST holds the same files with the
# same bytes as the manual route's.
#   bash bench/archives.sh             (build/ckpt)
#   STEP_MB=256 ROUNDS=3 BENCH_DIR=/tmp/ckpt-bench-archives bash bench/archives.sh
#   KINDS="xz zst" bash bench/archives.sh   only these kinds
#   S3=1 bash bench/archives.sh             also (c), from a local s3rver
#   bash bench/archives.sh --install   apt-get the tools it compares with
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ "${1:-}" = "--install" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends lbzip2 pigz zstd xz-utils time tar
    exit 0
fi
for t in lbzip2 pigz zstd xz /usr/bin/time; do
    command -v "$t" >/dev/null ||
        { echo "archives.sh: $t missing (bash bench/archives.sh --install)" >&2; exit 1; }
done
CKPT=$(realpath "${CKPT:-build/ckpt}")
MB=${STEP_MB:-256}
R=${ROUNDS:-3}
DATA=${BENCH_DIR:-/tmp/ckpt-bench-archives}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-bench-arc.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export CKPT_STATE_DIR=$tmp/state
RUN=3200001

src=$DATA/src-$MB
if [ ! -f "$src/$RUN/step1000/.metadata" ]; then
    rm -rf "$src" "$DATA/gen" && mkdir -p "$src/$RUN/wandb"
    /usr/bin/python3 bench/gen_dcp_big.py "$DATA/gen" --size-mb "$MB" --ranks 4 >/dev/null
    mv "$DATA/gen" "$src/$RUN/step1000"
    printf 'run_name: bench\nsave_folder: /scratch/%s\n' "$RUN" >"$src/$RUN/config.yaml"
    printf 'log\n' >"$src/$RUN/wandb/output.log"
    find "$src" -exec touch -h -d '3 days ago' {} +
    rm -f "$DATA"/run-"$MB".tar*
fi
declare -A DEC=([bz2]="lbzip2 -dc" [gz]="pigz -dc" [xz]="xz -T0 -dc" [zst]="zstd -q -dc")
declare -A ENC=([bz2]="lbzip2 -9" [gz]="pigz -6" [xz]="xz -T0 -6" [zst]="zstd -q -T0 -3")
for k in bz2 gz xz zst; do
    a=$DATA/run-$MB.tar.$k
    if [ ! -f "$a" ]; then
        tar cf - -C "$src" "$RUN" | ${ENC[$k]} >"$a.part"
        mv "$a.part" "$a"
    fi
done

# secs CMD...: wall seconds of CMD; its peak RSS (KiB) in $tmp/rss, its
# CPU seconds (user + system, children included) in $tmp/cpu. A sync
# first (not timed): the page cache's writeback of what the previous
# command wrote (the route's 800 MB) would otherwise land on this one.
secs() {
    sync
    /usr/bin/time -f '%e %M %U %S' -o "$tmp/time" "$@" >/dev/null 2>"$tmp/err" ||
        { cat "$tmp/err" >&2; echo "failed: $*" >&2; exit 1; }
    read -r t m u s <"$tmp/time"
    echo "$m" >"$tmp/rss"
    python3 -c "print(round($u + $s, 2))" >"$tmp/cpu"
    echo "$t"
}
PROC=("$CKPT" process -q --no-progress --no-wandb --keep-source --min-age 0
      --tmp-dir "$tmp/spool")

echo "host: $(nproc) CPUs, load $(loadavg); step $MB MiB (4 ranks); $R rounds" >&2
KINDS=${KINDS:-bz2 gz xz zst}
S3=${S3:-0}
if [ "$S3" = 1 ]; then
    . tests/support/s3env.sh
    s3env_start --no-proxy --bucket bench --max-seconds 7200
    trap 's3env_stop; rm -rf "$tmp"' EXIT
    for k in $KINDS; do
        aws --endpoint-url "$AWS_ENDPOINT_URL" s3 cp --quiet \
            "$DATA/run-$MB.tar.$k" "s3://bench/run-$MB.tar.$k"
    done
fi

# One round of (b) or (c) for kind $1, round $2: the route (the shell
# command $4 decompresses into $tmp/x, then ckpt process of the extracted
# run) and ckpt process $5, both to a local DEST, whose files must match.
# Results go to $tmp/KIND.TAGroute, .TAGproc, .TAGpratio, .TAGprocrss
# (tag $3: "" local, "s3").
# Each side starts as the other did: right after the previous files were
# deleted (the route's are deleted, once checksummed, before ckpt runs).
# On this VM a writer that comes after ~800 MB of fresh writes pays about
# 1 s more system time for the same writes, whichever it is (the route's
# `ckpt process DIR` too, when it runs third).
route_round() {
    local k=$1 r=$2 tag=$3 route=$4 src=$5 x m p prss
    rm -rf "$tmp/x" "$tmp/d1" "$tmp/d2" "$tmp/state" "$tmp/spool" && mkdir -p "$tmp/x"
    x=$(secs sh -c "$route")
    find "$tmp/x" -exec touch -h -d '3 days ago' {} +
    m=$(secs "${PROC[@]}" "$tmp/x/$RUN" --dest "$tmp/d1")
    # (the run is DEST/3200001 from the directory, DEST/run-MB from the
    # archive's stem)
    (cd "$tmp/d1/$RUN" && find . -type f -exec md5sum {} + | sort -k2) >"$tmp/s1"
    rm -rf "$tmp/x" "$tmp/d1" "$tmp/state"
    p=$(secs "${PROC[@]}" "$src" --dest "$tmp/d2"); prss=$(cat "$tmp/rss")
    (cd "$tmp/d2/run-$MB" && find . -type f -exec md5sum {} + | sort -k2) >"$tmp/s2"
    cmp -s "$tmp/s1" "$tmp/s2" || { echo "$k ${tag:-local}: DEST differs from the manual route's" >&2; diff "$tmp/s1" "$tmp/s2" | head >&2; exit 1; }
    python3 -c "print($x + $m)" >>"$tmp/$k.${tag}route"
    python3 -c "print($p / ($x + $m))" >>"$tmp/$k.${tag}pratio"
    echo "$p" >>"$tmp/$k.${tag}proc"; echo "$prss" >>"$tmp/$k.${tag}procrss"
    echo "  $k round $r${tag:+ ($tag)}: route $x + $m s, ckpt process $p s ($prss KiB)" >&2
}

for k in $KINDS; do
    a=$DATA/run-$MB.tar.$k
    for r in $(seq 1 "$R"); do
        d=$(secs sh -c "${DEC[$k]} '$a'"); cat "$tmp/cpu" >>"$tmp/$k.deccpu"
        l=$(secs "$CKPT" ls "$a"); lrss=$(cat "$tmp/rss"); cat "$tmp/cpu" >>"$tmp/$k.lscpu"
        echo "$d" >>"$tmp/$k.dec"; echo "$l" >>"$tmp/$k.ls"; echo "$lrss" >>"$tmp/$k.lsrss"
        python3 -c "print($l / $d)" >>"$tmp/$k.ratio"
        echo "  $k round $r: decompressor $d s ($(tail -1 "$tmp/$k.deccpu") CPU s)," \
            "ckpt ls $l s ($(tail -1 "$tmp/$k.lscpu") CPU s, $lrss KiB)" >&2
        [ "${PROCESS:-1}" = 1 ] || continue
        route_round "$k" "$r" "" "${DEC[$k]} '$a' | tar xf - -C '$tmp/x'" "$a"
        [ "$S3" = 1 ] || continue
        route_round "$k" "$r" s3 "aws --endpoint-url '$AWS_ENDPOINT_URL' s3 cp --quiet 's3://bench/run-$MB.tar.$k' - | ${DEC[$k]} | tar xf - -C '$tmp/x'" "s3://bench/run-$MB.tar.$k"
    done
done

size() { stat -c %s "$1" | awk '{ printf "%.0f", $1 / 1048576 }'; }
ncpu=$(nproc)
raw=$(du -sb "$src" | cut -f1)
echo "| archive | MiB | decompressor alone: wall, CPU | ckpt ls: wall, CPU | ls / decompressor (median of per-round ratios) | CPU ratio | ls MB/s per core (uncompressed) | ls peak RSS MiB |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for k in $KINDS; do
    a=$DATA/run-$MB.tar.$k
    d=$(median <"$tmp/$k.dec"); l=$(median <"$tmp/$k.ls")
    dc=$(median <"$tmp/$k.deccpu"); lc=$(median <"$tmp/$k.lscpu")
    printf '| .tar.%s | %s | `%s` %.2f s, %.2f s | %.2f s, %.2f s | %.2fx | %.2fx | %.1f | %.0f |\n' \
        "$k" "$(size "$a")" "${DEC[$k]}" "$d" "$dc" "$l" "$lc" \
        "$(median <"$tmp/$k.ratio")" "$(python3 -c "print($lc / $dc)")" \
        "$(python3 -c "print($raw / 1e6 / $l / $ncpu)")" \
        "$(python3 -c "print($(peak "$tmp/$k.lsrss") / 1024)")"
done
# The table of (b) or (c): tag $1 ("" or s3), header $2.
proc_table() {
    echo
    echo "$2"
    echo "| --- | --- | --- | --- | --- |"
    for k in $KINDS; do
        printf '| .tar.%s | %.2f s | %.2f s | %.2fx | %.0f |\n' "$k" \
            "$(median <"$tmp/$k.$1route")" "$(median <"$tmp/$k.$1proc")" \
            "$(median <"$tmp/$k.$1pratio")" \
            "$(python3 -c "print($(peak "$tmp/$k.$1procrss") / 1024)")"
    done
}
[ "${PROCESS:-1}" = 1 ] || exit 0
proc_table "" "| archive | manual route (decompress \| tar x, then ckpt process DIR) | ckpt process ARCHIVE | ckpt / route (median of per-round ratios) | process peak RSS MiB |"
[ "$S3" = 1 ] || exit 0
proc_table s3 "| archive in s3rver | manual route (aws s3 cp - \| decompress \| tar x, then ckpt process DIR) | ckpt process s3://… | ckpt / route (median of per-round ratios) | process peak RSS MiB |"
