#!/usr/bin/env bash
# bench/deepspeed.sh - `ckpt unshard` of a DeepSpeed ZeRO step against
# DeepSpeed's own zero_to_fp32.py on the same checkpoint (time, peak RSS).
#
#   bash bench/deepspeed.sh                       # as root (chroot)
#   SRC=/path/to/checkpoints TAG=global_step2 RUNS=5 bash bench/deepspeed.sh
#
# SRC is the directory save_checkpoint wrote (the tag directories,
# `latest`, and the zero_to_fp32.py DeepSpeed put there); default: the
# 152M-parameter ZeRO-3 checkpoint /work/bench-data/zero3-big (not in the
# repository: its HOWTO.txt says how it was made). zero_to_fp32 runs
# where DeepSpeed imports: the Debian sid chroot $SID (torch 2.14,
# DeepSpeed sources at /opt/deepspeed, SRC bind-mounted at the same path;
# Debian 12's torch 1.13 cannot import DeepSpeed 0.19.6), writing
# pytorch_model.bin beside SRC ($Z2F_OUT, removed at the end). ckpt runs
# on the host, default (fsync before the rename) and --no-sync
# (zero_to_fp32 does not fsync).
#
# Times are medians of RUNS runs, peak RSS the largest seen, from
# /usr/bin/time -v (for zero_to_fp32 the python process under chroot);
# page cache warm for all. ckpt's output is compared with zero_to_fp32's
# by tests/integration/unshard_deepspeed.py's exact comparison (keys and
# order, dtype, shape, requires_grad, bytes, tied tensors; CHECK=0 skips).
# Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CKPT=${CKPT:-build/ckpt}
SRC=${SRC:-/work/bench-data/zero3-big/checkpoints}
TAG=${TAG:-$(cat "$SRC/latest")}
SID=${SID:-/work/sid}
RUNS=${RUNS:-3}
OUT=${BENCH_DIR:-bench/out}
Z2F_OUT=${Z2F_OUT:-$(dirname "$SRC")/bench-z2f-out}
PY=/usr/bin/python3
mkdir -p "$OUT"
need_ckpt
[ -f "$SRC/zero_to_fp32.py" ] || { echo "$SRC has no zero_to_fp32.py" >&2; exit 2; }

bytes=$(du -sbL "$SRC/$TAG" | cut -f1)
cat "$SRC/$TAG"/* >/dev/null
have_z2f=1
if [ "$(id -u)" != 0 ] || [ ! -x "$SID/usr/bin/python3" ] ||
   [ ! -d "$SID$SRC" ]; then
    echo "zero_to_fp32 skipped: needs root and $SID with $SRC inside" >&2
    have_z2f=0
fi

z_t=(); c_t=(); n_t=(); z_rss=0; c_rss=0; n_rss=0
for i in $(seq "$RUNS"); do
    if [ "$have_z2f" = 1 ]; then
        rm -rf "$Z2F_OUT"; sync
        read -r t r _ < <(measure chroot "$SID" env DS_ACCELERATOR=cpu \
            PYTHONPATH=/opt/deepspeed sh -c "cd '$SRC' && exec python3 \
            zero_to_fp32.py . '$Z2F_OUT' -t '$TAG'")
        z_t+=("$t"); [ "$r" -gt "$z_rss" ] && z_rss=$r
    fi
    rm -rf "$OUT/ds-out"; sync
    read -r t r _ < <(measure "$CKPT" unshard --no-progress "$SRC/$TAG" \
                    "$OUT/ds-out")
    c_t+=("$t"); [ "$r" -gt "$c_rss" ] && c_rss=$r
    rm -rf "$OUT/ds-out"; sync
    read -r t r _ < <(measure "$CKPT" unshard --no-progress --no-sync \
                    "$SRC/$TAG" "$OUT/ds-out")
    n_t+=("$t"); [ "$r" -gt "$n_rss" ] && n_rss=$r
done

if [ "${CHECK:-1}" = 1 ] && [ "$have_z2f" = 1 ]; then
    $PY - "$OUT/ds-out/checkpoint.pt" "$Z2F_OUT/pytorch_model.bin" <<'EOF' >&2
import sys
sys.path.insert(0, "tests/integration")
import unshard_deepspeed as u
c = u.Checker()
u.same_state(c, "bench", sys.argv[1], sys.argv[2])
sys.exit(c.finish())
EOF
fi

ct=$(med "${c_t[@]}")
nt=$(med "${n_t[@]}")
echo
echo "checkpoint: $SRC/$TAG ($bytes bytes), median of $RUNS runs"
echo
echo "| tool | wall (s) | peak RSS (MiB) |"
echo "|---|---|---|"
if [ "$have_z2f" = 1 ]; then
    zt=$(med "${z_t[@]}")
    echo "| zero_to_fp32.py (DeepSpeed 0.19.6, torch 2.14) | $zt | $((z_rss / 1024)) |"
fi
echo "| ckpt unshard | $ct | $((c_rss / 1024)) |"
echo "| ckpt unshard --no-sync | $nt | $((n_rss / 1024)) |"
if [ "$have_z2f" = 1 ]; then
    awk -v z="$zt" -v c="$ct" -v n="$nt" -v zr="$z_rss" -v cr="$c_rss" \
        'BEGIN { printf "\nzero_to_fp32 / ckpt: %.1fx time (%.1fx with --no-sync), %.0fx RSS\n", z / c, z / n, zr / cr }'
    rm -rf "$Z2F_OUT"
fi
rm -rf "$OUT/ds-out"
