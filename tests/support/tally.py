"""tally.py - the plainest check tally of the Python integration tests:

    from tally import FAILS, check, finish

check(what, got, want)  prints "ok   WHAT", or "FAIL WHAT" with both
                        values, and counts a failure
FAILS                   the failures so far (a test may add its own)
finish() -> exit status prints "N failures"; 1 if any, else 0
"""

FAILS = []


def check(what, got, want):
    if got != want:
        FAILS.append(what)
        print("FAIL %s\n  got:  %r\n  want: %r" % (what, got, want))
    else:
        print("ok   %s" % what)


def finish():
    print("%d failures" % len(FAILS))
    return 1 if FAILS else 0
