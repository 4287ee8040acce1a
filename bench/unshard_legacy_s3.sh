#!/usr/bin/env bash
# unshard_legacy_s3.sh - a many-rank OLMo torch_legacy step read in place
# from s3rver (`ckpt unshard s3://… LOCAL`) against `aws s3 cp --recursive`
# of the step (the whole fetch a user, or older ckpt, did first). The step:
# tests/support/make_olmo_legacy_many.py --ranks RANKS (default 64: 64 rank
# files of ~150 KB). Rounds interleaved, medians of R (default 3), peak RSS
# from /usr/bin/time; every ckpt output is compared with a local unshard.
#   bench/unshard_legacy_s3.sh [ROUNDS]
#   CKPT_BASE=path  also time another ckpt binary (before/after, same run)
#   PROXY=1         go through the signing proxy (tests/support/s3proxy.py)
#   RANKS=N BENCH_DIR=... (default /tmp/ckpt-bench-legacy-s3, kept)
#   SIZE_MB=M       instead, bench/gen_olmo_legacy_big.py's step of M MiB
#                   (RANKS files of ~M/RANKS MiB: large records)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
R=${1:-3}
RANKS=${RANKS:-64}
CKPT=${CKPT:-build/ckpt}
DATA=${BENCH_DIR:-/tmp/ckpt-bench-legacy-s3}/legacy$RANKS-${SIZE_MB:-many}
if [ ! -f "$DATA/ckpt/rank0.pt" ]; then
    rm -rf "$DATA"
    if [ -n "${SIZE_MB:-}" ]; then
        /usr/bin/python3 bench/gen_olmo_legacy_big.py "$DATA/ckpt" \
            --ranks "$RANKS" --size-mb "$SIZE_MB" >/dev/null
    else
        /usr/bin/python3 tests/support/make_olmo_legacy_many.py "$DATA" \
            --ranks "$RANKS" >/dev/null
    fi
fi
. tests/support/s3env.sh
if [ "${PROXY:-0}" = 1 ]; then s3env_start --bucket bench --max-seconds 3600
else s3env_start --no-proxy --bucket bench --max-seconds 3600; fi
tmp=$(mktemp -d)
trap 's3env_stop; rm -rf "$tmp"' EXIT
aws s3 cp --quiet --recursive "$DATA/ckpt" s3://bench/run/step10/
"$CKPT" unshard -q --no-sync --no-progress "$DATA/ckpt" "$tmp/ref" >/dev/null
tools=(ckpt)
[ -n "${CKPT_BASE:-}" ] && tools+=(base)
tools+=(aws)
for r in $(seq 1 "$R"); do
    for t in "${tools[@]}"; do
        rm -rf "$tmp/o"
        case $t in
        ckpt) cmd=("$CKPT" unshard -q --no-sync --no-progress s3://bench/run/step10 "$tmp/o") ;;
        base) cmd=("$CKPT_BASE" unshard -q --no-sync --no-progress s3://bench/run/step10 "$tmp/o") ;;
        aws) cmd=(aws s3 cp --quiet --recursive s3://bench/run/step10 "$tmp/o") ;;
        esac
        /usr/bin/time -f "$t %e %M" -o "$tmp/t" "${cmd[@]}" >/dev/null
        [ "$t" = aws ] || diff -r "$tmp/o" "$tmp/ref" >/dev/null ||
            { echo "$t: output differs from the local unshard" >&2; exit 1; }
        cat "$tmp/t" >>"$tmp/all"
    done
done
echo "$RANKS ranks, $(du -sb "$DATA/ckpt" | cut -f1) bytes; proxy ${PROXY:-0}; load $(loadavg)"
echo "| tool | median s ($R rounds) | rounds | peak RSS MiB |"
echo "| --- | --- | --- | --- |"
for t in "${tools[@]}"; do
    grep "^$t " "$tmp/all" | /usr/bin/python3 -c "
import sys
r = [l.split() for l in sys.stdin]
t = sorted(float(x[1]) for x in r)
print('| %s | %.2f | %s | %d |' % ('$t', t[len(t) // 2],
      ', '.join('%.2f' % v for v in t), max(int(x[2]) for x in r) // 1024))"
done
