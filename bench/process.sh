#!/usr/bin/env bash
# process.sh - `ckpt process` end to end against the same work done stage
# by stage with the single commands, on one local s3rver behind the test
# proxy (tests/support/s3proxy.py: s3rver alone ignores If-None-Match and
# If-Match, so the workers' leases would not exclude each other; the
# proxy enforces them as S3, R2 and GCS do, and caps every mode alike), in
# the same run:
#   stages     ckpt clean --min-age 0 RUNS...; ckpt unshard RUN RUN for
#              each run (the output lands in the run as stepN-unsharded);
#              ckpt upload --delete-source RUNS... s3://bench/stages/
#   process    ckpt process --no-wandb --min-age 0 RUNDIR --dest
#              s3://bench/process-1 (one worker; it works on --runs,
#              default 4, runs at once)
#   process x4 four `ckpt process` workers started together on the same
#              RUNDIR (they share the queue through their leases)
# Input: RUNS_N run directories (default 40) named by Slurm-like ids, each
# with config.yaml, wandb/ and one sharded step1000 (a real torch 1.13
# DCP checkpoint of STEP_MB MiB, default 64, written once by
# bench/gen_dcp_big.py and copied into every run; not hard-linked: deleting
# one link changes the inode's ctime, and upload then rightly refuses to
# delete the other links as changed during upload), plus one bad run
# (step0 only) per 10. Every round starts from fresh copies (not timed); every result is checked
# (object count and bytes at DEST, sources gone) and DEST is emptied
# afterwards (not timed). Median of ROUNDS (default 3).
#   bash bench/process.sh                  (build/ckpt, build/storage_tool)
#   RUNS_N=40 STEP_MB=256 ROUNDS=3 bash bench/process.sh
#   BENCH_DIR=...   where data lives (default /tmp/ckpt-bench-process)
#   PROCESS_ARGS="--runs 1"   extra options of every `ckpt process`
#                  (--runs 1: one run at a time, the behaviour before
#                  --runs)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CKPT=$(realpath "${CKPT:-build/ckpt}")
TOOL=$(realpath "${CKPT_BUILD:-build}/storage_tool")
N=${RUNS_N:-40}
MB=${STEP_MB:-64}
R=${ROUNDS:-3}
DATA=${BENCH_DIR:-/tmp/ckpt-bench-process}
. tests/support/s3env.sh
s3env_start --bucket bench --max-seconds 14400
tmp=$(mktemp -d)
trap 's3env_stop; rm -rf "$tmp"' EXIT
export CKPT_STATE_DIR=$tmp/state

master=$DATA/step-$MB
if [ ! -f "$master/.metadata" ]; then
    rm -rf "$DATA/gen" && mkdir -p "$DATA"
    /usr/bin/python3 bench/gen_dcp_big.py "$DATA/gen" --size-mb "$MB" >/dev/null
    mv "$DATA/gen" "$master"
fi

# fresh run directories under $1 (copies of the master step)
make_runs() {
    rm -rf "$1" && mkdir -p "$1"
    local i id
    for i in $(seq 1 "$N"); do
        id=$((3100000 + i))
        mkdir -p "$1/$id/wandb" "$1/$id/train_data"
        printf 'run_name: bench-%s\nsave_folder: /scratch/%s\n' "$id" "$id" \
            >"$1/$id/config.yaml"
        if [ $((i % 10)) -eq 0 ]; then   # bad: died after step 0
            mkdir "$1/$id/step0" && printf 'x' >"$1/$id/step0/model.pt"
            continue
        fi
        cp -r "$master" "$1/$id/step1000"
    done
    # old enough for the live-run guard whatever --min-age says
    find "$1" -exec touch -h -d '3 days ago' {} +
}

# files of the step's unsharded copy (checkpoint.pt and what torch_new
# layouts add beside it)
"$CKPT" unshard -q --no-progress "$master" "$tmp/u" >/dev/null
ufiles=$(find "$tmp/u" -type f | wc -l)
rm -rf "$tmp/u"

check() { # prefix: N-N/10 runs with their step and its unsharded copy
    local got want files
    files=$(find "$master" -type f | wc -l)
    got=$("$TOOL" ls -r "s3://bench/$1" | grep -v '\.ckpt-process/' |
          awk -F'\t' '{ n++ } END { print n + 0 }')
    # per good run: config.yaml, step1000's files, step1000-unsharded's
    # files and the run's config.yaml copied into it
    want=$(( (N - N / 10) * (1 + files + ufiles + 1) ))
    [ "$got" = "$want" ] || { echo "DEST $1: $got objects, want $want" >&2; exit 1; }
    [ -z "$(ls -A "$2")" ] || { echo "sources left in $2" >&2; ls "$2" >&2; exit 1; }
}

stages() {
    "$CKPT" clean -q --min-age 0 "$1"/* >/dev/null
    local r
    for r in "$1"/*; do "$CKPT" unshard -q --no-progress "$r" "$r" >/dev/null; done
    "$CKPT" upload -q --delete-source "$1"/* "s3://bench/$2" >/dev/null
}

# shellcheck disable=SC2086  # PROCESS_ARGS: words on purpose
proc1() { "$CKPT" process -q --no-progress --no-wandb --min-age 0 ${PROCESS_ARGS:-} "$1" --dest "s3://bench/$2" >/dev/null; }

proc4() {
    local i pids=()
    for i in 1 2 3 4; do
        # shellcheck disable=SC2086
        "$CKPT" process -q --no-progress --no-wandb --min-age 0 \
            ${PROCESS_ARGS:-} "$1" --dest "s3://bench/$2" >/dev/null & pids+=($!)
    done
    local rc=0
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    return $rc
}

# CPU seconds (user + system) of the test servers, "S3RVER PROXY" (the
# processes below s3env's: node is s3rver, python the proxy), from /proc
server_cpu() {
    local hz p
    hz=$(getconf CLK_TCK)
    for p in $(ps -o pid= --ppid "$S3ENV_PID"); do
        printf '%s ' "$(cat "/proc/$p/comm" 2>/dev/null)"
        cat "/proc/$p/stat" 2>/dev/null
    done | awk -v hz="$hz" '{ node = $1 ~ /node/; sub(/.*\) /, "");
        if (node) n += $12 + $13; else q += $12 + $13 }
        END { printf "%.2f %.2f", n / hz, q / hz }'
}

# child_cpu VAR: CPU seconds of this shell's waited-for children (the
# ckpt processes) into VAR; `times` runs in this shell, not in a $(...)
# subshell that has no children
child_cpu() {
    times >"$tmp/times"
    printf -v "$1" '%s' "$(awk 'NR == 2 { for (i = 1; i <= 2; i++) {
        split($i, a, "m"); s += a[1] * 60 + a[2] } } END { printf "%.2f", s }' \
        "$tmp/times")"
}

measure() { # mode round
    local runs=$DATA/runs prefix="$1-$2" t0 t c0 c1 n0 n1 q0 q1
    make_runs "$runs"
    sync
    child_cpu c0
    read -r n0 q0 <<<"$(server_cpu)"
    t0=$(date +%s.%N)
    "$1" "$runs" "$prefix"
    t=$(python3 -c "import time; print(round(time.time() - $t0, 2))")
    child_cpu c1
    read -r n1 q1 <<<"$(server_cpu)"
    check "$prefix" "$runs"
    "$TOOL" rm-tree "s3://bench/$prefix"
    echo "$t" >>"$tmp/$1.times"
    # CPU seconds of ckpt, s3rver and the proxy; cores kept busy by them
    python3 -c "print('%.2f %.2f %.2f %.2f' % ($c1 - $c0, $n1 - $n0,
        $q1 - $q0, ($c1 - $c0 + $n1 - $n0 + $q1 - $q0) / $t))" \
        >>"$tmp/$1.cpu"
    echo "  $1 round $2: $t s (CPU s ckpt, s3rver, proxy, cores:" \
        "$(tail -1 "$tmp/$1.cpu"))" >&2
}


bytes=$(find "$master" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }')
good=$((N - N / 10))
echo "host: $(nproc) CPUs; $N runs ($good good, each a $MB MiB DCP step), s3rver on Node $(node --version)" >&2
for r in $(seq 1 "$R"); do
    for m in stages proc1 proc4; do measure "$m" "$r"; done
done
base=$(median <"$tmp/stages.times")
echo "| mode | median s ($R rounds) | source GB/hour | vs stages | CPU s: ckpt / s3rver / proxy (medians) | cores busy (median) |"
echo "| --- | --- | --- | --- | --- | --- |"
col() { cut -d' ' -f"$1" <"$tmp/$2.cpu" | median; }
for m in stages proc1 proc4; do
    t=$(median <"$tmp/$m.times")
    printf '| %s | %.2f | %.1f | %.2fx | %s / %s / %s | %s |\n' "$m" "$t" \
        "$(python3 -c "print($good * $bytes / 1e9 / ($t / 3600))")" \
        "$(python3 -c "print($t / $base)")" \
        "$(col 1 "$m")" "$(col 2 "$m")" "$(col 3 "$m")" "$(col 4 "$m")"
done
