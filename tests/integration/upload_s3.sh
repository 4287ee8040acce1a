#!/usr/bin/env bash
# ctest-cost: 90
# ctest-labels: slow
# upload_s3.sh - `ckpt upload` against s3rver behind the signing,
# fault-injecting proxy: a tree with 0-byte files, a large file (one
# streamed PUT in the tree, multipart alone; 100 MiB here,
# CKPT_TEST_BIG_MB=600 for the full size: then multipart in the tree too),
# 2,000 small files and odd names, uploaded while 30% of requests get 503
# SlowDown, some get R2's same-object 429, GET bodies are cut and PUT/POST
# replies are lost to resets. Debian's aws CLI lists it and reads it back byte-identical;
# a rerun sends nothing; remote->local and remote->remote copy it too.
. "$(dirname "$0")/../support/lib.sh"
. "$SRC/tests/support/s3env.sh"
s3env_start --bucket ckpt-test || exit 1
trap 's3env_stop; chmod -R u+rwx "$T" 2>/dev/null; rm -rf "$T"' EXIT
export CKPT_STATE_DIR=$T/state
TREE="/usr/bin/python3 $SRC/tests/support/upload_tree.py"
aws() { command aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"; }
stat_of() { # python expression over the proxy's counters `d`
    s3env_stats | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"
}
summary() { # the --json summary line: uploaded skipped failed bytes
    tail -1 | python3 -c 'import json,sys; d=json.load(sys.stdin)
print(d["type"], d["copy"], d["skip"], d["error"], d["bytes"])'
}

$TREE make "$T/src" --big-mb "${CKPT_TEST_BIG_MB:-100}" --small 2000
want=$($TREE list "$T/src")
n=$(echo "$want" | wc -l)
total=$(echo "$want" | awk -F'\t' '{ s += $1 } END { print s }')

# --- upload under faults
# A request fails when all its attempts meet a fault: with 35% of them
# faulty, the default 10 attempts lose one of ~2,000 objects in about one
# run in 20 (0.35^10 * 2000); 20 attempts make that about 1 in 600,000.
s3env_faults '{"slowdown":0.3,"r2_429":0.02,"reset":0.05,"reset_writes":true}'
out=$("$CKPT" upload --json --retries 20 "$T/src" s3://ckpt-test/t 2>"$T/err")
check "upload exit" 0 $?
check "upload summary" "total $n 0 0 $total" "$(echo "$out" | summary)"
check "no error rows" "" "$(echo "$out" | grep -v '"type":"total"')"
f=$(stat_of 'd["faults"]["slowdown"] > 100 and d["faults"]["reset"] > 0 and d["faults"]["r2_429"] > 0')
check "faults were injected" True "$f"
s3env_faults '{"slowdown":0,"r2_429":0,"reset":0,"reset_writes":false}'

# --- aws-cli sees exactly the tree, byte-identical
got=$(aws s3 ls --recursive s3://ckpt-test/t/ | PREFIX=t/ $TREE awsls)
check "aws lists the tree" "$want" "$got"
aws s3 cp --recursive --quiet s3://ckpt-test/t/ "$T/aws-back"
diff -r "$T/src" "$T/aws-back" >"$T/diff" 2>&1
check "aws reads it back identical" "" "$(cat "$T/diff")"
meta=$(aws s3api head-object --bucket ckpt-test --key "t/odd names/a b.txt" \
       --query 'Metadata."ckpt-md5"' --output text)
check "whole-object MD5 in metadata" "$(md5sum <"$T/src/odd names/a b.txt" | cut -d' ' -f1)" "$meta"
# In a tree of many files, big.bin went as one streamed PUT (the write
# policy; docs/storage.md); alone, it goes in parts.
etag=$(aws s3api head-object --bucket ckpt-test --key t/big.bin \
       --query ETag --output text | tr -d '"')
if [ "${CKPT_TEST_BIG_MB:-100}" -lt 200 ]; then
    check "big file in a tree: one PUT" "$(md5sum <"$T/src/big.bin" | cut -d' ' -f1)" "$etag"
else
    check "big file in a tree: multipart above 200 MiB" 1 "$(echo "$etag" | grep -c -- -)"
fi
s3env_faults '{"slowdown":0.3,"r2_429":0.02,"reset":0.05,"reset_writes":true}'
"$CKPT" upload -q --retries 20 "$T/src/big.bin" s3://ckpt-test/lone/big.bin
check "lone big file under faults: exit" 0 $?
s3env_faults '{"slowdown":0,"r2_429":0,"reset":0,"reset_writes":false}'
ps=$(aws s3api head-object --bucket ckpt-test --key lone/big.bin \
     --query 'Metadata."ckpt-part-size"' --output text)
check "lone big file: part size in metadata" 8388608 "$ps"
aws s3 cp --quiet s3://ckpt-test/lone/big.bin "$T/lone.bin"
check "lone big file: read back identical" "" "$(cmp "$T/src/big.bin" "$T/lone.bin" 2>&1)"
rm -f "$T/lone.bin"

# --- a rerun sends nothing
s3env_reset_stats
out=$("$CKPT" upload --json "$T/src" s3://ckpt-test/t 2>"$T/err")
check "rerun exit" 0 $?
check "rerun skips all" "total 0 $n 0 0" "$(echo "$out" | summary)"
check "rerun PUT bytes" 0 "$(stat_of 'd["put_bytes"]')"
# Without the journal, the content is compared (ETag / MD5), not trusted.
s3env_reset_stats
out=$("$CKPT" upload --json --checksum "$T/src" s3://ckpt-test/t 2>"$T/err")
check "checksum rerun skips all" "total 0 $n 0 0" "$(echo "$out" | summary)"
check "checksum rerun PUT bytes" 0 "$(stat_of 'd["put_bytes"]')"

# --- one changed file: a conflict unless --overwrite (DEST's copy may be
# the only one), then sent again, nothing else
printf 'changed' >"$T/src/odd names/tilde~x"
touch -d '2001-01-01' "$T/src/odd names/tilde~x"
s3env_reset_stats
out=$("$CKPT" upload -v "$T/src" s3://ckpt-test/t 2>"$T/err")
check "changed file, no --overwrite: exit" 1 $?
check "changed file, no --overwrite: conflict" "error	$T/src/odd names/tilde~x	s3://ckpt-test/t/odd names/tilde~x	conflict: s3://ckpt-test/t/odd names/tilde~x already exists at DEST" \
    "$(echo "$out" | grep '^error' | sed 's/ with .*//')"
check "changed file, no --overwrite: nothing sent" 0 "$(stat_of 'd["put_bytes"]')"
s3env_reset_stats
out=$("$CKPT" upload -v --overwrite "$T/src" s3://ckpt-test/t 2>"$T/err")
check "changed file row" "copy	$T/src/odd names/tilde~x	s3://ckpt-test/t/odd names/tilde~x" \
    "$(echo "$out" | grep '^copy')"
check "changed file bytes" 7 "$(stat_of 'd["put_bytes"]')"
want=$($TREE list "$T/src")

# --- remote -> local, remote -> remote
"$CKPT" upload -q s3://ckpt-test/t "$T/local"
check "remote->local exit" 0 $?
diff -r "$T/src" "$T/local" >"$T/diff" 2>&1
check "remote->local identical" "" "$(cat "$T/diff")"
s3env_faults '{"reset":0.1}'
"$CKPT" upload -q s3://ckpt-test/t s3://ckpt-test/copy
check "remote->remote exit" 0 $?
s3env_faults '{"reset":0}'
got=$(aws s3 ls --recursive s3://ckpt-test/copy/ | PREFIX=copy/ $TREE awsls)
check "remote->remote listing" "$want" "$got"
"$CKPT" upload -q s3://ckpt-test/copy "$T/local2"
diff -r "$T/src" "$T/local2" >"$T/diff" 2>&1
check "remote->remote identical" "" "$(cat "$T/diff")"

# --- a single file, into a prefix and to a name
"$CKPT" upload -q "$T/src/empty" s3://ckpt-test/one/
"$CKPT" upload -q "$T/src/odd names/a+b=c.txt" s3://ckpt-test/one/renamed
got=$(aws s3 ls --recursive s3://ckpt-test/one/ | PREFIX=one/ $TREE awsls)
check "single files" "$(printf '0\tempty\n101\trenamed')" "$got"

check "signatures all valid" 0 "$(stat_of 'd["sig_fail"]')"
finish
