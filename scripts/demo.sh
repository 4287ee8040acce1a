#!/usr/bin/env bash
# README command 1: install build dependencies, build, generate a sample of
# run directories (real torch checkpoint bytes) and run ckpt over it, with
# a local directory standing in for the bucket. Needs no credentials.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
apt-get install -y -q --no-install-recommends python3 tar zstd xz-utils bzip2 zip >/dev/null 2>&1 || true
bash scripts/build.sh build >/dev/null
CKPT=$PWD/build/ckpt
W=${CKPT_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/ckpt-demo-XXXXXX")}
python3 tests/support/gen_runs.py "$W/scratch" --archives
mkdir -p "$W/bucket"
cd "$W/scratch"

step() { printf '\n$ %s\n' "$*"; "$@" || true; }
echo "sample runs in $W/scratch; bucket: $W/bucket"
step "$CKPT" ls .
step "$CKPT" clean --dry-run 2871001 2871002 2871003 2871004 2871005 2871006 notes 2871101.tar 2871102.tar.gz 2871103.tar.zst 2871105.zip 2871106.tar.xz 2871107.tar.bz2
step "$CKPT" clean 2871001 2871002 2871003 2871004 2871005 2871006 notes 2871101.tar 2871102.tar.gz 2871103.tar.zst 2871105.zip 2871106.tar.xz 2871107.tar.bz2
step "$CKPT" ls .
echo
echo "left in $W/scratch:"; ls "$W/scratch"
