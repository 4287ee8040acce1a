#!/usr/bin/env bash
# ctest-cost: 40
# ctest-labels: slow
# ckpt unshard of a DCP checkpoint stored in S3 (s3rver behind the
# signature-verifying proxy): read by ranged GETs, output bit-exact against
# the state dict torch 1.13 saved. A 24 MiB 2-rank checkpoint (~300
# tensors, mixed sharding) is read through the read-ahead blocks
# (source.c), with the default budget and with one so small that blocks
# are pushed out: bit-exact both ways, no more bytes than piece-by-piece
# reads, in a fraction of their GETs.
source "$(dirname "$0")/../support/lib.sh"
source "$SRC/tests/support/s3env.sh"
s3env_start --bucket ck || exit 1
trap 's3env_stop; rm -rf "$T"' EXIT

/usr/bin/python3 "$SRC/tests/support/make_dcp.py" "$T/f" --case multi --no-verify >/dev/null
command aws --endpoint-url "$AWS_ENDPOINT_URL" s3 cp --quiet --recursive \
    "$T/f/ckpt" s3://ck/multi/
s3env_reset_stats >/dev/null
"$CKPT" unshard -q s3://ck/multi "$T/out" >/dev/null
check "remote unshard exit" 0 $?
check "output files" "checkpoint.pt" "$(ls "$T/out")"
out=$(/usr/bin/python3 "$SRC/tests/support/check_unshard.py" "$T/out/checkpoint.pt" "$T/f/expected.pt")
check "bit-exact" 0 $?
echo "$out"
stats=$(s3env_stats)
sig=$(python3 -c 'import json,sys; s=json.loads(sys.argv[1]); print(s["sig_fail"], s["methods"].get("PUT",0))' "$stats")
check "all requests signed correctly, nothing written remotely" "0 0" "$sig"
total=$(du -sb "$T/f/ckpt" | cut -f1)
got=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["get_bytes"])' "$stats")
echo "fetched $got bytes for a $total-byte checkpoint"
# Item headers (each item is a small zip) are read apart from the tensor
# bytes, so tiny checkpoints cost some overhead; nothing is fetched twice
# over.
check "fetched less than twice the checkpoint" 1 $((got < 2 * total))

/usr/bin/python3 "$SRC/tests/support/make_dcp.py" "$T/b" --case big --ranks 2 \
    --size-mb 24 --no-verify >/dev/null
command aws --endpoint-url "$AWS_ENDPOINT_URL" s3 cp --quiet --recursive \
    "$T/b/ckpt" s3://ck/big/
total=$(du -sb "$T/b/ckpt" | cut -f1)
gets() { # GET requests and bytes of the last run
    s3env_stats | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["get_requests"], s["get_bytes"])'
}
for mb in 64 6 0; do
    s3env_reset_stats >/dev/null
    CKPT_READAHEAD_MB=$mb "$CKPT" unshard -q s3://ck/big "$T/big$mb" >/dev/null
    check "big, read-ahead ${mb} MiB: exit" 0 $?
    read -r n bytes <<<"$(gets)"
    echo "big, read-ahead $mb MiB: $n GETs, $bytes bytes for $total"
    eval "n$mb=$n bytes$mb=$bytes"
done
out=$(/usr/bin/python3 "$SRC/tests/support/check_unshard.py" "$T/big64/checkpoint.pt" "$T/b/expected.pt")
check "big: bit-exact" 0 $?
echo "$out"
check "big, 6 MiB (blocks pushed out): same bytes" "" "$(cmp "$T/big64/checkpoint.pt" "$T/big6/checkpoint.pt")"
check "big, off: same bytes" "" "$(cmp "$T/big64/checkpoint.pt" "$T/big0/checkpoint.pt")"
# Blocks add no bytes to what piece-by-piece reads fetch (the probes'
# 64 KiB windows fetch most of such small items once more, either way),
# also when blocks are pushed out: fetching them again and again read
# 2.7x the bytes once.
check "big, 64 MiB: fetched < 1.1x of reads piece by piece" 1 $((bytes64 * 10 < bytes0 * 11))
check "big, 6 MiB: fetched < 1.1x of reads piece by piece" 1 $((bytes6 * 10 < bytes0 * 11))
# Probing costs one GET per item either way; the copy's pieces become a
# few blocks: well under the GETs of piece-by-piece reads.
check "big, 64 MiB: fewer than 2/3 the GETs" 1 $((n64 * 3 < n0 * 2))
finish
