#!/usr/bin/env bash
# README command 1: install build dependencies, build, generate a sample of
# run directories (real torch checkpoint bytes) and run ckpt over it, with
# a local directory standing in for the bucket. Needs no credentials.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --demo   # sudo only when not root
bash scripts/build.sh build >/dev/null
CKPT=$PWD/build/ckpt
W=${CKPT_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/ckpt-demo-XXXXXX")}
python3 tests/support/gen_runs.py "$W/scratch" --archives
mkdir -p "$W/bucket"
cd "$W/scratch"

step() { printf '\n$ %s\n' "$*"; "$@" || true; }
runs="2871001 2871002 2871003 2871004 2871005 2871006 notes 2871101.tar
      2871102.tar.gz 2871103.tar.zst 2871105.zip 2871106.tar.xz 2871107.tar.bz2"
echo "sample runs in $W/scratch; the bucket is $W/bucket"
step "$CKPT" ls .
# 1. delete the runs that never produced a checkpoint
step "$CKPT" clean --dry-run --min-age 0 $runs
step "$CKPT" clean --min-age 0 $runs
# 2. merge a sharded step (3 ranks, written by torch) into whole tensors
step "$CKPT" unshard 2871001/step1000 "$W/unsharded/2871001-step1000"
step ls -l "$W/unsharded/2871001-step1000"
# 3. find each kept run's W&B run path (local evidence; no network)
step "$CKPT" map-wandb --offline -o "$W/wandb-map.tsv" 2871001 2871005 2871101.tar 2871105.zip
# 4. upload the kept runs under ENTITY/PROJECT/RUN_ID/ with their logs
step "$CKPT" upload --wandb-map "$W/wandb-map.tsv" --logs "$W/scratch/logs" 2871001 2871005 "$W/bucket"
# the same run archived: its members stream into the bucket; every file is
# already there (same size and checksum), so all are skipped
step "$CKPT" upload --extract --wandb-map "$W/wandb-map.tsv" 2871105.zip "$W/bucket"
echo
echo "the bucket now holds:"
(cd "$W/bucket" && find . -maxdepth 5 | LC_ALL=C sort | head -40)
