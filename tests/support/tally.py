"""tally.py - the plainest check tally of the Python integration tests:

    from tally import FAILS, check, finish

check(what, got, want)  prints "ok   WHAT", or "FAIL WHAT" with both
                        values, and counts a failure
FAILS                   the failures so far (a test may add its own)
finish() -> exit status prints "N failures"; 1 if any, or if no check ran
                        at all (a test that checked nothing proved nothing),
                        else 0
"""

FAILS = []
CHECKS = [0]


def check(what, got, want):
    CHECKS[0] += 1
    if got != want:
        FAILS.append(what)
        print("FAIL %s\n  got:  %r\n  want: %r" % (what, got, want))
    else:
        print("ok   %s" % what)


def finish():
    print("%d failures" % len(FAILS))
    if CHECKS[0] == 0 and not FAILS:
        print("FAIL no check ran")
        return 1
    return 1 if FAILS else 0
