#!/bin/sh
# process-cron.sh - one `ckpt process` pass over a directory of runs, for
# cron (docs/deploy.md). A pass still running makes the next one exit at
# once (flock), so passes never pile up; the per-run leases under DEST keep
# passes on other hosts from taking the same run.
#
#   process-cron.sh SRC DEST [ckpt process options...]
#
# crontab:
#   */30 * * * * /opt/ckpt/process-cron.sh /scratch/runs r2://ckpts/olmo >>/var/log/ckpt-process.log 2>&1
#
# Exit: 0 every run done or legitimately skipped; 1 a run failed or had no
# W&B path (alert); 2 usage; 75 the previous pass is still running.
# Environment: CKPT (the ckpt binary; default: ckpt on PATH), CKPT_LOCK
# (default /tmp/ckpt-process-$USER.lock).
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 SRC DEST [ckpt process options...]" >&2
    exit 2
fi
src=$1
dest=$2
shift 2
lock=${CKPT_LOCK:-/tmp/ckpt-process-${USER:-$(id -u)}.lock}
exec flock -n -E 75 "$lock" "${CKPT:-ckpt}" process --no-progress "$@" \
    "$src" --dest "$dest"
