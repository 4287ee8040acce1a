#!/usr/bin/env bash
# unshard_s3_read.sh - `ckpt unshard s3://... local` against `aws s3 cp
# --recursive` of the same step (the download a user would otherwise do
# first), on one local s3rver (connected directly, no proxy), in the same
# run, rounds interleaved. The checkpoint: a 1 GiB 4-rank torch 1.13 DCP
# (bench/gen_dcp_big.py --size-mb 1024 --ranks 4).
#   bench/unshard_s3_read.sh [ROUNDS]   (default 3; build/ckpt)
#   CKPT_BASE=path   also time another ckpt binary (before/after, same run)
#   BENCH_DIR=...    where the checkpoint is kept (default
#                    /tmp/ckpt-bench-unshard-s3)
# ckpt writes with --no-sync (aws does not fsync either); every ckpt output
# is compared with a local unshard of the same checkpoint. Reports median
# wall time and max peak RSS (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
R=${1:-3}
CKPT=${CKPT:-build/ckpt}
DATA=${BENCH_DIR:-/tmp/ckpt-bench-unshard-s3}
if [ ! -f "$DATA/dcp/.metadata" ]; then
    rm -rf "$DATA/dcp"
    mkdir -p "$DATA"
    /usr/bin/python3 bench/gen_dcp_big.py "$DATA/dcp" --size-mb 1024 \
        --ranks 4 >/dev/null
fi
. tests/support/s3env.sh
s3env_start --no-proxy --bucket bench --max-seconds 7200
tmp=$(mktemp -d)
trap 's3env_stop; rm -rf "$tmp"' EXIT
aws() { command aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"; }
aws s3 cp --recursive --only-show-errors "$DATA/dcp" s3://bench/dcp/
bytes=$(du -sbL "$DATA/dcp" | cut -f1)
# The reference output: a local unshard of the same checkpoint.
"$CKPT" unshard -q --no-sync "$DATA/dcp" "$tmp/ref" >/dev/null

tools=(ckpt)
[ -n "${CKPT_BASE:-}" ] && tools+=(base)
tools+=(aws)
measure() { # tool round
    local t=$1 out=$tmp/out-$1
    rm -rf "$out"
    case $t in
    ckpt) cmd=("$CKPT" unshard -q --no-sync s3://bench/dcp "$out") ;;
    base) cmd=("$CKPT_BASE" unshard -q --no-sync s3://bench/dcp "$out") ;;
    aws) cmd=(aws s3 cp --recursive --only-show-errors s3://bench/dcp/ "$out/") ;;
    esac
    sync
    /usr/bin/time -f "%e %M" -o "$tmp/time" "${cmd[@]}" >/dev/null
    if [ "$t" != aws ]; then
        cmp "$out/checkpoint.pt" "$tmp/ref/checkpoint.pt" ||
            { echo "$t: output differs from the local unshard" >&2; exit 1; }
    fi
    read -r s rss <"$tmp/time"
    echo "$s" >>"$tmp/$t.times"
    echo "$rss" >>"$tmp/$t.rss"
    echo "  $t round $2: $s s, peak RSS $((rss / 1024)) MiB" >&2
    rm -rf "$out"
}
echo "host: $(nproc) CPUs; s3rver 3.7.1 on Node $(node --version); $bytes bytes" >&2
for r in $(seq 1 "$R"); do
    for t in "${tools[@]}"; do
        measure "$t" "$r"
    done
done
base=$(median <"$tmp/aws.times")
echo "| tool | median s ($R rounds) | rounds (s) | vs aws download | peak RSS MiB |"
echo "| --- | --- | --- | --- | --- |"
for t in "${tools[@]}"; do
    m=$(median <"$tmp/$t.times")
    rss=$(peak "$tmp/$t.rss")
    printf '| %s | %.2f | %s | %.2fx | %d |\n' "$t" "$m" \
        "$(paste -sd, "$tmp/$t.times" | sed 's/,/, /g')" \
        "$(python3 -c "print($m / $base)")" $((rss / 1024))
done
