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
. bench/lib.sh
CKPT=${CKPT:-build/ckpt}
OUT=${BENCH_DIR:-bench/out}
RANKS=${RANKS:-64}
SIZE=${SIZE:-2048}
RUNS=${RUNS:-3}
PY=/usr/bin/python3
mkdir -p "$OUT"
need_ckpt

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
    read -r t r _ < <(measure cp -r "$src" "$OUT/cp-out")
    cp_t+=("$t"); cp_rss=$r
    rm -rf "$OUT/cp-out" "$OUT/ck-out"; sync
    read -r t r _ < <(measure "$CKPT" unshard --no-sync --no-progress \
                    "$src" "$OUT/ck-out")
    ck_t+=("$t"); [ "$r" -gt "$ck_rss" ] && ck_rss=$r
    [ "$i" = "$RUNS" ] || rm -rf "$OUT/ck-out"
    sync
done
rm -rf "$OUT/torch-out"; sync
read -r torch_t torch_rss _ < <(measure $PY bench/torch_unshard_legacy.py \
                              "$src" "$OUT/torch-out")
same="not checked"
if [ "${CHECK:-1}" = 1 ]; then
    same=$($PY tests/support/check_unshard.py "$OUT/ck-out" "$OUT/torch-out" 2>&1 | tail -1)
fi
rm -rf "$OUT/ck-out" "$OUT/torch-out"; sync
[ "${KEEP:-0}" = 1 ] || rm -rf "$src"

cp_med=$(med "${cp_t[@]}")
ck_med=$(med "${ck_t[@]}")
echo
machine_line "$OUT"
echo "input: $RANKS rank files, $(gib "$bytes") GiB; ckpt output vs torch: $same"
echo
echo "| tool | time (median of $RUNS) | peak RSS | notes |"
echo "| --- | --- | --- | --- |"
echo "| cp -r | $cp_med s ($(mbs "$bytes" "$cp_med") MB/s) | $((cp_rss / 1024)) MiB | runs: ${cp_t[*]} |"
echo "| ckpt unshard --no-sync | $ck_med s ($(mbs "$bytes" "$ck_med") MB/s) = $(ratio "$cp_med" "$ck_med")x cp | $((ck_rss / 1024)) MiB | runs: ${ck_t[*]} |"
echo "| OLMo algorithm, torch 1.13 | $torch_t s = ckpt $(ratio "$torch_t" "$ck_med")x faster | $((torch_rss / 1024)) MiB = $(ratio "$torch_rss" "$ck_rss")x ckpt | one run |"
