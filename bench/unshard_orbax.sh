#!/usr/bin/env bash
# bench/unshard_orbax.sh - `ckpt unshard --format safetensors` of a large
# Orbax OCDBT step against `cp -r` of the same step on the same disk.
#
#   bash bench/unshard_orbax.sh          # SIZE=1024 MiB, RUNS=3
#   SIZE=256 RUNS=1 bash bench/unshard_orbax.sh
#   BASE=/tmp/ckpt-old bash bench/unshard_orbax.sh   # and an older build
#
# The step is written by tests/support/make_orbax.py --big SIZE (float32
# arrays of 1024x4096 in 256-row zarr v2 chunks, zstd level 1, in two
# ocdbt.process_* sub-databases under a merged root, as Orbax lays out a
# two-host save). Random data, so zstd barely shrinks it: unsharding is
# one decompression and one write per byte, cp one copy. Each run is timed
# with /usr/bin/time -v (wall, peak RSS); median of RUNS; --no-sync for
# ckpt as cp does not sync. Page cache warm. Each run also reports its CPU
# seconds (user + system), which the other agents' load on a shared
# machine inflates far less than wall time. BASE: a second ckpt binary,
# run interleaved with the others (before/after in one session). Output
# under $BENCH_DIR (default bench/out), removed at the end unless KEEP=1.
# Prints a Markdown table for bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CKPT=${CKPT:-build/ckpt}
OUT=${BENCH_DIR:-bench/out}
SIZE=${SIZE:-1024}
RUNS=${RUNS:-3}
mkdir -p "$OUT"
need_ckpt

gen="$OUT/orbax-$SIZE"
src="$gen/run/1"
if [ ! -f "$src/state/manifest.ocdbt" ]; then
    echo "== generating a $SIZE MiB OCDBT step" >&2
    rm -rf "$gen"
    /usr/bin/python3 tests/support/make_orbax.py "$gen" --big "$SIZE"
fi
bytes=$(du -sb "$src" | cut -f1)
sync
find "$src" -type f -exec cat {} + >/dev/null

load0=$(loadavg)
cp_t=(); ck_t=(); bs_t=(); cp_c=(); ck_c=(); bs_c=()
ck_rss=0; cp_rss=0; bs_rss=0
unshard() {
    rm -rf "$OUT/ck-out"; sync
    measure "$1" unshard --no-sync --no-progress --format safetensors \
        "$src" "$OUT/ck-out"
    rm -rf "$OUT/ck-out"; sync
}
for i in $(seq "$RUNS"); do
    rm -rf "$OUT/cp-out"; sync
    read -r t r c < <(measure cp -r "$src" "$OUT/cp-out")
    cp_t+=("$t"); cp_c+=("$c"); cp_rss=$r
    rm -rf "$OUT/cp-out"; sync
    read -r t r c < <(unshard "$CKPT")
    ck_t+=("$t"); ck_c+=("$c"); [ "$r" -gt "$ck_rss" ] && ck_rss=$r
    if [ -n "${BASE:-}" ]; then
        read -r t r c < <(unshard "$BASE")
        bs_t+=("$t"); bs_c+=("$c"); [ "$r" -gt "$bs_rss" ] && bs_rss=$r
    fi
done
cp_med=$(med "${cp_t[@]}")
ck_med=$(med "${ck_t[@]}")
[ "${KEEP:-0}" = 1 ] || rm -rf "$gen"

echo
machine_line "$OUT" "$load0"
echo
echo "| step | tool | time (median of $RUNS) | CPU s (median) | peak RSS | notes |"
echo "| --- | --- | --- | --- | --- | --- |"
echo "| $SIZE MiB OCDBT ($(gib "$bytes") GiB) | cp -r | $cp_med s ($(mbs "$bytes" "$cp_med") MB/s) | $(med "${cp_c[@]}") | $((cp_rss / 1024)) MiB | runs: ${cp_t[*]} |"
echo "| | ckpt unshard --format safetensors --no-sync | $ck_med s ($(mbs "$bytes" "$ck_med") MB/s) = $(ratio "$cp_med" "$ck_med")x cp | $(med "${ck_c[@]}") | $((ck_rss / 1024)) MiB | runs: ${ck_t[*]} |"
if [ -n "${BASE:-}" ]; then
    bs_med=$(med "${bs_t[@]}")
    echo "| | BASE ($BASE) | $bs_med s ($(mbs "$bytes" "$bs_med") MB/s) = $(ratio "$cp_med" "$bs_med")x cp | $(med "${bs_c[@]}") | $((bs_rss / 1024)) MiB | runs: ${bs_t[*]} |"
fi
