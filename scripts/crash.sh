#!/usr/bin/env bash
# Long crash-consistency run: scripts/crash.sh [KILLS] [crash.py options]
#
# Builds build/ (as scripts/build.sh does), then runs tests/crash/crash.py
# with KILLS (default 200) SIGKILLs per command: ckpt clean, unshard
# --delete-sharded (local and from S3), upload --delete-source (local and
# to S3), process --drop-sharded --drop-incomplete (local and to S3),
# checking the invariants after each kill and after a rerun. Every
# violation fails the run, the kinds of open findings included (CI's
# sample, tests/integration/crash_sample.py, reports those as KNOWN).
# Just the process scenarios: scripts/crash.sh 60 --only process,process_s3
# The figures go to build/crash-report.json too.
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-200}
shift || true
bash scripts/build.sh build
[ -d tests/support/node_modules ] ||
    (cd tests/support && npm ci --no-audit --no-fund)
export CKPT=$PWD/build/ckpt CKPT_BUILD=$PWD/build CKPT_SRC=$PWD
exec /usr/bin/python3 tests/crash/crash.py --kills "$kills" \
    --json build/crash-report.json "$@"
