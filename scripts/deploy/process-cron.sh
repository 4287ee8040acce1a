#!/bin/sh
# process-cron.sh - one `ckpt process` pass over a directory of runs, for
# cron (docs/deploy.md "cron"). A pass still running makes the next one
# exit at once (flock), so passes never pile up; the per-run leases under
# DEST keep passes on other hosts from taking the same run.
#
#   process-cron.sh SRC DEST [ckpt process options...]
#
# Installed as PREFIX/share/ckpt/process-cron.sh (cmake --install; PREFIX
# /usr/local by default). The crontab line of docs/deploy.md, as tested
# (cron's PATH is /usr/bin:/bin: the installed script finds the ckpt
# installed beside it, PREFIX/bin/ckpt):
#
# */30 * * * * /usr/local/share/ckpt/process-cron.sh /scratch/project/runs s3://ckpts/olmo --wandb-map /scratch/project/runs.map >>/var/log/ckpt-process.log 2>&1
#
# Exit: 0 every run done or legitimately skipped; 1 a run failed or had no
# W&B path (alert); 2 usage, or ckpt not found (alert); 75 the previous
# pass is still running (one log line, nothing done); 130/143/129 the
# pass was interrupted (SIGINT/SIGTERM/SIGHUP: the next pass resumes).
# Environment: CKPT (the ckpt binary; default: PREFIX/bin/ckpt beside
# this installed script, else ckpt on PATH), CKPT_LOCK (default
# /tmp/ckpt-process-$USER.lock).
set -u
me=${0##*/}
if [ $# -lt 2 ]; then
    echo "usage: $0 SRC DEST [ckpt process options...]" >&2
    exit 2
fi
ckpt=${CKPT:-}
if [ -z "$ckpt" ]; then
    ckpt=ckpt
    beside=$(dirname "$0")/../../bin/ckpt
    [ -x "$beside" ] && ckpt=$beside
fi
if ! command -v "$ckpt" >/dev/null 2>&1; then
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $me: '$ckpt' not found (PATH=$PATH):" \
         "install ckpt (docs/deploy.md) or set CKPT to its absolute path" >&2
    exit 2
fi
src=$1
dest=$2
shift 2
lock=${CKPT_LOCK:-/tmp/ckpt-process-${USER:-$(id -u)}.lock}
flock -n -E 75 "$lock" "$ckpt" process --no-progress "$@" "$src" \
    --dest "$dest"
rc=$?
if [ $rc -eq 75 ]; then
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $me: the previous pass still" \
         "holds $lock: nothing done (exit 75)" >&2
fi
exit $rc
