#!/usr/bin/env bash
# ctest-cost: 12
# ckpt unshard of a DCP checkpoint stored in S3 (s3rver behind the
# signature-verifying proxy): read by ranged GETs, output bit-exact against
# the state dict torch 1.13 saved.
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
finish
