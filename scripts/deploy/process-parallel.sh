#!/bin/sh
# process-parallel.sh - fan `ckpt process` out over the runs of a
# directory with GNU parallel (docs/deploy.md): one worker per run, JOBS at
# once. Workers on other hosts (or a second copy of this script) may work
# on the same directory: a run another worker holds is skipped, never
# processed twice.
#
#   process-parallel.sh JOBS RUNS_DIR DEST [ckpt process options...]
#
# Exit: 0 every run done or skipped; otherwise the number of failed runs
# (GNU parallel's count of failed jobs), at most 101.
set -u
if [ $# -lt 3 ]; then
    echo "usage: $0 JOBS RUNS_DIR DEST [ckpt process options...]" >&2
    exit 2
fi
jobs=$1
runs=$2
dest=$3
shift 3
# Runs and archives, sorted; hidden names (a delete in progress) left out.
find "$runs" -mindepth 1 -maxdepth 1 ! -name '.*' -print0 | sort -z |
    parallel -0 -j "$jobs" --line-buffer "${CKPT:-ckpt}" process \
        --no-progress "$@" {} --dest "$dest"
