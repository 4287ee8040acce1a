#!/usr/bin/env bash
# unshard_s3.sh - `ckpt unshard s3://… s3://…` (outputs written straight
# to object storage, no local copy) against what a user does without it:
# `aws s3 cp --recursive` of the step down, a local `ckpt unshard`, and
# `aws s3 cp` of the consolidated checkpoint.pt back up. One local s3rver
# (connected directly, no proxy), a torch 1.13 DCP checkpoint of SIZE_MB
# (default 1024) in 4 ranks from bench/gen_dcp_big.py. Median of R rounds
# (default 3), the two interleaved within a round; every output is
# checked (its size at DEST equal to a local unshard's); peak RSS (max
# over rounds) from /usr/bin/time; local disk the alternative needs. Also
# the sink alone: a local SRC unsharded to s3:// against a local unshard
# plus `aws s3 cp` up.
#   bench/unshard_s3.sh [ROUNDS]          (build/ckpt, build/storage_tool)
#   SIZE_MB=... BENCH_DIR=... (default /tmp/ckpt-bench-unshard-s3, kept)
#   ALT_UNSHARD_ARGS=--no-sync   the alternative's local unshard without
#                  fsync (aws does not fsync its download either)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
R=${1:-3}
MB=${SIZE_MB:-1024}
CKPT=${CKPT:-build/ckpt}
TOOL=${CKPT_BUILD:-build}/storage_tool
DATA=${BENCH_DIR:-/tmp/ckpt-bench-unshard-s3}
. tests/support/s3env.sh
s3env_start --no-proxy --bucket bench --max-seconds 7200
tmp=$(mktemp -d)
trap 's3env_stop; rm -rf "$tmp"' EXIT

if [ ! -f "$DATA/dcp$MB/.metadata" ]; then
    mkdir -p "$DATA"
    /usr/bin/python3 bench/gen_dcp_big.py "$DATA/dcp$MB" --size-mb "$MB" \
        --ranks 4 >/dev/null
fi
aws s3 cp --quiet --recursive "$DATA/dcp$MB" s3://bench/src/
"$CKPT" unshard -q --no-progress "$DATA/dcp$MB" "$tmp/ref" >/dev/null
want=$(stat -c %s "$tmp/ref/checkpoint.pt")
rm -rf "$tmp/ref"

check() { # prefix
    local got
    got=$("$TOOL" ls -r "s3://bench/$1" | awk -F'\t' '$3 == "checkpoint.pt" { print $2 }')
    [ "$got" = "$want" ] || { echo "$1: checkpoint.pt $got bytes, want $want" >&2; exit 1; }
    "$TOOL" rm-tree "s3://bench/$1"
}

sink() { # round
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$CKPT" unshard -q --no-progress \
        s3://bench/src "s3://bench/ckpt-$1" >/dev/null
    check "ckpt-$1"
    read -r t rss <"$tmp/time"
    echo "$t" >>"$tmp/ckpt.times"; echo "$rss" >>"$tmp/ckpt.rss"
    echo "  round $1 ckpt s3->s3: $t s, peak RSS $((rss / 1024)) MiB" >&2
}

alt() { # round
    local t0 t1 t2 t3 disk
    t0=$(date +%s.%N)
    aws s3 cp --quiet --recursive s3://bench/src "$tmp/dl"
    t1=$(date +%s.%N)
    # shellcheck disable=SC2086  # ALT_UNSHARD_ARGS: words on purpose
    /usr/bin/time -f "%M" -o "$tmp/rss" "$CKPT" unshard -q --no-progress \
        ${ALT_UNSHARD_ARGS:-} "$tmp/dl" "$tmp/u" >/dev/null
    t2=$(date +%s.%N)
    aws s3 cp --quiet "$tmp/u/checkpoint.pt" "s3://bench/alt-$1/checkpoint.pt"
    t3=$(date +%s.%N)
    disk=$(du -sb "$tmp/dl" "$tmp/u" | awk '{ s += $1 } END { printf "%.0f\n", s }')
    rm -rf "$tmp/dl" "$tmp/u"
    check "alt-$1"
    python3 -c "print($t3 - $t0)" >>"$tmp/alt.times"
    echo "$t1 $t2 $t3 $t0" | awk '{ printf "%.2f %.2f %.2f\n", $1 - $4, $2 - $1, $3 - $2 }' >>"$tmp/alt.phases"
    cat "$tmp/rss" >>"$tmp/alt.rss"; echo "$disk" >"$tmp/alt.disk"
    echo "  round $1 aws down + unshard + aws up: $(tail -1 "$tmp/alt.phases") s" >&2
}

# The sink alone: SRC local, against a local unshard + aws up.
sink_local() { # round
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$CKPT" unshard -q --no-progress \
        "$DATA/dcp$MB" "s3://bench/lckpt-$1" >/dev/null
    check "lckpt-$1"
    read -r t rss <"$tmp/time"
    echo "$t" >>"$tmp/lckpt.times"; echo "$rss" >>"$tmp/lckpt.rss"
    local t0 t1
    t0=$(date +%s.%N)
    "$CKPT" unshard -q --no-progress "$DATA/dcp$MB" "$tmp/u" >/dev/null
    aws s3 cp --quiet "$tmp/u/checkpoint.pt" "s3://bench/lalt-$1/checkpoint.pt"
    t1=$(date +%s.%N)
    rm -rf "$tmp/u"
    check "lalt-$1"
    python3 -c "print($t1 - $t0)" >>"$tmp/lalt.times"
    echo "  round $1 local->s3: ckpt $t s, unshard + aws up $(tail -1 "$tmp/lalt.times") s" >&2
}


echo "host: $(nproc) CPUs, $(uname -r); s3rver on Node $(node --version); $MB MiB, 4 ranks" >&2
for r in $(seq 1 "$R"); do sink "$r"; alt "$r"; sink_local "$r"; done
c=$(median <"$tmp/ckpt.times"); a=$(median <"$tmp/alt.times")
echo "| way | median s ($R rounds) | speed-up | ckpt peak RSS MiB | local disk |"
echo "| --- | --- | --- | --- | --- |"
printf '| ckpt unshard s3:// s3:// | %.2f | %.2fx | %d | 0 |\n' "$c" \
    "$(python3 -c "print($a / $c)")" $(( $(peak "$tmp/ckpt.rss") / 1024 ))
printf '| aws down (%s) + ckpt unshard (%s) + aws up (%s) | %.2f | 1.00x | %d | %d MiB |\n' \
    "$(cut -d' ' -f1 "$tmp/alt.phases" | median)" "$(cut -d' ' -f2 "$tmp/alt.phases" | median)" \
    "$(cut -d' ' -f3 "$tmp/alt.phases" | median)" "$a" \
    $(( $(peak "$tmp/alt.rss") / 1024 )) $(( $(cat "$tmp/alt.disk") >> 20 ))
l=$(median <"$tmp/lckpt.times"); la=$(median <"$tmp/lalt.times")
printf '| ckpt unshard LOCAL s3:// | %.2f | %.2fx | %d | 0 |\n' "$l" \
    "$(python3 -c "print($la / $l)")" $(( $(peak "$tmp/lckpt.rss") / 1024 ))
printf '| ckpt unshard LOCAL local + aws up | %.2f | 1.00x | - | %d MiB |\n' "$la" \
    $(( want >> 20 ))
