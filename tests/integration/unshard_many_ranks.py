#!/usr/bin/python3
# ctest-cost: 20
"""unshard_many_ranks.py: a step of 1,024 rank files unshards under
`ulimit -n 256` (issue: every rank file stayed open, so OLMo-sized steps hit
the open-file limit: "Too many open files").

- A real torch 1.13 DCP checkpoint of 1,024 ranks (make_dcp_many.py: torch's
  own planner and FileSystemWriter, one __R_0.distcp per rank), unsharded
  with RLIMIT_NOFILE 256: exit 0, bit-exact against expected.pt.
- The same under CKPT_MAX_OPEN_SOURCES=1 (every read reopens its file), and
  an OLMo legacy step (4 real ranks) that way: the same bytes as with no
  limit.
"""
import os
import resource
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import CKPT, PY, SUP, check, compare, finish, generate  # noqa


def limit(n):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def unshard(src, out, env=None, nofile=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([CKPT, "unshard", "--no-progress", src, out],
                          capture_output=True, text=True, env=e,
                          preexec_fn=limit(nofile) if nofile else None)


def same_files(a, b):
    def files(d):
        out = {}
        for root, _, names in os.walk(d):
            for n in names:
                with open(os.path.join(root, n), "rb") as f:
                    out[os.path.relpath(os.path.join(root, n), d)] = f.read()
        return out
    return files(a) == files(b)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-many-ranks-")
    try:
        many = os.path.join(tmp, "many")
        subprocess.run([PY, os.path.join(SUP, "make_dcp_many.py"), many,
                        "--ranks", "1024"], check=True)
        generate(["make_olmo_legacy.py", os.path.join(tmp, "leg"), "--ranks",
                  "4", "--no-verify"])
        src = os.path.join(many, "ckpt")
        check("fixture: 1,024 rank files", len([n for n in os.listdir(src)
              if n.endswith(".distcp")]) == 1024)
        out = os.path.join(tmp, "o256")
        r = unshard(src, out, nofile=256)
        check("1,024 ranks, ulimit -n 256: exit 0", r.returncode == 0,
              r.stdout + r.stderr)
        compare("1,024 ranks, ulimit -n 256: bit-exact",
                os.path.join(out, "checkpoint.pt"),
                os.path.join(many, "expected.pt"))
        out1 = os.path.join(tmp, "o1")
        r = unshard(src, out1, env={"CKPT_MAX_OPEN_SOURCES": "1"})
        check("1,024 ranks, one open source at a time: same bytes",
              r.returncode == 0 and same_files(out, out1), r.stderr)

        leg = os.path.join(tmp, "leg", "ckpt")
        a, b = os.path.join(tmp, "leg-a"), os.path.join(tmp, "leg-b")
        ra = unshard(leg, a)
        rb = unshard(leg, b, env={"CKPT_MAX_OPEN_SOURCES": "1"})
        check("legacy, one open source at a time: same bytes",
              ra.returncode == 0 and rb.returncode == 0 and
              same_files(a, b), ra.stderr + rb.stderr)
        compare("legacy: bit-exact", a, os.path.join(tmp, "leg", "expected"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
