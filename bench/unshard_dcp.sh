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
CKPT=${CKPT:-build/ckpt}
OUT=${BENCH_DIR:-bench/out}
SIZES=${SIZES:-"512 3072"}
RUNS=${RUNS:-3}
PY=/usr/bin/python3
mkdir -p "$OUT"
[ -x "$CKPT" ] || { echo "build $CKPT first (scripts/build.sh)" >&2; exit 2; }

# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# run CMD... under /usr/bin/time -v; prints "wall_seconds max_rss_kb"
measure() {
    local log
    log=$(mktemp)
    /usr/bin/time -v "$@" >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
    awk -F': ' '/Elapsed \(wall clock\)/ {
                    n = split($2, t, ":"); s = 0
                    for (i = 1; i <= n; i++) s = s * 60 + t[i]
                    wall = s }
                /Maximum resident set size/ { rss = $2 }
                END { print wall, rss }' "$log"
    rm -f "$log"
}

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
        read -r t r < <(measure cp -r "$src" "$OUT/cp-out")
        cp_t+=("$t"); cp_rss=$r
        rm -rf "$OUT/cp-out"; sync
        rm -rf "$OUT/ck-out"; sync
        read -r t r < <(measure "$CKPT" unshard --no-sync --no-progress \
                        "$src" "$OUT/ck-out")
        ck_t+=("$t"); [ "$r" -gt "$ck_rss" ] && ck_rss=$r
        rm -rf "$OUT/ck-out"; sync
    done
    read -r sync_t _ < <(measure "$CKPT" unshard --no-progress "$src" \
                         "$OUT/ck-out")
    rm -rf "$OUT/ck-out"; sync
    read -r torch_t torch_rss < <(measure $PY bench/torch_unshard.py "$src" \
                                  "$OUT/torch.pt")
    rm -f "$OUT/torch.pt"; sync

    cp_med=$(printf '%s\n' "${cp_t[@]}" | median)
    ck_med=$(printf '%s\n' "${ck_t[@]}" | median)
    mbs() { awk -v b="$bytes" -v t="$1" 'BEGIN {printf "%.0f", b / t / 1e6}'; }
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
    rows+=("| $size MiB ($(awk -v b="$bytes" 'BEGIN{printf "%.2f", b/2^30}') GiB) | cp -r | $cp_med s ($(mbs "$cp_med") MB/s) | $((cp_rss / 1024)) MiB | runs: ${cp_t[*]} |")
    rows+=("| | ckpt unshard --no-sync | $ck_med s ($(mbs "$ck_med") MB/s) = $(ratio "$cp_med" "$ck_med")x cp | $((ck_rss / 1024)) MiB | runs: ${ck_t[*]} |")
    rows+=("| | ckpt unshard (fsync) | $sync_t s ($(mbs "$sync_t") MB/s) | | one run |")
    rows+=("| | torch 1.13 load+save | $torch_t s = ckpt $(ratio "$torch_t" "$ck_med")x faster | $((torch_rss / 1024)) MiB = $(ratio "$torch_rss" "$ck_rss")x ckpt | one run |")
    [ "${KEEP:-0}" = 1 ] || rm -rf "$src"
done

echo
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/2^20}' /proc/meminfo), $(df -T "$OUT" | awk 'NR==2 {print $2}') at $OUT, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| checkpoint | tool | time (median of $RUNS) | peak RSS | notes |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
