#!/usr/bin/env bash
# ctest-cost: 20
# upload_policy.sh - the write policy (storage.h "Write policy") as the
# signing proxy counts it: with four files in flight a 20 MiB file goes
# as one PUT streamed from the file (not buffered: peak RSS stays low), a lone 20 MiB file as a multipart upload of 8 MiB
# parts; a PUT body damaged on the way (proxy flips a byte; s3rver stores
# it and answers its MD5 as ETag) is caught by the ETag and sent again,
# and a PUT damaged on every attempt fails and its object is taken away.
. "$(dirname "$0")/../support/lib.sh"
. "$SRC/tests/support/s3env.sh"
s3env_start --bucket ckpt-test || exit 1
trap 's3env_stop; rm -rf "$T"' EXIT
export CKPT_STATE_DIR=$T/state
aws() { command aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"; }
stat_of() { # python expression over the proxy's counters `d`
    s3env_stats | python3 -c "import json,sys; d=json.load(sys.stdin); m=d['methods']; print($1)"
}
mkdir -p "$T/four" "$T/one"
for i in 1 2 3 4; do
    head -c $((20 << 20)) /dev/urandom >"$T/four/f$i"
done
cp "$T/four/f1" "$T/one/f1"

# --- four files in flight: one PUT each, no multipart request, streamed
# from the files. The peak RSS is judged against the same binary's for
# four 1 KiB files (a sanitizer build starts higher): buffered whole, the
# four would add 80 MiB.
mkdir -p "$T/tiny"
for i in 1 2 3 4; do head -c 1024 /dev/urandom >"$T/tiny/f$i"; done
/usr/bin/time -f %M -o "$T/rss0" "$CKPT" upload -q "$T/tiny" s3://ckpt-test/tiny
s3env_reset_stats
/usr/bin/time -f %M -o "$T/rss" "$CKPT" upload -q "$T/four" s3://ckpt-test/four
check "four: exit" 0 $?
rss=$(cat "$T/rss") rss0=$(cat "$T/rss0")
check "four: peak RSS at most 32 MiB above four tiny files' ($rss0 -> $rss KiB)" \
    1 $((rss - rss0 < 32 * 1024))
check "four: requests" "PUT=4 POST=0" \
    "$(stat_of '"PUT=%d POST=%d" % (m.get("PUT", 0), m.get("POST", 0))')"
check "four: bytes sent once" $((80 << 20)) "$(stat_of 'd["put_bytes"]')"
aws s3 cp --recursive --quiet s3://ckpt-test/four/ "$T/back4"
check "four: read back identical" "" "$(diff -r "$T/four" "$T/back4" 2>&1)"
etag=$(aws s3api head-object --bucket ckpt-test --key four/f2 \
       --query ETag --output text | tr -d '"')
check "four: ETag is the MD5" "$(md5sum <"$T/four/f2" | cut -d' ' -f1)" "$etag"
meta=$(aws s3api head-object --bucket ckpt-test --key four/f2 \
       --query 'Metadata."ckpt-md5"' --output text)
check "four: MD5 in metadata" "$etag" "$meta"

# --- one file alone: its parts are its only parallelism
s3env_reset_stats
"$CKPT" upload -q "$T/one" s3://ckpt-test/one
check "one: exit" 0 $?
check "one: requests" "PUT=3 POST=2" \
    "$(stat_of '"PUT=%d POST=%d" % (m.get("PUT", 0), m.get("POST", 0))')"
aws s3 cp --quiet s3://ckpt-test/one/f1 "$T/back1"
check "one: read back identical" "" "$(cmp "$T/one/f1" "$T/back1" 2>&1)"

# --- a body damaged once: detected by the ETag, sent again
s3env_faults '{"corrupt_put":1,"corrupt_match":"/bad1/f3"}'
s3env_reset_stats
"$CKPT" upload -q "$T/four" s3://ckpt-test/bad1
check "damaged once: exit" 0 $?
check "damaged once: fault hit" 1 "$(stat_of 'd["faults"]["corrupt_put"]')"
check "damaged once: f3 sent twice" "PUT=5 POST=0" \
    "$(stat_of '"PUT=%d POST=%d" % (m.get("PUT", 0), m.get("POST", 0))')"
aws s3 cp --recursive --quiet s3://ckpt-test/bad1/ "$T/backb"
check "damaged once: read back identical" "" "$(diff -r "$T/four" "$T/backb" 2>&1)"

# --- damaged on every attempt: the file fails, its object is gone
s3env_faults '{"corrupt_put":100,"corrupt_match":"/bad2/f3"}'
out=$("$CKPT" upload --retries 3 "$T/four" s3://ckpt-test/bad2 2>&1)
check "always damaged: exit" 1 $?
check "always damaged: failed row" 1 \
    "$(echo "$out" | grep -c "^error.*f3.*DEST reports ETag .* but the bytes sent have MD5 $(md5sum <"$T/four/f3" | cut -d' ' -f1) (3 attempts)")"
s3env_faults '{"corrupt_put":0}'
check "always damaged: object taken away" "f1 f2 f4" \
    "$(aws s3 ls s3://ckpt-test/bad2/ | awk '{ print $4 }' | sort | xargs)"
finish
