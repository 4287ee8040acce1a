#!/usr/bin/env bash
# Install test dependencies, build, and run the whole suite: a normal build,
# an ASan+UBSan build, and a rotating group of the fuzz targets under
# libFuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test

jobs=$(nproc)
# Many integration tests spend part of their time waiting (servers,
# back-off, subprocesses): one ctest job more than there are cores keeps
# the cores busy. Each script declares its rough cost, so the longest
# start first (tests/tests.cmake).
tjobs=$((jobs + 1))
echo "== normal build"
bash scripts/build.sh build

# A warning in any build a user or packager may pick fails here, not on
# their machine: the binary and unit tests (no suite run) at Release
# (gcc -O3 finds more maybe-uninitialized paths), Debug, and with clang.
echo "== warning check: gcc Release, gcc Debug, clang Release (-Werror, build only)"
units=$(cd tests/unit && ls test_*.c | sed 's/\.c$//')
for b in gcc:Release gcc:Debug clang:Release; do
    cc=${b%%:*}; type=${b#*:}; dir=build-$cc-${type,,}; t0=$SECONDS
    cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE="$type" \
        -DCKPT_WERROR=ON >/dev/null
    # shellcheck disable=SC2086
    if ! log=$(cmake --build "$dir" -j"$jobs" --target ckpt $units 2>&1); then
        echo "$log"; echo "$cc $type: FAILED"; exit 1
    fi
    echo "$cc $type: clean ($((SECONDS - t0)) s)"
done

# Skips: ctest's own (exit 77) and the "SKIP: " lines of parts of tests
# that could not run here, counted from the JUnit file (every test's full
# output); any skip tests/skips-allowed.txt does not excuse fails the
# suite (scripts/skips.py; tests/README.md).
ctest_run() {
    local dir=$1; shift
    (cd "$dir" && ctest --output-on-failure -j"$tjobs" \
        --output-junit "$PWD/ctest-junit.xml" \
        --test-output-size-passed 4194304 "$@")
    python3 scripts/skips.py "$dir/ctest-junit.xml"
}

ctest_run build

echo "== ASan + UBSan build"
bash scripts/build.sh build-asan -DCKPT_SANITIZE=ON
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest_run build-asan -LE slow

# The ASan phase leaves out the tests labelled "slow" (the crash sample,
# the 1,024-rank step, the longest S3 runs): their code paths run there
# in shorter tests, and the suite stays under 20 minutes on 2 cores.
# (scripts/crash.sh is the crash sample's long version.)

# Fuzzing: ctest has replayed every target's corpus in both builds above;
# here a rotating sixth of the targets (4 or 5 of 29) is fuzzed for real,
# 40 s each, two at a time (165 s measured, against 191 s for all 29 at
# 8 s): the group is the day of the year (UTC) modulo CKPT_FUZZ_GROUPS
# (6), so every target gets 40 s every six days of CI. CKPT_FUZZ_GROUP=N picks a group, "all" every
# target; CKPT_FUZZ_SECONDS the time (docs/reliability.md, "Fuzzing").
secs=${CKPT_FUZZ_SECONDS:-40}
groups=${CKPT_FUZZ_GROUPS:-6}
group=${CKPT_FUZZ_GROUP:-$(( 10#$(date -u +%j) % groups ))}
mapfile -t all < <(cd tests/fuzz && LC_ALL=C ls -- *_fuzz.c | sed 's/_fuzz\.c$//')
picked=()
for i in "${!all[@]}"; do
    if [ "$group" = all ] || [ $(( i % groups )) = "$group" ]; then
        picked+=("${all[$i]}")
    fi
done
echo "== fuzz (libFuzzer, ${secs}s per target, $jobs at a time): group" \
     "$group of $groups: ${picked[*]}"
# scripts/fuzz.sh builds build-fuzz/ and runs each target from a copy of
# its corpus; CKPT_FUZZ_SAVE=0: CI reports, it never writes the corpus.
CKPT_FUZZ_SAVE=0 CKPT_FUZZ_JOBS=$jobs bash scripts/fuzz.sh "$secs" "${picked[@]}"
echo "== all suites passed"
