#!/usr/bin/env bash
# s3_list_delete.sh - list + delete a prefix of N small objects (default
# 20,000, 100 bytes each, 100 to a directory like the shards of checkpoint
# steps) on a local s3rver, connected directly (no proxy: the Python proxy
# would be the bottleneck for every tool alike). s3rver scans an object's
# directory on every delete, so a flat prefix of 20,000 keys would measure
# only that scan. ckpt (storage_tool
# rm-tree: ListObjectsV2 + DeleteObjects batches of 1,000, 4 in flight)
# against `aws s3 rm --recursive` and, when installed, rclone's `delete`,
# in the same run; median of R rounds (default 3). The objects are
# recreated (not timed) before every round of every tool.
#   bench/s3_list_delete.sh [N] [ROUNDS]     (build/storage_tool must exist)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N=${1:-20000}
R=${2:-3}
T=${CKPT_BUILD:-build}/storage_tool
. tests/support/s3env.sh
s3env_start --no-proxy --bucket bench --max-seconds 3600

populate() {
    "$T" -j 32 put-many s3://bench/p "$N" 100 100
}

secs() { # run "$@", print elapsed seconds
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    python3 -c "print($t1 - $t0)"
}

count() { # objects left under the prefix (a missing prefix is an error)
    { "$T" ls -r s3://bench/p 2>/dev/null || true; } | wc -l
}


run_tool() { # name, command...
    local name=$1; shift
    local times=()
    for _ in $(seq 1 "$R"); do
        populate
        [ "$(count)" = "$N" ] || { echo "populate failed" >&2; exit 1; }
        times+=("$(secs "$@")")
        local left
        left=$(count)
        [ "$left" = 0 ] || { echo "$name left $left objects" >&2; exit 1; }
    done
    printf '%s\n' "${times[@]}" | median >"$tmp/$name"
    echo "$name: ${times[*]} -> median $(cat "$tmp/$name") s" >&2
}

tmp=$(mktemp -d)
trap 's3env_stop; rm -rf "$tmp"' EXIT

run_tool ckpt "$T" rm-tree s3://bench/p
run_tool aws aws --endpoint-url "$AWS_ENDPOINT_URL" s3 rm --recursive \
    --only-show-errors s3://bench/p/
if command -v rclone >/dev/null; then
    export RCLONE_CONFIG_LOCAL_TYPE=s3 RCLONE_CONFIG_LOCAL_PROVIDER=Other \
        RCLONE_CONFIG_LOCAL_ENDPOINT=$AWS_ENDPOINT_URL \
        RCLONE_CONFIG_LOCAL_ACCESS_KEY_ID=S3RVER \
        RCLONE_CONFIG_LOCAL_SECRET_ACCESS_KEY=S3RVER \
        RCLONE_CONFIG_LOCAL_FORCE_PATH_STYLE=true
    # rclone trips over an AWS_CA_BUNDLE it cannot use with plain http.
    run_tool rclone env -u AWS_CA_BUNDLE rclone --config /dev/null delete \
        --checkers 32 \
        local:bench/p
fi

c=$(cat "$tmp/ckpt")
echo "| tool | median s ($R rounds, $N objects) | vs ckpt |"
echo "| --- | --- | --- |"
for t in ckpt aws rclone; do
    [ -f "$tmp/$t" ] || continue
    v=$(cat "$tmp/$t")
    printf '| %s | %.2f | %.1fx |\n' "$t" "$v" "$(python3 -c "print($v / $c)")"
done
