#!/usr/bin/env bash
# bench/unshard_dcp.sh - `ckpt unshard` on a large DCP checkpoint against
# `cp -r` of the same directory on the same disk, and against torch 1.13's
# own load-then-save.
#
#   bash bench/unshard_dcp.sh            # sizes 512 MiB and 3072 MiB
#   SIZES="1024" RUNS=5 bash bench/unshard_dcp.sh
#
# For each size: generate an 8-rank torch 1.13 checkpoint (~300 bf16/fp32
# tensors, mixed sharding; bench/gen_dcp_big.py), then time RUNS runs
# (median reported) of cp -r and of ckpt unshard (--no-sync, as cp does
# not sync either; one more run with the default fsync is reported
# separately), peak RSS of each through /usr/bin/time -v, and one torch
# load+save (bench/torch_unshard.py). Page cache is warm for all of them
# (the source was just written or read); `sync` runs between runs so one
# run's writeback does not land in the next. Everything is written under
# $BENCH_DIR (default bench/out, gitignored) and removed at the end unless
# KEEP=1. Prints a Markdown table for bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CKPT=${CKPT:-build/ckpt}
OUT=${BENCH_DIR:-bench/out}
SIZES=${SIZES:-"512 3072"}
RUNS=${RUNS:-3}
PY=/usr/bin/python3
mkdir -p "$OUT"
need_ckpt

rows=()
for size in $SIZES; do
    src="$OUT/dcp-$size"
    if [ ! -f "$src/.metadata" ]; then
        echo "== generating $size MiB checkpoint (8 ranks, torch 1.13)" >&2
        rm -rf "$src"
        $PY bench/gen_dcp_big.py "$src" --size-mb "$size" --ranks 8
    fi
    bytes=$(du -sb "$src" | cut -f1)
    sync
    cat "$src"/* >/dev/null   # warm the page cache for everybody alike

    cp_t=(); ck_t=(); ck_rss=0; cp_rss=0
    for i in $(seq "$RUNS"); do
        rm -rf "$OUT/cp-out"; sync
        read -r t r _ < <(measure cp -r "$src" "$OUT/cp-out")
        cp_t+=("$t"); cp_rss=$r
        rm -rf "$OUT/cp-out"; sync
        rm -rf "$OUT/ck-out"; sync
        read -r t r _ < <(measure "$CKPT" unshard --no-sync --no-progress \
                        "$src" "$OUT/ck-out")
        ck_t+=("$t"); [ "$r" -gt "$ck_rss" ] && ck_rss=$r
        rm -rf "$OUT/ck-out"; sync
    done
    read -r sync_t _ < <(measure "$CKPT" unshard --no-progress "$src" \
                         "$OUT/ck-out")
    rm -rf "$OUT/ck-out"; sync
    read -r torch_t torch_rss _ < <(measure $PY bench/torch_unshard.py "$src" \
                                  "$OUT/torch.pt")
    rm -f "$OUT/torch.pt"; sync

    cp_med=$(med "${cp_t[@]}")
    ck_med=$(med "${ck_t[@]}")
    rows+=("| $size MiB ($(gib "$bytes") GiB) | cp -r | $cp_med s ($(mbs "$bytes" "$cp_med") MB/s) | $((cp_rss / 1024)) MiB | runs: ${cp_t[*]} |")
    rows+=("| | ckpt unshard --no-sync | $ck_med s ($(mbs "$bytes" "$ck_med") MB/s) = $(ratio "$cp_med" "$ck_med")x cp | $((ck_rss / 1024)) MiB | runs: ${ck_t[*]} |")
    rows+=("| | ckpt unshard (fsync) | $sync_t s ($(mbs "$bytes" "$sync_t") MB/s) | | one run |")
    rows+=("| | torch 1.13 load+save | $torch_t s = ckpt $(ratio "$torch_t" "$ck_med")x faster | $((torch_rss / 1024)) MiB = $(ratio "$torch_rss" "$ck_rss")x ckpt | one run |")
    [ "${KEEP:-0}" = 1 ] || rm -rf "$src"
done

echo
machine_line "$OUT"
echo
echo "| checkpoint | tool | time (median of $RUNS) | peak RSS | notes |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
