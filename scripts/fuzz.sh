#!/usr/bin/env bash
# Long fuzzing run: scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Builds the libFuzzer binaries (clang, -DCKPT_FUZZ=ON -DCKPT_SANITIZE=ON,
# into build-fuzz/) and runs each target (default: all of tests/fuzz)
# SECONDS long (default 300), CKPT_FUZZ_JOBS at a time (default: the
# number of cores), each from a copy of tests/fuzz/corpus/TARGET. Then:
#   - new coverage is merged (-merge=1 into a copy of the corpus) and the
#     new inputs no larger than CKPT_FUZZ_KEEP_BYTES (4096) are added to
#     tests/fuzz/corpus/TARGET, at most CKPT_FUZZ_KEEP (16) per target,
#     smallest first, named cov-SHA1;
#   - a crash, leak, timeout or out-of-memory input is copied to
#     tests/fuzz/corpus/TARGET/regress-KIND-SHA1 (fix the bug, keep the
#     input: ctest's fuzz/TARGET replays it from then on).
# With CKPT_FUZZ_SAVE=0 (CI) the corpus is left as it is: no merge, and
# findings are only reported (their inputs are in the log's directory,
# printed).
# Prints one line per target (executions, exec/s, cov: of the last status
# line, new corpus inputs, findings) and writes the same as TSV to
# build-fuzz/fuzz-summary.tsv. Exits 1 if any target found something.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
shift || true
jobs=${CKPT_FUZZ_JOBS:-$(nproc)}
keep=${CKPT_FUZZ_KEEP:-16}
keep_bytes=${CKPT_FUZZ_KEEP_BYTES:-4096}
save=${CKPT_FUZZ_SAVE:-1}

CC=clang bash scripts/build.sh build-fuzz -DCKPT_FUZZ=ON -DCKPT_SANITIZE=ON

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/*_fuzz.c; do
        targets+=("$(basename "$f" _fuzz.c)")
    done
fi
for t in "${targets[@]}"; do
    [ -x "build-fuzz/${t}_fuzz" ] || { echo "no target '$t'" >&2; exit 2; }
done

work=$(mktemp -d)
# Kept only when CKPT_FUZZ_SAVE=0 found something (the inputs are there).
keep_work=0
trap '[ "$keep_work" = 1 ] || rm -rf "$work"' EXIT
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# One target: fuzz, merge, collect findings. Writes $work/$t/summary.
fuzz_one() {
    local t=$1 d=$work/$1 corpus=tests/fuzz/corpus/$1
    local bin=build-fuzz/${t}_fuzz
    mkdir -p "$d/run" "$d/merged" "$d/art"
    cp -r "$corpus/." "$d/run/"
    local rc=0
    "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$d/art/" \
        "$d/run" >"$d/log" 2>&1 || rc=$?
    # Findings: every artifact libFuzzer wrote, kept as a regression input.
    local found=0 a kind sum
    for a in "$d"/art/*; do
        [ -f "$a" ] || continue
        kind=$(basename "$a" | sed 's/-.*//')
        sum=$(sha1sum "$a" | cut -c1-12)
        if [ "$save" = 1 ]; then
            cp "$a" "$corpus/regress-$kind-$sum"
        fi
        found=$((found + 1))
    done
    if [ "$rc" != 0 ] && [ "$found" = 0 ]; then
        found=1   # died without an artifact: still a finding (see log)
    fi
    # New coverage: merge the run's corpus into a copy of the seeds; the
    # files the merge added are the new inputs. Keep the small ones.
    local added=0 f
    [ "$save" = 1 ] || : >"$d/before"
    [ "$save" = 1 ] && cp -r "$corpus/." "$d/merged/" &&
        ls "$d/merged" | sort >"$d/before" &&
        { "$bin" -merge=1 -rss_limit_mb=2048 -timeout=10 "$d/merged" \
              "$d/run" >"$d/merge.log" 2>&1 || true; }
    while read -r f; do
        [ "$added" -lt "$keep" ] || break
        cp "$d/merged/$f" "$corpus/cov-$f"
        added=$((added + 1))
    done < <(ls "$d/merged" | sort | comm -13 "$d/before" - |
             while read -r f; do
                 s=$(stat -c %s "$d/merged/$f")
                 [ "$s" -le "$keep_bytes" ] && echo "$s $f"
             done | sort -n | cut -d' ' -f2)
    # Figures: the last status line ("#N ... cov: C ... exec/s: E").
    local last runs cov eps
    last=$(grep -aE '^#[0-9]+' "$d/log" | tail -n 1 || true)
    runs=$(grep -aoE '^stat::number_of_executed_units: *[0-9]+' "$d/log" |
           grep -oE '[0-9]+$' || true)
    [ -n "$runs" ] || runs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$last")
    cov=$(grep -oE 'cov: [0-9]+' <<<"$last" | grep -oE '[0-9]+' || echo "?")
    eps=$(grep -aoE '^stat::average_exec_per_sec: *[0-9]+' "$d/log" |
          grep -oE '[0-9]+$' || true)
    [ -n "$eps" ] || eps=$(grep -oE 'exec/s: [0-9]+' <<<"$last" |
                           grep -oE '[0-9]+' || echo "?")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$secs" "${runs:-?}" \
        "$eps" "$cov" "$added" "$found" >"$d/summary"
}

for t in "${targets[@]}"; do
    if [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; then wait -n || true; fi
    fuzz_one "$t" &
done
wait

summary=build-fuzz/fuzz-summary.tsv
printf 'target\tseconds\texecutions\texec/s\tcov\tnew_inputs\tfindings\n' \
    >"$summary"
failed=0
printf '%-14s %8s %12s %8s %6s %5s %8s\n' target seconds executions \
    exec/s cov new findings
for t in "${targets[@]}"; do
    if [ ! -f "$work/$t/summary" ]; then
        echo "$t: no result"; failed=1; continue
    fi
    cat "$work/$t/summary" >>"$summary"
    IFS=$'\t' read -r name s runs eps cov added found <"$work/$t/summary"
    printf '%-14s %8s %12s %8s %6s %5s %8s\n' "$name" "$s" "$runs" "$eps" \
        "$cov" "$added" "$found"
    if [ "$found" != 0 ]; then
        failed=1
        if [ "$save" = 1 ]; then
            echo "---- $t: finding(s), saved as tests/fuzz/corpus/$t/regress-*"
        else
            echo "---- $t: finding(s): $work/$t/art/ (log $work/$t/log)"
        fi
        grep -aE 'ERROR|SUMMARY|#[0-9]+ in ' "$work/$t/log" | head -n 30
    fi
done
[ "$save" = 1 ] || keep_work=$failed
exit "$failed"
