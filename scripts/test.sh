#!/usr/bin/env bash
# Install test dependencies, build, and run the whole suite: a normal build,
# an ASan+UBSan build, and each fuzz target briefly under libFuzzer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test

jobs=$(nproc)
echo "== normal build"
bash scripts/build.sh build
(cd build && ctest --output-on-failure -j"$jobs")

echo "== ASan + UBSan build"
bash scripts/build.sh build-asan -DCKPT_SANITIZE=ON
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j"$jobs" -LE slow)

echo "== fuzz (libFuzzer, ${CKPT_FUZZ_SECONDS:-10}s per target)"
CC=clang bash scripts/build.sh build-fuzz -DCKPT_FUZZ=ON -DCKPT_SANITIZE=ON
for f in build-fuzz/*_fuzz; do
    [ -x "$f" ] || continue
    t=$(basename "$f" _fuzz)
    corpus=$(mktemp -d)
    cp -r "tests/fuzz/corpus/$t/." "$corpus/"
    "$f" -max_total_time="${CKPT_FUZZ_SECONDS:-10}" -rss_limit_mb=2048 \
        -timeout=10 "$corpus" 2>&1 | tail -n 2
    rm -rf "$corpus"
done
echo "== all suites passed"
