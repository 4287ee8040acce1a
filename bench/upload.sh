#!/usr/bin/env bash
# upload.sh - `ckpt upload` against `aws s3 cp --recursive` and, when
# installed, `rclone copy`, on one local s3rver (connected directly, no
# proxy: the Python proxy would be the bottleneck for every tool alike),
# in the same run, each tool with its default settings:
#   (a) one 2 GiB file                      (multipart)
#   (b) 2,000 files of 64 KiB               (20 directories)
#   (c) a torch DCP checkpoint tree         (tests/support/make_dcp.py
#       --case big --size-mb 512: 8 rank shards + .metadata; skipped
#       without torch)
# Every measurement uploads into a fresh prefix (removed afterwards, not
# timed) and is checked: object count and total bytes at DEST. Median of
# R rounds (default 3), tools interleaved within a round; ckpt's peak RSS
# (max over rounds) from /usr/bin/time.
#   bench/upload.sh [ROUNDS]      (build/ckpt and build/storage_tool)
#   CKPT_BASE=path  also time another ckpt binary (tool "base": before/after
#                   in the same run)
#   CASES="a c"     only these cases (default: a b c)
#   BENCH_DIR=...   where the data sets live (default /tmp/ckpt-bench-upload,
#                   kept between runs; needs ~3 GiB plus s3rver's copy)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
R=${1:-3}
CKPT=${CKPT:-build/ckpt}
TOOL=${CKPT_BUILD:-build}/storage_tool
DATA=${BENCH_DIR:-/tmp/ckpt-bench-upload}
. tests/support/s3env.sh
s3env_start --no-proxy --bucket bench --max-seconds 7200
tmp=$(mktemp -d)
trap 's3env_stop; rm -rf "$tmp"' EXIT

make_data() {
    mkdir -p "$DATA"
    if [ ! -f "$DATA/a/big.bin" ]; then
        mkdir -p "$DATA/a"
        head -c $((2 << 30)) /dev/urandom >"$DATA/a/big.bin"
    fi
    if [ ! -d "$DATA/b" ]; then
        python3 - "$DATA/b" <<'PY'
import os, sys
root = sys.argv[1]
for i in range(2000):
    d = os.path.join(root, "d%02d" % (i // 100))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%04d" % i), "wb") as f:
        f.write(os.urandom(65536))
PY
    fi
    if [ ! -d "$DATA/c" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
        /usr/bin/python3 tests/support/make_dcp.py "$DATA/dcp" --case big \
            --size-mb 512 >/dev/null
        mv "$DATA/dcp/ckpt" "$DATA/c" && rm -rf "$DATA/dcp"
    fi
}

export RCLONE_CONFIG_S3RVER_TYPE=s3 RCLONE_CONFIG_S3RVER_PROVIDER=Other \
    RCLONE_CONFIG_S3RVER_ENDPOINT=$AWS_ENDPOINT_URL \
    RCLONE_CONFIG_S3RVER_ACCESS_KEY_ID=S3RVER \
    RCLONE_CONFIG_S3RVER_SECRET_ACCESS_KEY=S3RVER \
    RCLONE_CONFIG_S3RVER_FORCE_PATH_STYLE=true

cmd_for() { # tool src prefix: sets cmd
    case $1 in
    ckpt) cmd=(env "CKPT_STATE_DIR=$tmp/state" "$CKPT" upload -q "$2"
               "s3://bench/$3") ;;
    base) cmd=(env "CKPT_STATE_DIR=$tmp/state" "$CKPT_BASE" upload -q "$2"
               "s3://bench/$3") ;;
    aws) cmd=(aws --endpoint-url "$AWS_ENDPOINT_URL" s3 cp --recursive
              --only-show-errors "$2" "s3://bench/$3/") ;;
    rclone) cmd=(env -u AWS_CA_BUNDLE rclone --config /dev/null copy "$2"
                 "s3rver:bench/$3") ;;
    esac
}

check_dest() { # prefix files bytes
    local got
    got=$("$TOOL" ls -r "s3://bench/$1" |
          awk -F'\t' '{ n++; s += $2 } END { printf "%d %.0f\n", n, s }')
    [ "$got" = "$2 $3" ] || { echo "DEST $1: got $got, want $2 $3" >&2; exit 1; }
}

measure() { # case tool round src files bytes
    local prefix="$1-$2-$3" t
    cmd_for "$2" "$4" "$prefix"
    /usr/bin/time -f "%e %M" -o "$tmp/time" "${cmd[@]}" >/dev/null
    check_dest "$prefix" "$5" "$6"
    "$TOOL" rm-tree "s3://bench/$prefix"
    read -r t rss <"$tmp/time"
    echo "$t" >>"$tmp/$1-$2.times"
    echo "$rss" >>"$tmp/$1-$2.rss"
    echo "  $1 $2 round $3: $t s, peak RSS $((rss / 1024)) MiB" >&2
}


tools=(ckpt)
[ -n "${CKPT_BASE:-}" ] && tools+=(base)
tools+=(aws)
CASES=${CASES:-a b c}
command -v rclone >/dev/null && tools+=(rclone)
make_data
echo "host: $(nproc) CPUs, $(uname -r); s3rver 3.7.1 on Node $(node --version)" >&2
for c in $CASES; do
    src=$DATA/$c
    [ -d "$src" ] || { echo "case $c: no data (needs torch); skipped" >&2; continue; }
    files=$(find "$src" -type f | wc -l)
    bytes=$(find "$src" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
    for r in $(seq 1 "$R"); do
        for t in "${tools[@]}"; do
            measure "$c" "$t" "$r" "$src" "$files" "$bytes"
        done
    done
    echo "$files $bytes" >"$tmp/$c.size"
done

echo "| case | tool | median s ($R rounds) | MB/s | ckpt speed-up | peak RSS MiB |"
echo "| --- | --- | --- | --- | --- | --- |"
for c in $CASES; do
    [ -f "$tmp/$c.size" ] || continue
    read -r files bytes <"$tmp/$c.size"
    base=$(median <"$tmp/$c-ckpt.times")
    for t in "${tools[@]}"; do
        m=$(median <"$tmp/$c-$t.times")
        rss=$(peak "$tmp/$c-$t.rss")
        printf '| %s (%s files, %s B) | %s | %.2f | %.1f | %.2fx | %d |\n' \
            "$c" "$files" "$bytes" "$t" "$m" \
            "$(python3 -c "print($bytes / $m / 1e6)")" \
            "$(python3 -c "print($m / $base)")" $((rss / 1024))
    done
done
