#!/usr/bin/env bash
# ctest-cost: 60
# ckpt ls -l / clean on Orbax steps stored in S3 (s3rver behind the
# signature-verifying proxy): the same verdicts and array rows as on local
# disk, an OCDBT step listed and judged from its manifest, B+tree nodes and
# array metadata only (bytes counted by the proxy), and a truncated data
# file judged incomplete from the listing's sizes; a database with numbered
# manifests.
source "$(dirname "$0")/../support/lib.sh"
source "$SRC/tests/support/s3env.sh"
s3env_start --bucket runs || exit 1
trap 's3env_stop; rm -rf "$T"' EXIT
aws() { command aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"; }

/usr/bin/python3 "$SRC/tests/support/make_orbax.py" "$T/fx" || exit 1
aws s3 cp --quiet --recursive "$T/fx/run" s3://runs/orbax/run/
local_rows=$("$CKPT" ls -l "$T/fx/run" | cut -f2-)
remote_rows=$("$CKPT" ls -l s3://runs/orbax/run | cut -f2-)
check "remote ls -l = local ls -l" "$local_rows" "$remote_rows"
check "arrays listed" 52 "$(grep -c '	array	' <<<"$remote_rows")"

# Judged in place: one data file cut short, one gone.
cp -r "$T/fx/run" "$T/bad"
P1=state/ocdbt.process_1/d/0000000000000000000000000000abc1
P0=state/ocdbt.process_0/d/0000000000000000000000000000abc0
end=$(stat -c %s "$T/bad/1/$P1")
truncate -s 10 "$T/bad/1/$P1"
rm "$T/bad/2/$P0"
aws s3 cp --quiet --recursive "$T/bad" s3://runs/orbax/bad/
out=$("$CKPT" ls s3://runs/orbax/bad | cut -f2,5)
check "remote verdicts" "1	incomplete: '1/$P1' has 10 bytes, the OCDBT tree references bytes up to $end (truncated)
2	incomplete: 2/$P0 missing: referenced by the OCDBT tree
3	complete
4	complete" "$out"

# Unsharded straight from S3 (ranged reads), the same bytes as from disk:
# a whole step, an item directory, the old format.
for src in 1 2/state 3 4; do
    "$CKPT" unshard --no-progress --format safetensors "$T/fx/run/$src" \
        "$T/loc-${src%%/*}" >/dev/null 2>&1
    "$CKPT" unshard --no-progress --format safetensors \
        "s3://runs/orbax/run/$src" "$T/rem-${src%%/*}" >/dev/null 2>"$T/err"
    check "remote unshard $src: exit" 0 $?
    check "remote unshard $src: same bytes" "$(cat "$T/loc-${src%%/*}/model.safetensors" | md5sum)" \
        "$(cat "$T/rem-${src%%/*}/model.safetensors" 2>/dev/null | md5sum)"
done
out=$("$CKPT" unshard --no-progress s3://runs/orbax/bad/1 "$T/rem-bad" 2>&1)
check "remote unshard of a truncated step: exit 1" 1 $?
check "remote unshard of a truncated step: nothing written" no \
    "$([ -e "$T/rem-bad" ] && echo yes || echo no)"

# Numbered manifests (manifest_kind 1): the newest one found by listing
# the database directory in S3, judged and unsharded in place.
/usr/bin/python3 - "$T/num/1" "$SRC/tests/support" <<'PY' || exit 1
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import make_orbax
make_orbax.build_ocdbt(sys.argv[1] + "/state",
                       make_orbax.leaves(np.random.default_rng(5)), False,
                       numbered=True)
make_orbax.step_meta(sys.argv[1], "state")
PY
aws s3 cp --quiet --recursive "$T/num" s3://runs/orbax/num/
check "numbered: remote ls -l = local ls -l" \
    "$("$CKPT" ls -l "$T/num" | cut -f2-)" \
    "$("$CKPT" ls -l s3://runs/orbax/num | cut -f2-)"
check "numbered: complete, 13 arrays" "complete 13" \
    "$("$CKPT" ls -l s3://runs/orbax/num | awk -F'\t' '$3 != "array" {v=$5} $3 == "array" {n++} END {print v, n}')"
"$CKPT" unshard --no-progress --format safetensors "$T/num/1" "$T/num-loc" \
    >/dev/null 2>&1
"$CKPT" unshard --no-progress --format safetensors s3://runs/orbax/num/1 \
    "$T/num-rem" >/dev/null 2>"$T/err"
check "numbered: remote unshard exit" 0 $?
check "numbered: remote unshard same bytes" \
    "$(md5sum < "$T/num-loc/model.safetensors")" \
    "$(md5sum < "$T/num-rem/model.safetensors" 2>/dev/null)"

# A 32 MiB step: listing reads a tiny fraction of it.
/usr/bin/python3 "$SRC/tests/support/make_orbax.py" "$T/big" --big 32 || exit 1
aws s3 cp --quiet --recursive "$T/big/run" s3://runs/orbax/big/
size=$(du -sb "$T/big/run" | cut -f1)
s3env_reset_stats >/dev/null
out=$("$CKPT" ls -l s3://runs/orbax/big | cut -f2-5 | head -2)
check "big step listed" "1	1	orbax	complete
1	array	params.layer000.w	float32" "$out"
fetched=$(s3env_stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["get_bytes"])')
echo "remote OCDBT step: fetched $fetched of $size bytes"
check "ls -l reads < 1% of the step" 1 $((fetched * 100 < size))
s3env_reset_stats >/dev/null
"$CKPT" unshard --no-progress --format safetensors s3://runs/orbax/big/1 \
    "$T/big-out" >/dev/null 2>&1
check "big step unsharded from S3" 0 $?
fetched=$(s3env_stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["get_bytes"])')
echo "remote OCDBT unshard: fetched $fetched of $size bytes"
check "unshard reads each byte about once" 1 $((fetched < size + size / 20))

finish
