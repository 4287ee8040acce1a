#!/usr/bin/python3
# ctest-cost: 60
# ctest-labels: slow
"""unshard_many_ranks.py: a step of 1,024 rank files unshards under
`ulimit -n 256` (issue: every rank file stayed open, so OLMo-sized steps hit
the open-file limit: "Too many open files").

Three 1,024-rank fixtures, each written in one process by torch 1.13's own
code: DCP (make_dcp_many.py: torch's planner and FileSystemWriter, one
__R_0.distcp per rank), OLMo legacy (make_olmo_legacy_many.py: rank{R}.pt
of ShardedTensors, the bytes real ranks write) and OLMo local
(make_olmo_local.py --world 1024: model/optim/train rank{R}.pt).
- Each unshards with RLIMIT_NOFILE 256: exit 0, bit-exact against the
  fixture's expected output.
- The old behaviour (every source file kept open: CKPT_MAX_OPEN_SOURCES
  far above the limit) fails on each with "Too many open files", exit 1,
  and leaves no output: the limit really is what the LRU works around.
- make_olmo_legacy_many.py --ranks 4 writes the same bytes as 4 real gloo
  ranks (make_olmo_legacy.py), so the one-process writer is checked
  against real ranks.
- The local and legacy 1,024-rank steps as a plain .tar, read in place
  under the same limit with no scratch: the same bytes as the directory.
- DCP under CKPT_MAX_OPEN_SOURCES=1 (every read reopens its file), and the
  4-rank legacy step that way: the same bytes as with no limit.
"""
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import (CKPT, PY, SUP, check, compare, error_of,  # noqa
                     finish, generate)


def limit(n):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def unshard(src, out, env=None, nofile=None, args=()):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([CKPT, "unshard", "--no-progress", *args, src, out],
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


def many_rank_case(label, src, expected, out, nrank_files):
    """1,024 ranks under ulimit -n 256: exit 0 and bit-exact; with the old
    everything-open behaviour: EMFILE, exit 1, no output."""
    check(f"{label}: {nrank_files} rank files", nrank_files == 1024)
    r = unshard(src, out, nofile=256)
    check(f"{label}, 1,024 ranks, ulimit -n 256: exit 0", r.returncode == 0,
          r.stdout + r.stderr)
    compare(f"{label}, 1,024 ranks, ulimit -n 256: bit-exact", out, expected)
    # The step as a plain .tar (one checkpoint at its root): read in place
    # by member offsets through the archive's one descriptor, with scratch
    # impossible (--tmp-dir below a regular file).
    tar, trap = out + ".tar", out + ".trap"
    with tarfile.open(tar, "w") as t:
        t.add(src, arcname=".")
    open(trap, "w").close()
    r = unshard(tar, out + "-tar", nofile=256,
                args=("--tmp-dir", os.path.join(trap, "scratch")))
    check(f"{label}, 1,024 ranks in a plain .tar, ulimit -n 256, no scratch: "
          "the same bytes", r.returncode == 0 and
          same_files(out, out + "-tar"), f"rc {r.returncode}: {r.stderr}")
    old = out + "-all-open"
    r = unshard(src, old, env={"CKPT_MAX_OPEN_SOURCES": "1000000"}, nofile=256)
    why = error_of(r)
    check(f"{label}, every file kept open (old behaviour): Too many open files",
          r.returncode == 1 and "Too many open files" in why and
          not r.stderr and not os.path.exists(old),
          f"rc {r.returncode}: {why}")


def rank_files(d):
    return len([n for n in os.listdir(d) if n.startswith("rank") and n.endswith(".pt")])


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-many-ranks-")
    try:
        # the slowest generator (~30-50 s) runs while the others are checked
        legm = os.path.join(tmp, "legm")
        bg = subprocess.Popen([PY, os.path.join(SUP, "make_olmo_legacy_many.py"), legm])
        many = os.path.join(tmp, "many")
        subprocess.run([PY, os.path.join(SUP, "make_dcp_many.py"), many,
                        "--ranks", "1024"], check=True)
        generate(["make_olmo_legacy.py", os.path.join(tmp, "leg"), "--ranks",
                  "4", "--no-verify"],
                 ["make_olmo_legacy_many.py", os.path.join(tmp, "leg4"), "--ranks", "4"],
                 ["make_olmo_local.py", os.path.join(tmp, "loc"), "--world", "1024",
                  "--no-verify"])
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
        r = unshard(src, out + "-all-open", env={"CKPT_MAX_OPEN_SOURCES": "1000000"},
                    nofile=256)
        why = error_of(r)
        check("DCP, every file kept open (old behaviour): Too many open files",
              r.returncode == 1 and "Too many open files" in why and
              not r.stderr,
              f"rc {r.returncode}: {why}")
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
        check("legacy: the one-process writer, 4 ranks: the bytes of 4 real ranks",
              same_files(leg, os.path.join(tmp, "leg4", "ckpt")) and
              same_files(os.path.join(tmp, "leg", "expected"),
                         os.path.join(tmp, "leg4", "expected")))

        loc = os.path.join(tmp, "loc", "w1024-21")
        many_rank_case("local", os.path.join(loc, "ckpt"), os.path.join(loc, "expected"),
                       os.path.join(tmp, "loc-o"),
                       rank_files(os.path.join(loc, "ckpt", "model")))

        check("legacy 1,024-rank fixture written", bg.wait() == 0)
        many_rank_case("legacy", os.path.join(legm, "ckpt"),
                       os.path.join(legm, "expected"), os.path.join(tmp, "legm-o"),
                       rank_files(os.path.join(legm, "ckpt")))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
