# lib.sh - helpers for integration tests (sourced by tests/integration/*.sh).
# Provides: CKPT (binary), SRC (repo root), T (fresh temp dir, removed on
# exit), check NAME EXPECTED ACTUAL, check_rc, up (upload without its
# total row), pass/fail counters, finish (which fails when no check ran);
# and the offline environment (offline.env).
set -uo pipefail
SRC=${CKPT_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
CKPT=${CKPT:-$SRC/build/ckpt}

# The offline environment (offline.env): no credential source reaches past
# the loopback, so a test that finds no credentials fails here.
while IFS= read -r _line; do
    case $_line in
    '' | '#'*) ;;
    -*) unset "${_line#-}" ;;
    *) export "${_line?}" ;;
    esac
done <"$SRC/tests/support/offline.env"
unset _line
T=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-it-XXXXXX")
trap 'chmod -R u+rwx "$T" 2>/dev/null; rm -rf "$T"' EXIT
PASSED=0
FAILED=0

# check NAME EXPECTED ACTUAL: exact string comparison, diff on failure.
# `ckpt upload ARGS`, its rows without the total row that ends them;
# its exit status.
up() {
    local o rc
    o=$("$CKPT" upload "$@")
    rc=$?
    printf '%s\n' "$o" | grep -v '^total	'
    return $rc
}

check() {
    if [ "$2" == "$3" ]; then
        PASSED=$((PASSED + 1))
    else
        FAILED=$((FAILED + 1))
        echo "FAIL: $1"
        diff -u <(printf '%s\n' "$2") <(printf '%s\n' "$3") | sed 's/^/    /'
    fi
}

# tree DIR: every path below DIR with its type and size, sorted; the exact
# filesystem state tests compare.
tree() {
    (cd "$1" && find . -mindepth 1 -printf '%y %p %s\n' | sed 's/^d \(.*\) [0-9]*$/d \1/' | LC_ALL=C sort)
}

# finish: the exit status. A test in which no check ran fails: it proved
# nothing (a guard that skipped every check, a loop over nothing).
finish() {
    echo "$PASSED passed, $FAILED failed"
    if [ "$PASSED" -eq 0 ] && [ "$FAILED" -eq 0 ]; then
        echo "FAIL: no check ran"
        return 1
    fi
    [ "$FAILED" -eq 0 ]
}
