#!/usr/bin/env python3
"""skips.py JUNIT.xml [ALLOW] - count the skips of a ctest run and fail on
any the allow-list does not excuse (scripts/test.sh runs it after each
ctest phase, on ctest's --output-junit file).

A skip is
  - a test ctest reports skipped (it exited 77), and
  - every line of a test's output that starts with "SKIP: " (a part of a
    test that could not run here: "SKIP: <what> (<why>)"), in any test,
    passed or not.
A test skipped whole should print its own SKIP line too; one that does
not counts as "(exit 77 without a SKIP line)", which nothing excuses.

ALLOW (default tests/skips-allowed.txt): lines "TEST | WHAT | WHEN | WHY";
a skip is excused when its ctest name is TEST, its SKIP line's text
starts with WHAT, and WHEN holds: "nonroot" (scripts/test.sh runs as a
user other than root) or "always". Blank lines and # comments are
ignored. Prints one line per skip (excused or not) and the counts;
exits 1 if any skip is not excused (or the allow-list is malformed).
"""
import os
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def allowed_list(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split("|")]
            if len(parts) != 4 or parts[2] not in ("nonroot", "always") \
                    or not all(parts):
                sys.exit("%s:%d: want 'TEST | WHAT | nonroot|always | WHY'"
                         % (path, n))
            out.append(parts)
    return out


def skips(junit):
    """[(test, what)] of the run, in its order."""
    found = []
    for tc in ET.parse(junit).getroot().iter("testcase"):
        name = tc.get("name")
        out = tc.findtext("system-out") or ""
        lines = [ln[len("SKIP: "):].strip() for ln in out.splitlines()
                 if ln.startswith("SKIP: ")]
        found += [(name, w) for w in lines]
        if tc.find("skipped") is not None and not lines:
            found.append((name, "(exit 77 without a SKIP line)"))
    return found


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    allow = allowed_list(argv[2] if len(argv) == 3 else
                         os.path.join(ROOT, "tests", "skips-allowed.txt"))
    root = os.geteuid() == 0
    bad = 0
    found = skips(argv[1])
    for name, what in found:
        why = next((a[3] for a in allow if a[0] == name and
                    what.startswith(a[1]) and
                    (a[2] == "always" or not root)), None)
        if why:
            print("skip (allowed: %s): %s: %s" % (why, name, what))
        else:
            bad += 1
            print("SKIP NOT ALLOWED: %s: %s" % (name, what))
    print("%d skipped, %d not on the allow-list (%s)" % (
        len(found), bad, "tests/skips-allowed.txt" if len(argv) == 2
        else argv[2]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
