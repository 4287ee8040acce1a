#!/usr/bin/env bash
# ctest-cost: 5
# --log-file FILE (a global option, as rclone's): messages and log lines go
# to FILE, appended and timestamped, instead of stderr; rows stay on stdout.
# `ckpt process` from cron logs this way.
. "$(dirname "$0")/../support/lib.sh"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
python3 "$SRC/tests/support/gen_runs.py" "$T/runs" >/dev/null
out=$("$CKPT" process --no-wandb --min-age 0 --log-file "$T/p.log" --unshard none "$T/runs/2871001" "$T/runs/2871002" --dest "$T/dest" 2>"$T/err")
check "exit" 0 $?
check "stderr empty" "" "$(cat "$T/err")"
check "rows on stdout" "deleted
processed
total" "$(cut -f1 <<<"$out" | sort)"
check "log lines timestamped" 0 "$(grep -cvE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z ckpt: ' "$T/p.log")"
check "log names both runs" "yes" "$(grep -q "runs/2871001: " "$T/p.log" && grep -q "runs/2871002" "$T/p.log" && echo yes)"
n1=$(wc -l <"$T/p.log")
"$CKPT" ls --log-file "$T/p.log" "$T/nothere" >/dev/null 2>"$T/err"
check "ls: exit" 1 $?
check "appended, not replaced" "$((n1 + 1))" "$(wc -l <"$T/p.log")"
check "ls: the error is in the log" "1" "$(tail -n 1 "$T/p.log" | grep -c "ckpt: error: .*nothere")"
"$CKPT" ls --log-file "$T/no/such/dir/x.log" "$T" >/dev/null 2>"$T/err"
check "unwritable log: usage exit" 2 $?
check "unwritable log: says why" "ckpt ls: error: --log-file '$T/no/such/dir/x.log': No such file or directory" "$(cat "$T/err")"
finish
