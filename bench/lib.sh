# shellcheck shell=bash
# bench/lib.sh - what the bench scripts share: medians, timing under
# /usr/bin/time, throughput and ratios, the machine line. Sourced:
#   . "$(dirname "$0")/lib.sh"
# Functions only; it sets no variable and changes no directory.

# median of the numbers on stdin (of an even count, the lower middle one)
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# med N...: median of the arguments
med() { printf '%s\n' "$@" | median; }

# peak FILE: the largest number in FILE, one a line (peak RSS over rounds)
peak() { sort -g "$1" | tail -1; }

# measure CMD...: run CMD (stdout discarded) under /usr/bin/time -v;
# prints "wall_seconds max_rss_kib cpu_seconds" (cpu: user + system). A
# failing CMD prints its stderr and exits (the caller's subshell).
measure() {
    local log
    log=$(mktemp)
    /usr/bin/time -v "$@" >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
    awk -F': ' '/Elapsed \(wall clock\)/ {
                    n = split($2, t, ":"); s = 0
                    for (i = 1; i <= n; i++) s = s * 60 + t[i]
                    wall = s }
                /Maximum resident set size/ { rss = $2 }
                /User time/ { cpu += $2 }
                /System time/ { cpu += $2 }
                END { print wall, rss, cpu }' "$log"
    rm -f "$log"
}

# mbs BYTES SECONDS: MB/s, whole
mbs() { awk -v b="$1" -v t="$2" 'BEGIN { printf "%.0f", b / t / 1e6 }'; }

# ratio A B: A / B to two places
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# gib BYTES: GiB to two places
gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 2^30 }'; }

# loadavg: the 1, 5 and 15 minute load averages
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# machine_line DIR [LOAD_BEFORE]: "machine: cores, memory, DIR's file
# system, load average" (with LOAD_BEFORE: before and after)
machine_line() {
    local load
    load=$(loadavg)
    [ -z "${2:-}" ] || load="$2 before, $load after"
    echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/2^20}' /proc/meminfo), $(df -T "$1" | awk 'NR==2 {print $2}') at $1, load average $load"
}

# need_ckpt: exit 2 unless $CKPT is an executable
need_ckpt() {
    [ -x "$CKPT" ] || { echo "build $CKPT first (scripts/build.sh)" >&2; exit 2; }
}
