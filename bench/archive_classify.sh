#!/usr/bin/env bash
# Classify a ~1 GB run archive with ~5,000 members: `ckpt clean --dry-run`
# against `tar -tf` of the same archive, for .tar, .tar.gz and .tar.zst.
# Median of N runs each (default 3), page cache warm for both (the same
# bytes are read by both tools, so a warm cache compares the CPU work).
# For plain .tar also reports how many archive bytes ckpt read.
#
# usage: bench/archive_classify.sh [MEMBERS] [MEMBER_KB] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
members=${1:-5000}
kb=${2:-200}
runs=${3:-3}
CKPT=${CKPT:-build/ckpt}
W=$(mktemp -d "${TMPDIR:-/var/tmp}/ckpt-bench-XXXXXX")
trap 'rm -rf "$W"' EXIT

# A run: the sample's real DCP steps, then steps of filler rank shards.
python3 tests/support/gen_runs.py "$W/src" >/dev/null
run="$W/src/2871001"
steps=$(( (members + 199) / 200 ))
python3 - "$run" "$steps" "$kb" "$members" <<'PY'
import os, shutil, sys
run, steps, kb, members = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
meta = os.path.join(run, "step1000", "model_and_optim", ".metadata")
block = os.urandom(kb * 1024)
n = 0
for s in range(steps):
    d = os.path.join(run, "step%d" % (3000 + 1000 * s), "model_and_optim")
    os.makedirs(d)
    shutil.copy(meta, d)
    for r in range(200):
        if n >= members:
            break
        with open(os.path.join(d, "__%d_0.distcp" % r), "wb") as f:
            f.write(block[r:] + block[:r])
        n += 1
PY
(cd "$W/src" && tar -cf "$W/run.tar" 2871001 && gzip -1 -c "$W/run.tar" > "$W/run.tar.gz" \
    && zstd -q -3 -T0 "$W/run.tar" -o "$W/run.tar.zst")

timeit() { # prints seconds
    local s e
    s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N)
    echo "$e - $s" | bc -l
}

printf '| archive | size | members | tar -tf (s) | ckpt clean -n (s) | ratio ckpt/tar | ckpt bytes read |\n'
printf '|---|---|---|---|---|---|---|\n'
for a in run.tar run.tar.gz run.tar.zst; do
    f="$W/$a"
    case $a in *.gz) topt=-z;; *.zst) topt=--zstd;; *) topt=;; esac
    cat "$f" >/dev/null # warm the cache for both
    t_tar=$(for i in $(seq "$runs"); do timeit tar $topt -tf "$f"; done | median)
    t_ck=$(for i in $(seq "$runs"); do timeit "$CKPT" clean -n --min-age 0 --max-archive-size 100G "$f"; done | median)
    verdict=$("$CKPT" clean -n -v --min-age 0 --max-archive-size 100G "$f" 2>"$W/err" | cut -f1)
    bytes=$(grep -o 'read [0-9]* of [0-9]*' "$W/err" | head -1)
    n=$(tar $topt -tf "$f" | grep -vc '/$')
    size=$(stat -c %s "$f")
    printf '| %s | %s MB | %s | %.3f | %.3f | %.2f | %s (%s) |\n' "$a" \
        $((size / 1000000)) "$n" "$t_tar" "$t_ck" \
        "$(echo "$t_ck / $t_tar" | bc -l)" "${bytes#read }" "$verdict"
done
