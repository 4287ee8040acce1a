#!/usr/bin/env bash
# bench/unshard_legacy.sh - `ckpt unshard` on a large OLMo torch_legacy
# step (64 rank*.pt files, ~2 GiB) against `cp -r` of the same directory
# and against OLMo's own algorithm in torch 1.13 (load every rank, gather,
# save; bench/torch_unshard_legacy.py).
#
#   bash bench/unshard_legacy.sh                 # 64 ranks, 2048 MiB
#   RANKS=16 SIZE=512 RUNS=5 bash bench/unshard_legacy.sh
#
# Times are medians of RUNS runs (cp and ckpt --no-sync; torch once), peak
# RSS from /usr/bin/time -v, page cache warm for all. The ckpt output is
# compared with torch's by tests/support/check_unshard.py (CHECK=0 skips).
# Everything goes under $BENCH_DIR (default bench/out, gitignored) and is
# removed at the end unless KEEP=1. Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
CKPT=${CKPT:-build/ckpt}
OUT=${BENCH_DIR:-bench/out}
RANKS=${RANKS:-64}
SIZE=${SIZE:-2048}
RUNS=${RUNS:-3}
PY=/usr/bin/python3
mkdir -p "$OUT"
[ -x "$CKPT" ] || { echo "build $CKPT first (scripts/build.sh)" >&2; exit 2; }

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
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

src="$OUT/legacy-$RANKS-$SIZE"
if [ ! -f "$src/rank0.pt" ]; then
    echo "== generating $RANKS ranks, ~$SIZE MiB" >&2
    rm -rf "$src"
    $PY bench/gen_olmo_legacy_big.py "$src" --ranks "$RANKS" --size-mb "$SIZE" >&2
fi
bytes=$(du -sb "$src" | cut -f1)
sync
cat "$src"/* >/dev/null

cp_t=(); ck_t=(); ck_rss=0; cp_rss=0
for i in $(seq "$RUNS"); do
    rm -rf "$OUT/cp-out"; sync
    read -r t r < <(measure cp -r "$src" "$OUT/cp-out")
    cp_t+=("$t"); cp_rss=$r
    rm -rf "$OUT/cp-out" "$OUT/ck-out"; sync
    read -r t r < <(measure "$CKPT" unshard --no-sync --no-progress \
                    "$src" "$OUT/ck-out")
    ck_t+=("$t"); [ "$r" -gt "$ck_rss" ] && ck_rss=$r
    [ "$i" = "$RUNS" ] || rm -rf "$OUT/ck-out"
    sync
done
rm -rf "$OUT/torch-out"; sync
read -r torch_t torch_rss < <(measure $PY bench/torch_unshard_legacy.py \
                              "$src" "$OUT/torch-out")
same="not checked"
if [ "${CHECK:-1}" = 1 ]; then
    same=$($PY tests/support/check_unshard.py "$OUT/ck-out" "$OUT/torch-out" 2>&1 | tail -1)
fi
rm -rf "$OUT/ck-out" "$OUT/torch-out"; sync
[ "${KEEP:-0}" = 1 ] || rm -rf "$src"

cp_med=$(printf '%s\n' "${cp_t[@]}" | median)
ck_med=$(printf '%s\n' "${ck_t[@]}" | median)
mbs() { awk -v b="$bytes" -v t="$1" 'BEGIN {printf "%.0f", b / t / 1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/2^20}' /proc/meminfo), $(df -T "$OUT" | awk 'NR==2 {print $2}') at $OUT, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "input: $RANKS rank files, $(awk -v b="$bytes" 'BEGIN{printf "%.2f", b/2^30}') GiB; ckpt output vs torch: $same"
echo
echo "| tool | time (median of $RUNS) | peak RSS | notes |"
echo "| --- | --- | --- | --- |"
echo "| cp -r | $cp_med s ($(mbs "$cp_med") MB/s) | $((cp_rss / 1024)) MiB | runs: ${cp_t[*]} |"
echo "| ckpt unshard --no-sync | $ck_med s ($(mbs "$ck_med") MB/s) = $(ratio "$cp_med" "$ck_med")x cp | $((ck_rss / 1024)) MiB | runs: ${ck_t[*]} |"
echo "| OLMo algorithm, torch 1.13 | $torch_t s = ckpt $(ratio "$torch_t" "$ck_med")x faster | $((torch_rss / 1024)) MiB = $(ratio "$torch_rss" "$ck_rss")x ckpt | one run |"
