#!/bin/sh
# process-parallel.sh - fan `ckpt process` out over the runs of a
# directory with GNU parallel (docs/deploy.md "GNU parallel"): one worker
# per run, JOBS at once. Workers on other hosts (or a second copy of this
# script) may work on the same directory: a run another worker holds is
# skipped, never processed twice.
#
#   process-parallel.sh JOBS RUNS_DIR DEST [ckpt process options...]
#
# Installed as PREFIX/share/ckpt/process-parallel.sh (cmake --install;
# PREFIX /usr/local by default), e.g. (docs/deploy.md):
#
# /usr/local/share/ckpt/process-parallel.sh 8 /scratch/project/runs r2://ckpts/olmo --wandb-map runs.map
#
# Exit: 0 every run done or skipped; otherwise the number of failed runs
# (GNU parallel's count of failed jobs), at most 101; 2 usage, or ckpt or
# parallel not found.
# Environment: CKPT (the ckpt binary; default: PREFIX/bin/ckpt beside
# this installed script, else ckpt on PATH).
set -u
if [ $# -lt 3 ]; then
    echo "usage: $0 JOBS RUNS_DIR DEST [ckpt process options...]" >&2
    exit 2
fi
ckpt=${CKPT:-}
if [ -z "$ckpt" ]; then
    ckpt=ckpt
    beside=$(dirname "$0")/../../bin/ckpt
    [ -x "$beside" ] && ckpt=$beside
fi
for tool in "$ckpt" parallel; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "$0: '$tool' not found (PATH=$PATH)" >&2
        exit 2
    fi
done
jobs=$1
runs=$2
dest=$3
shift 3
# Runs and archives, sorted; hidden names (a delete in progress) left out.
find "$runs" -mindepth 1 -maxdepth 1 ! -name '.*' -print0 | sort -z |
    parallel -0 -j "$jobs" --line-buffer "$ckpt" process \
        --no-progress "$@" {} --dest "$dest"
