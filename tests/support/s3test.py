"""s3test.py - shared helpers for the Python object-storage integration
tests: run storage_tool, check results, count passes."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from s3env import S3Env  # noqa: E402,F401

BUILD = os.environ.get("CKPT_BUILD") or os.path.join(HERE, "..", "..",
                                                     "build")
TOOL = os.path.join(BUILD, "storage_tool")


class Checker:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def eq(self, what, got, want):
        if got == want:
            self.passed += 1
        else:
            self.failed += 1
            g, w = repr(got), repr(want)
            print("FAIL %s:\n  got  %s\n  want %s" % (what, g[:2000],
                  w[:2000]), file=sys.stderr)

    def true(self, what, cond):
        self.eq(what, bool(cond), True)

    def finish(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 1 if self.failed or not self.passed else 0


def tool(env, *args, input=None, check=True, timeout=600):
    """Run storage_tool; returns (rc, stdout bytes, stderr str)."""
    r = subprocess.run([TOOL] + list(args), env=env, input=input,
                       capture_output=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("storage_tool %s: rc %d: %s" % (
            " ".join(args), r.returncode, r.stderr.decode()))
    return r.returncode, r.stdout, r.stderr.decode()
