#!/usr/bin/env bash
# ctest-cost: 10
# ls_summary.sh - `ckpt ls --summary` over the generated sample (every
# run kind, as directories and archives) plus a live run and a damaged
# archive: exact runs and bytes per verdict (bytes summed here with find
# and stat, not by ckpt), the non-runs (notes, logs) left out as plain ls
# leaves them out, and would-free equal to what `ckpt clean -n` frees.
source "$(dirname "$0")/../support/lib.sh"

# The live-run guard reads the newer of mtime and ctime; touch -d cannot
# put a ctime in the past, so ckpt sees every ctime 10 days earlier
# (tests/support/age_preload.c), as test_clean.sh does.
old() {
    LD_PRELOAD="${CKPT_BUILD:-$SRC/build}/libage_preload.so" CKPT_TEST_OLD_CTIME=864000 \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        "$CKPT" "$@"
}

python3 "$SRC/tests/support/gen_runs.py" "$T/s" --archives
S=$T/s
head -c 1000 "$S/2871102.tar.gz" >"$S/2871108.tar.gz"   # damaged: error
find "$S" -exec touch -h -d '2 days ago' {} +
touch -d '3 min ago' "$S/2871003/step500/model_and_optim/__0_0.distcp"

# a run's bytes: its files' sizes (symlinks, like OLMo's latest, are not
# files); an archive's: its own size
dir() { find "$S/$1" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}'; }
file() { stat -c %s "$S/$1"; }
sum() { local s=0 x; for x in "$@"; do s=$((s + x)); done; echo $s; }
complete=$(sum "$(dir 2871005)" "$(file 2871105.zip)")
incomplete=$(sum "$(dir 2871001)" "$(file 2871101.tar)")
bad=$(sum "$(dir 2871002)" "$(dir 2871004)" "$(dir 2871006)" \
          "$(file 2871102.tar.gz)" "$(file 2871103.tar.zst)" \
          "$(file 2871106.tar.xz)" "$(file 2871107.tar.bz2)")
live=$(dir 2871003)
total=$(sum $complete $incomplete $bad $live 1000)
hs() { python3 -c 'import sys; n = int(sys.argv[1]); u = 0
while n >= 1024 ** (u + 1) and u < 5: u += 1
print("%d B" % n if u == 0 else "%.1f %s" % (n / 1024 ** u, "B KiB MiB GiB TiB PiB".split()[u]))' "$1"; }

before=$(cd "$S" && find . -printf '%p %s %T@\n' | sort)
out=$(old ls --summary "$S" 2>"$T/err")
check "summary exit" 0 $?
check "summary rows" "complete	2	$complete	$(hs $complete)
incomplete	2	$incomplete	$(hs $incomplete)
bad	7	$bad	$(hs $bad)
live	1	$live	$(hs $live)
error	1	1000	1000 B
total	13	$total	$(hs $total)
would-free	7	$bad	$(hs $bad)" "$out"
check "summary names the run it cannot judge" \
    "ckpt: warning: $S/2871108.tar.gz: cannot judge: $S/2871108.tar.gz: truncated gzip input" \
    "$(sed 's/^[0-9TZ:-]* //' "$T/err")"
check "summary changes nothing" "$before" "$(cd "$S" && find . -printf '%p %s %T@\n' | sort)"

# what clean -n over the same runs says it would free
freed=$(cd "$S" && old clean -n --json * 2>/dev/null |
        python3 -c 'import json,sys; print(sum(json.loads(l)["freed"] for l in sys.stdin))')
check "would-free is clean -n's" "$bad" "$freed"

out=$(old ls --summary --min-age 0 --json "$S" 2>/dev/null)
row() { printf '{"type":"summary","schema":1,"verdict":"%s","runs":%s,"bytes":%s}' "$@"; }
check "summary --min-age 0 --json" "$(row complete 2 $complete)
$(row incomplete 2 $incomplete)
$(row bad 8 $((bad + live)))
$(row live 0 0)
$(row error 1 1000)
$(row total 13 $total)
$(row would-free 8 $((bad + live)))" "$out"

out=$(old ls --summary "$S/2871001" 2>/dev/null)
check "one run" "complete	0	0	0 B
incomplete	1	$(dir 2871001)	$(hs "$(dir 2871001)")
bad	0	0	0 B
live	0	0	0 B
error	0	0	0 B
total	1	$(dir 2871001)	$(hs "$(dir 2871001)")
would-free	0	0	0 B" "$out"

old ls --summary -l "$S" >/dev/null 2>&1; check "--summary -l: usage" 2 $?
old ls --summary --min-age 5x "$S" >/dev/null 2>&1; check "bad --min-age: usage" 2 $?
finish
