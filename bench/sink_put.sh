#!/usr/bin/env bash
# sink_put.sh - how `ckpt unshard LOCAL s3://…` writes one output: two
# builds of ckpt, A/B, alternating round by round on the same checkpoint:
# CKPT_BASE (e.g. main's build: every output over one 8 MiB part is a
# multipart upload) and CKPT (default build/ckpt: an output up to
# CKPT_SINGLE_PUT_MAX that fits --memory is one PUT). One local s3rver
# behind the test proxy (tests/support/s3proxy.py, whose counters give the
# requests: PUT, and POST = CreateMultipartUpload + Complete), torch 1.13
# DCP checkpoints in 4 ranks from bench/gen_dcp_big.py, one per SIZES
# entry (MiB of tensors; default "32 95": 34 MB and 100 MB checkpoint.pt).
# Every output is checked (its size at DEST equal to a local unshard's).
# Median of ROUNDS (default 5); peak RSS (max over rounds) from
# /usr/bin/time.
#   CKPT_BASE=/path/to/main/build/ckpt bash bench/sink_put.sh
#   SIZES="32" ROUNDS=3 ARGS="--memory 16M" ...  (ARGS: extra unshard options)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CKPT=$(realpath "${CKPT:-build/ckpt}")
BASE=$(realpath "${CKPT_BASE:?CKPT_BASE: the other build\'s ckpt}")
TOOL=${CKPT_BUILD:-build}/storage_tool
R=${ROUNDS:-5}
DATA=${BENCH_DIR:-/tmp/ckpt-bench-sink-put}
. tests/support/s3env.sh
s3env_start --bucket bench --max-seconds 7200
tmp=$(mktemp -d)
trap 's3env_stop; rm -rf "$tmp"' EXIT

counts() { # PUT POST of the proxy's counters
    s3env_stats | python3 -c 'import json, sys
m = json.load(sys.stdin)["methods"]
print(m.get("PUT", 0), m.get("POST", 0))'
}

one() { # build-name binary src size-mb round
    local want got t rss
    want=$(cat "$tmp/want-$4")
    s3env_reset_stats
    # shellcheck disable=SC2086  # ARGS: words on purpose
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$2" unshard -q --no-progress \
        ${ARGS:-} "$3" "s3://bench/$1-$4-$5" >/dev/null
    read -r put post < <(counts)
    got=$("$TOOL" ls -r "s3://bench/$1-$4-$5" | awk -F'\t' '$3 == "checkpoint.pt" { print $2 }')
    [ "$got" = "$want" ] || { echo "$1: checkpoint.pt $got bytes, want $want" >&2; exit 1; }
    "$TOOL" rm-tree "s3://bench/$1-$4-$5"
    read -r t rss <"$tmp/time"
    echo "$t" >>"$tmp/$1-$4.times"
    echo "$rss" >>"$tmp/$1-$4.rss"
    echo "$put $post" >"$tmp/$1-$4.req"
    echo "  $4 MiB round $5 $1: $t s, PUT $put, POST $post, RSS $((rss / 1024)) MiB" >&2
}


SIZES=${SIZES:-32 95}
echo "host: $(nproc) CPUs, load $(loadavg); s3rver on Node $(node --version); ARGS='${ARGS:-}'" >&2
echo "| output | build | median s ($R rounds) | rounds (s) | PUT | POST | peak RSS MiB | vs base |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for mb in $SIZES; do
    src=$DATA/dcp$mb
    if [ ! -f "$src/.metadata" ]; then
        mkdir -p "$DATA"
        /usr/bin/python3 bench/gen_dcp_big.py "$src" --size-mb "$mb" --ranks 4 >/dev/null
    fi
    "$CKPT" unshard -q --no-progress "$src" "$tmp/ref" >/dev/null
    stat -c %s "$tmp/ref/checkpoint.pt" >"$tmp/want-$mb"
    rm -rf "$tmp/ref"
    for r in $(seq 1 "$R"); do
        if [ $((r % 2)) -eq 1 ]; then
            one base "$BASE" "$src" "$mb" "$r"; one new "$CKPT" "$src" "$mb" "$r"
        else
            one new "$CKPT" "$src" "$mb" "$r"; one base "$BASE" "$src" "$mb" "$r"
        fi
    done
    b=$(median <"$tmp/base-$mb.times")
    for w in base new; do
        t=$(median <"$tmp/$w-$mb.times")
        read -r put post <"$tmp/$w-$mb.req"
        printf '| %s MB | %s | %.2f | %s | %s | %s | %d | %.2fx |\n' \
            "$(( $(cat "$tmp/want-$mb") / 1000000 ))" "$w" "$t" \
            "$(paste -sd, "$tmp/$w-$mb.times" | sed 's/,/, /g')" "$put" "$post" \
            $(( $(peak "$tmp/$w-$mb.rss") / 1024 )) \
            "$(python3 -c "print($t / $b)")"
    done
done
