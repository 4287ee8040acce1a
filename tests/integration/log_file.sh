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
check "rows on stdout" "delete
process
total" "$(cut -f1 <<<"$out" | sort)"
check "log lines timestamped" 0 "$(grep -cvE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z ckpt: ' "$T/p.log")"
check "log names both runs" "yes" "$(grep -q "runs/2871001: " "$T/p.log" && grep -q "runs/2871002" "$T/p.log" && echo yes)"
n1=$(wc -l <"$T/p.log")
# ls's error is its row (stdout), not a message: the log gets nothing;
# process's messages about a missing RUN go below what was there
"$CKPT" ls --log-file "$T/p.log" "$T/nothere" >"$T/out" 2>"$T/err"
check "ls: exit" 1 $?
check "ls: the error is its row" "1" "$(grep -c "error: stat '$T/nothere'" "$T/out")"
check "ls: the log unchanged" "$n1" "$(wc -l <"$T/p.log")"
"$CKPT" process -n --no-wandb --min-age 0 --log-file "$T/p.log" "$T/nothere" --dest "$T/dest" >/dev/null 2>"$T/err"
check "appended, not replaced" "yes" "$([ "$(wc -l <"$T/p.log")" -gt "$n1" ] && echo yes)"
"$CKPT" ls --log-file "$T/no/such/dir/x.log" "$T" >/dev/null 2>"$T/err"
check "unwritable log: usage exit" 2 $?
check "unwritable log: says why" "ckpt ls: error: --log-file '$T/no/such/dir/x.log': No such file or directory" "$(cat "$T/err")"
finish
