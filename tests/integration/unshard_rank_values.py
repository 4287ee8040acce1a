#!/usr/bin/python3
# ctest-cost: 10
"""unshard_rank_values.py: ranks of a rank-local DCP checkpoint that saved
different values under one key (--rank-values), on checkpoints written by
torch 1.13 through tests/support/make_dcp_ranklocal.py (3 ranks):

  agree   every rank saved the same plain values: unsharded as before;
  bytes   byte item `loader` differs on ranks 1 and 2: an error naming the
          key and the ranks by default (exit 1, nothing at DEST);
          --rank-values rank0 writes rank 0's; per-rank writes
          loader.rank0, loader.rank1, loader.rank2 (torch and
          safetensors: extra.json);
  tensor  uint8 tensor `rng`, stored whole by every rank, differs on every
          rank: an error naming it and rank 1 by default; rank0 / per-rank
          as above, with --verify.
A run holding the `bytes` step: an error row by default, the step
unsharded with --rank-values per-rank; the same through `process`, which
passes the option to its unshard phase. An unknown mode is a usage error.

Before, plain `unshard` silently wrote rank 0's value of both keys.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import CKPT, check, compare, finish, generate, run  # noqa: E402


def unshard(*args):
    return run(CKPT, "unshard", "--no-progress", *args, ok=False)


def hint(key):
    return ("(--rank-values rank0 keeps rank 0's, per-rank keeps every "
            "rank's as '%s.rankR')" % key)


def refused(name, p, src, dest, what):
    check(name + ": exit 1", p.returncode == 1, p.stderr)
    msg = "%s: %s" % (src, what)
    check(name + ": row", p.stdout == "error\t%s\t%s\t%s\n" % (src, dest, msg),
          p.stdout)
    check(name + ": no message repeats the row", p.stderr == "", p.stderr)
    check(name + ": nothing at DEST", not os.path.exists(dest))


def modes(tmp, fx, case, what):
    src = os.path.join(fx, case, "ckpt")
    dest = os.path.join(tmp, case + "-error")
    refused(case + " default", unshard(src, dest), src, dest, what)
    for mode, exp in (("rank0", "expected.pt"),
                      ("per-rank", "expected_per_rank.pt")):
        dest = os.path.join(tmp, "%s-%s" % (case, mode))
        p = unshard("--verify", "--rank-values", mode, src, dest)
        check("%s %s: exit 0" % (case, mode), p.returncode == 0, p.stderr)
        if p.returncode == 0:
            compare("%s %s: values" % (case, mode),
                    os.path.join(dest, "checkpoint.pt"),
                    os.path.join(fx, case, exp))


def safetensors(tmp, fx):
    src = os.path.join(fx, "bytes", "ckpt")
    dest = os.path.join(tmp, "bytes-st")
    p = unshard("--format", "safetensors", "--rank-values", "per-rank", src,
                dest)
    check("bytes safetensors per-rank: exit 0", p.returncode == 0, p.stderr)
    extra = None
    if p.returncode == 0:
        with open(os.path.join(dest, "extra.json")) as f:
            extra = json.load(f)
    check("bytes safetensors per-rank: extra.json", extra == {
        "step": 100,
        "loader.rank0": {"epoch": 3, "offset": 0},
        "loader.rank1": {"epoch": 3, "offset": 10},
        "loader.rank2": {"epoch": 3, "offset": 20}}, json.dumps(extra))


def run_mode(tmp, fx):
    r = os.path.join(tmp, "run")
    shutil.copytree(os.path.join(fx, "bytes", "ckpt"),
                    os.path.join(r, "step5"))
    dest = os.path.join(tmp, "run-out")
    p = unshard(r, dest)
    check("run default: exit 1", p.returncode == 1, p.stderr)
    check("run default: row", p.stdout ==
          "error\tstep5\t%s/step5: object 'loader': ranks 1, 2 saved values "
          "different from rank 0's %s\n" % (r, hint("loader")), p.stdout)
    check("run default: nothing written", not os.path.exists(
        os.path.join(dest, "step5-unsharded")))
    p = unshard("--rank-values", "per-rank", r, dest)
    check("run per-rank: exit 0", p.returncode == 0, p.stderr)
    check("run per-rank: row", p.stdout ==
          "unshard\tstep5\t%s/step5-unsharded: 1 file, 2 tensors\n" % dest,
          p.stdout)
    compare("run per-rank: values",
            os.path.join(dest, "step5-unsharded", "checkpoint.pt"),
            os.path.join(fx, "bytes", "expected_per_rank.pt"))


def process_mode(tmp, fx):
    """process passes --rank-values to its unshard phase; by default the
    step's unshard fails and the run is kept whole at the source."""
    runs = os.path.join(tmp, "proc")
    r = os.path.join(runs, "run1")
    shutil.copytree(os.path.join(fx, "bytes", "ckpt"),
                    os.path.join(r, "step5"))
    with open(os.path.join(r, "config.yaml"), "w") as f:
        f.write("run_name: run1\n")
    dest = os.path.join(tmp, "proc-dest")
    p = run(CKPT, "process", "--no-wandb", "--no-progress", "--min-age", "0",
            "--keep-source", r, "--dest", dest, ok=False)
    check("process default: exit 1", p.returncode == 1, p.stdout + p.stderr)
    check("process default: the key named", "object 'loader': ranks 1, 2 "
          "saved values different from rank 0's" in p.stdout + p.stderr,
          p.stdout + p.stderr)
    check("process default: no output at DEST", not any(
        "step5-unsharded" in d for d, _, _ in os.walk(dest)))
    p = run(CKPT, "process", "--no-wandb", "--no-progress", "--min-age", "0",
            "--keep-source", "--rank-values", "per-rank", r, "--dest", dest,
            ok=False)
    check("process per-rank: exit 0", p.returncode == 0, p.stdout + p.stderr)
    out = [os.path.join(d, "checkpoint.pt") for d, _, fs in os.walk(dest)
           if d.endswith("step5-unsharded") and "checkpoint.pt" in fs]
    check("process per-rank: one output", len(out) == 1, str(out))
    if out:
        compare("process per-rank: values", out[0],
                os.path.join(fx, "bytes", "expected_per_rank.pt"))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-rank-values-")
    try:
        fx = os.path.join(tmp, "fx")
        generate(["make_dcp_ranklocal.py", fx])
        src = os.path.join(fx, "agree", "ckpt")
        p = unshard(src, os.path.join(tmp, "agree"))
        check("agree: exit 0", p.returncode == 0, p.stderr)
        compare("agree: values", os.path.join(tmp, "agree", "checkpoint.pt"),
                os.path.join(fx, "agree", "expected.pt"))
        modes(tmp, fx, "bytes", "object 'loader': ranks 1, 2 saved values "
              "different from rank 0's " + hint("loader"))
        modes(tmp, fx, "tensor", "tensor 'rng': rank 1 saved a value "
              "different from rank 0's " + hint("rng"))
        safetensors(tmp, fx)
        run_mode(tmp, fx)
        process_mode(tmp, fx)
        p = unshard("--rank-values", "rank1", src, os.path.join(tmp, "u"))
        check("unknown mode: exit 2", p.returncode == 2, p.stderr)
        check("unknown mode: message", p.stderr.startswith(
            "ckpt unshard: error: unknown --rank-values 'rank1' (error, "
            "rank0 or per-rank)\n"), p.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
