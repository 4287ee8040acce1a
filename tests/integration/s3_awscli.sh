#!/usr/bin/env bash
# ctest-cost: 11
# s3_awscli.sh - cross-check with Debian's aws-cli against the same server
# (s3rver behind the verifying proxy): objects ckpt writes are listed and
# read back byte-identical by aws, and objects aws writes (multipart
# included) by ckpt; ckpt's rm-tree removes what aws wrote.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/support/s3env.sh
T=${CKPT_BUILD:-build}/storage_tool
s3env_start --bucket ckpt-test
tmp=$(mktemp -d)
trap 's3env_stop; rm -rf "$tmp"' EXIT
aws() { command aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"; }
fail() { echo "FAIL: $*" >&2; failed=$((failed + 1)); }
passed=0 failed=0
ok() { passed=$((passed + 1)); }

head -c 9437189 /dev/urandom >"$tmp/big"      # multipart for both sides
printf 'small\n' >"$tmp/small"
names=("a b.txt" "a+b=c.txt" "café/ሴ.bin" "tilde~x")

# ckpt writes, aws reads.
for n in "${names[@]}"; do
    $T put "$tmp/small" "s3://ckpt-test/from-ckpt/$n"
done
$T put "$tmp/big" "s3://ckpt-test/from-ckpt/big"
aws s3 ls --recursive s3://ckpt-test/from-ckpt/ | awk '{ $1=$2=""; print }' |
    sed 's/^  //' | sort >"$tmp/aws-ls"
{ for n in "${names[@]}"; do echo "6 from-ckpt/$n"; done
  echo "9437189 from-ckpt/big"; } | sort >"$tmp/want-ls"
if cmp -s "$tmp/aws-ls" "$tmp/want-ls"; then ok; else
    fail "aws ls of ckpt's objects"; diff "$tmp/aws-ls" "$tmp/want-ls" >&2 || true
fi
aws s3 cp --quiet s3://ckpt-test/from-ckpt/big "$tmp/big.aws"
if cmp -s "$tmp/big" "$tmp/big.aws"; then ok; else fail "aws read of big"; fi
aws s3 cp --quiet "s3://ckpt-test/from-ckpt/café/ሴ.bin" "$tmp/u.aws"
if cmp -s "$tmp/small" "$tmp/u.aws"; then ok; else fail "aws read utf8"; fi

# aws writes, ckpt reads.
aws s3 cp --quiet "$tmp/big" s3://ckpt-test/from-aws/big
for n in "${names[@]}"; do
    aws s3 cp --quiet "$tmp/small" "s3://ckpt-test/from-aws/$n"
done
$T cat s3://ckpt-test/from-aws/big >"$tmp/big.ckpt"
if cmp -s "$tmp/big" "$tmp/big.ckpt"; then ok; else fail "ckpt read of aws big"; fi
$T ls -r s3://ckpt-test/from-aws >"$tmp/ckpt-ls"
printf 'f\t6\ta b.txt\nf\t6\ta+b=c.txt\nf\t9437189\tbig\nf\t6\tcafé/ሴ.bin\nf\t6\ttilde~x\n' \
    >"$tmp/want-ckpt-ls"
if cmp -s "$tmp/ckpt-ls" "$tmp/want-ckpt-ls"; then ok; else
    fail "ckpt ls of aws's objects"; diff "$tmp/ckpt-ls" "$tmp/want-ckpt-ls" >&2 || true
fi
$T cat "s3://ckpt-test/from-aws/a+b=c.txt" >"$tmp/plus"
if cmp -s "$tmp/small" "$tmp/plus"; then ok; else fail "ckpt read of '+' key"; fi

# ckpt deletes what aws wrote; aws sees nothing left.
$T rm-tree s3://ckpt-test/from-aws
if [ -z "$(aws s3 ls --recursive s3://ckpt-test/from-aws/)" ]; then ok; else
    fail "objects left after rm-tree"
fi
sig_fail=$(s3env_stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["sig_fail"])')
if [ "$sig_fail" = 0 ]; then ok; else fail "signature failures: $sig_fail"; fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
