#!/usr/bin/env python3
"""mutate.py - the mutation check of the delete paths.

    scripts/mutate.py [--build DIR] [--only NAME,...] [--list] [--jobs N]
                      [--keep-going] [LIST]

Every entry of LIST (default tests/mutations.txt) is a one-line break of
the code that deletes or re-checks before deleting: a proof condition
negated, a re-check skipped. For each, alone: the exact snippet is
replaced in its file, ckpt (and the unit tests the entry names) rebuilt
in DIR (default build-mutate, configured like scripts/build.sh's
build/), the entry's tests run with ctest, and the file restored byte for
byte (also on Ctrl-C or an error). A break under which every one of its
tests still passes SURVIVED: the check fails. An entry whose snippet is
missing, or found more than once, or that no longer builds, fails it
too: edit the list (the code moved on).

Before the breaks, every test the list names is run once on the code as
it is (the baseline): a test that fails there would make any break look
caught, so the check stops (exit 2).

Prints one line per entry as it ends and a table at the end (also
written to DIR/mutations.tsv): name, file, result (caught: which tests
failed; SURVIVED; ERROR: why), seconds. Each ctest run's output is in
DIR/mutate-logs/NAME.log (baseline.log for the baseline). Exit status: 0 when every break
was caught, 1 otherwise, 2 when it could not run.

--only NAME,...  only these entries (the baseline runs their tests only)
--list           print the entries and their tests; change nothing
--jobs N         cmake --build and ctest -j (default 2)

While it runs, one source file at a time holds a break: build nothing
else from this tree meanwhile. The original is also kept in
DIR/mutate-pending until restored, so a mutate.py killed with SIGKILL is
undone by the next start (it says so).
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_list(path):
    """[{name, file, find, replace, tests, why, line}] of the list."""
    out, cur = [], None
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            m = re.match(r"^\[([A-Za-z0-9_.-]+)\]\s*$", line)
            if m:
                cur = {"name": m.group(1), "line": n}
                out.append(cur)
                continue
            m = re.match(r"^(file|find|replace|tests|why): ?(.*)$", line)
            if not m or cur is None:
                sys.exit("%s:%d: expected [name] or 'key: value' (file, "
                         "find, replace, tests, why)" % (path, n))
            cur[m.group(1)] = m.group(2)
    names = set()
    for e in out:
        for k in ("file", "find", "replace", "tests"):
            if k not in e:
                sys.exit("%s:%d: [%s] has no %s" % (path, e["line"],
                                                     e["name"], k))
        if e["name"] in names:
            sys.exit("%s:%d: [%s] twice" % (path, e["line"], e["name"]))
        names.add(e["name"])
        e["tests"] = e["tests"].split()
    return out


def sh(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def configure(build):
    if os.path.exists(os.path.join(build, "CMakeCache.txt")):
        return
    r = sh(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
            "-DCKPT_WERROR=ON"])
    if r.returncode != 0:
        sys.exit("configure %s failed:\n%s%s" % (build, r.stdout, r.stderr))


def build_targets(build, targets, jobs):
    r = sh(["cmake", "--build", build, "-j%d" % jobs, "--target"] + targets)
    return r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def units_of(tests):
    """The unit test binaries among ctest names (unit/test_run)."""
    return [t.split("/", 1)[1] for t in tests if t.startswith("unit/")]


def run_tests(build, tests, jobs, log):
    """{test: passed?} by one ctest run; its output goes to log."""
    regex = "^(%s)$" % "|".join(re.escape(t) for t in tests)
    r = sh(["ctest", "-R", regex, "-j%d" % jobs, "--timeout", "900",
            "--output-on-failure"], cwd=build)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w") as f:
        f.write(r.stdout + r.stderr)
    res = {t: True for t in tests}
    seen = set()
    for line in r.stdout.splitlines():
        m = re.search(r"Test +#\d+: (\S+) \.+\s*(\*{0,3}\w.*?)\s+[\d.]+ sec",
                      line)
        if m and m.group(1) in res:
            seen.add(m.group(1))
            res[m.group(1)] = m.group(2).strip() == "Passed"
    for t in tests:
        if t not in seen:
            res[t] = False  # not run: ctest knows no such test
    return res, r.stdout


def pending_path(build):
    return os.path.join(build, "mutate-pending")


def restore_pending(build):
    """A run killed before it restored its file: restore it now."""
    p = pending_path(build)
    if not os.path.exists(p):
        return
    with open(p, "rb") as f:
        rel, data = f.read().split(b"\0", 1)
    with open(os.path.join(ROOT, rel.decode()), "wb") as f:
        f.write(data)
    os.unlink(p)
    print("restored %s, left broken by a mutate.py that was killed"
          % rel.decode(), flush=True)


class Mutant:
    """The file with the snippet replaced, restored on exit (a newer
    mtime than the break's: the next build compiles it again)."""

    def __init__(self, e, build):
        self.path = os.path.join(ROOT, e["file"])
        self.e = e
        self.build = build
        self.orig = None

    def __enter__(self):
        with open(self.path, "rb") as f:
            orig = f.read()
        text = orig.decode()
        n = text.count(self.e["find"])
        if n != 1:
            raise ValueError("snippet found %d times in %s" % (n,
                                                              self.e["file"]))
        with open(pending_path(self.build), "wb") as f:
            f.write(self.e["file"].encode() + b"\0" + orig)
        self.orig = orig
        with open(self.path, "w") as f:
            f.write(text.replace(self.e["find"], self.e["replace"]))
        return self

    def __exit__(self, *exc):
        if self.orig is not None:
            with open(self.path, "wb") as f:
                f.write(self.orig)
            os.unlink(pending_path(self.build))
        return False


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("list", nargs="?",
                    default=os.path.join(ROOT, "tests", "mutations.txt"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build-mutate"))
    ap.add_argument("--only", default="")
    ap.add_argument("--list", dest="show", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    entries = parse_list(a.list)
    if a.only:
        want = set(a.only.split(","))
        unknown = want - {e["name"] for e in entries}
        if unknown:
            sys.exit("no entry %s" % ", ".join(sorted(unknown)))
        entries = [e for e in entries if e["name"] in want]
    if a.show:
        for e in entries:
            print("%-28s %-26s %s" % (e["name"], e["file"],
                                      " ".join(e["tests"])))
        return 0
    # Ctrl-C or a kill restores the file through Mutant.__exit__.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    build = os.path.abspath(a.build)
    t0 = time.time()
    configure(build)
    restore_pending(build)
    tests = sorted({t for e in entries for t in e["tests"]})
    print("== baseline: build %s, then %d tests unmutated" % (build,
                                                              len(tests)),
          flush=True)
    ok, log = build_targets(build, ["all"], a.jobs)
    if not ok:
        print(log)
        return 2
    logs = os.path.join(build, "mutate-logs")
    res, out = run_tests(build, tests, a.jobs,
                         os.path.join(logs, "baseline.log"))
    bad = [t for t in tests if not res[t]]
    if bad:
        print(out[-4000:])
        print("baseline: %s fail (or do not exist) unmutated; fix that "
              "first (%s/baseline.log)" % (", ".join(bad), logs))
        return 2
    print("baseline: %d tests pass (%.0f s)" % (len(tests), time.time() - t0),
          flush=True)
    rows = []
    for e in entries:
        t1 = time.time()
        try:
            with Mutant(e, build):
                ok, log = build_targets(build, ["ckpt"] + units_of(
                    e["tests"]), a.jobs)
                if not ok:
                    result = "ERROR: does not build: " + \
                        log.strip().splitlines()[-1][:200]
                else:
                    res, _ = run_tests(build, e["tests"], a.jobs,
                                       os.path.join(logs, e["name"] + ".log"))
                    failed = [t for t in e["tests"] if not res[t]]
                    result = ("caught: " + " ".join(failed) if failed
                              else "SURVIVED")
        except ValueError as x:
            result = "ERROR: %s" % x
        rows.append((e["name"], e["file"], result, time.time() - t1))
        print("%-28s %s (%.0f s)" % (e["name"], result, rows[-1][3]),
              flush=True)
    # The tree is as it was: rebuild so DIR's ckpt is the real one again.
    build_targets(build, ["ckpt"], a.jobs)
    with open(os.path.join(build, "mutations.tsv"), "w") as f:
        f.write("name\tfile\tresult\tseconds\n")
        for r in rows:
            f.write("%s\t%s\t%s\t%.0f\n" % r)
    print("\n| mutation | file | result | s |\n| --- | --- | --- | ---: |")
    for r in rows:
        print("| %s | %s | %s | %.0f |" % r)
    failed = [r for r in rows if not r[2].startswith("caught")]
    print("\n%d breaks, %d caught, %d not (%s); %.0f s in all" % (
        len(rows), len(rows) - len(failed), len(failed),
        ", ".join(r[0] for r in failed) or "none", time.time() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
