#!/usr/bin/python3
# ctest-cost: 45
"""unshard_anywhere.py - `ckpt unshard` of every sharded format from
every kind of location to object storage, against the same checkpoint
unsharded local to local.

Formats: DCP written by torch 1.13 (make_dcp.py) and by torch 2.14 (the
committed fixture tests/fixtures/dcp-v2.14/row), OLMo torch_legacy
(make_olmo_legacy.py, 4 ranks), OLMo local (make_olmo_local.py, 2
ranks), olmo_core (make_olmo_core.py) and zarr (make_zarr.py: edge
chunks, chunks that are not whole rows, F order, big-endian, fill
values). Each is a step under a
run directory (run/step100; zarr's run/step50: `ls` judges only
stepN-unsharded an unsharded checkpoint, not the 0000000050-unsharded
that run mode makes of a T5X step named by number), read from:
  local     the step directory                  -> DEST/STEP-unsharded
  s3        the same files in S3 (the step)      -> DEST/STEP-unsharded
  tar       a plain .tar of run/ (run mode)      -> DEST/STEP-unsharded
  tar.zst   a .tar.zst of run/ (run mode)        -> DEST/STEP-unsharded
DEST is s3rver behind the signature-checking proxy. All outputs are
downloaded with one `aws s3 cp --recursive` and each must be byte-for-byte
the local-to-local output of the same step, whose values are checked
against torch's expected state here (check_unshard.py); `ckpt ls` of
DEST must judge each a complete unsharded checkpoint, and no -unfinished
marker may be left.

Read in place, not fetched whole: the s3 and .tar sources run with
--tmp-dir below a regular file, so creating any scratch directory fails
the step; the proxy's counters of the s3 source show every object GET
ranged and their number bounded: for the OLMo formats (legacy, local,
olmo_core), whose small rank files are fetched whole ahead of the
planner, at most one per file of the step plus 2 (the run judge and the
planner both read a metadata file); reading each rank file's zip
directory, pickle and records with GETs of their own, as before, makes
about twice as many. DCP and zarr: at most 4 per file, plus 8."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SUP = os.path.join(HERE, "..", "support")
sys.path.insert(0, SUP)
from s3test import BUILD, S3Env, contents, sh, tool  # noqa: E402
from harness import check, compare, finish, generate  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
FIXTURES = os.path.join(HERE, "..", "fixtures")
B = "any"
KINDS = ("local", "s3", "tar", "tar-zst")
# Planners that fetch their small rank files whole, ahead (sources/prefetch.c).
OLMO = ("legacy", "local", "olmocore")


tree = contents


def formats(fx):
    """name -> (checkpoint directory, expected state for check_unshard,
    step name)."""
    return {
        "dcp113": (os.path.join(fx, "rows", "ckpt"),
                   os.path.join(fx, "rows", "expected.pt"), "step100"),
        "dcp214": (os.path.join(FIXTURES, "dcp-v2.14", "row", "ckpt"),
                   os.path.join(FIXTURES, "dcp-v2.14", "row",
                                "reference.pt"), "step100"),
        "legacy": (os.path.join(fx, "legacy", "ckpt"),
                   os.path.join(fx, "legacy", "expected"), "step100"),
        "local": (os.path.join(fx, "local", "w2-21", "ckpt"),
                  os.path.join(fx, "local", "w2-21", "expected"), "step100"),
        "olmocore": (os.path.join(fx, "core", "ckpt"),
                     os.path.join(fx, "core", "expected"),
                     "step100"),
        "zarr": (os.path.join(fx, "zarr", "ckpt"),
                 os.path.join(fx, "zarr", "expected.pt"), "step50"),
    }


def unshard(env, src, dest, trap=None):
    args = [CKPT, "unshard", "-q", "--no-progress"]
    if trap:
        args += ["--tmp-dir", os.path.join(trap, "scratch")]
    return subprocess.run(args + [src, dest], env=env, capture_output=True,
                          text=True, timeout=600)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-unshard-anywhere-")
    try:
        fx = os.path.join(tmp, "fx")
        generate(["make_dcp.py", os.path.join(fx, "rows"), "--case", "rows",
                  "--no-verify"],
                 ["make_olmo_legacy.py", os.path.join(fx, "legacy"),
                  "--ranks", "4", "--no-verify"],
                 ["make_olmo_local.py", os.path.join(fx, "local"),
                  "--world", "2", "--no-verify"],
                 ["make_olmo_core.py", os.path.join(fx, "core"), "--case",
                  "f32-2", "--no-verify"],
                 ["make_zarr.py", os.path.join(fx, "zarr")])
        # A regular file: --tmp-dir below it can never be created.
        trap = os.path.join(tmp, "trap")
        open(trap, "w").close()
        fmts = formats(fx)
        refs = {}
        up = os.path.join(tmp, "up")
        for name, (ck, expected, step) in sorted(fmts.items()):
            refs[name] = prepare(tmp, up, name, ck, expected, step)
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            sh("aws", "s3", "cp", "--quiet", "--recursive", up,
               "s3://%s/src/" % B, env=env)
            for name, (ck, _, step) in sorted(fmts.items()):
                sources(env, s3, tmp, trap, name, step)
            dl = os.path.join(tmp, "dl")
            sh("aws", "s3", "cp", "--quiet", "--recursive",
               "s3://%s/out" % B, dl, env=env)
            for name, (_, _, step) in sorted(fmts.items()):
                outputs(env, dl, name, step, refs[name])
            _, keys, _ = tool(env, "ls", "-r", "s3://%s/out" % B)
            left = [k for k in keys.decode().splitlines()
                    if "-unfinished" in k]
            check("no -unfinished marker left anywhere", not left,
                  "\n".join(left))
            check("every request signed correctly",
                  s3.stats()["sig_fail"] == 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


def prepare(tmp, up, name, ck, expected, step):
    """The step under a run directory, its archives, the files to upload
    and the local -> local reference (checked against torch)."""
    base = os.path.join(tmp, name)
    run = os.path.join(base, "run")
    shutil.copytree(ck, os.path.join(run, step))
    shutil.copytree(run, os.path.join(up, name, "run"))
    ref = os.path.join(base, "ref")
    sh(CKPT, "unshard", "-q", "--no-progress", os.path.join(run, step), ref)
    compare("%s: local -> local equals torch" % name, ref, expected)
    sh("tar", "cf", os.path.join(base, "run.tar"), "-C", base, "run")
    sh("tar", "--zstd", "-cf", os.path.join(base, "run.tar.zst"), "-C",
       base, "run")
    return tree(ref)


def sources(env, s3, tmp, trap, name, step):
    base = os.path.join(tmp, name)
    nfiles = sum(len(fs) for _, _, fs in os.walk(os.path.join(base, "run")))
    srcs = {"local": (os.path.join(base, "run", step), None),
            "s3": ("s3://%s/src/%s/run/%s" % (B, name, step), trap),
            "tar": (os.path.join(base, "run.tar"), trap),
            "tar-zst": (os.path.join(base, "run.tar.zst"), None)}
    for kind in KINDS:
        src, tr = srcs[kind]
        dest = "s3://%s/out/%s/%s" % (B, name, kind)
        what = "%s: %s -> s3" % (name, kind)
        # One checkpoint: DEST is its output; a run: DEST holds them.
        if kind in ("local", "s3"):
            dest += "/%s-unsharded" % step
        s3.reset_stats()
        p = unshard(env, src, dest, tr)
        st = s3.stats()
        check(what + ": exit 0", p.returncode == 0, p.stdout + p.stderr)
        if kind != "s3":
            continue
        og = st["object_gets"]
        gets = og["ranged"] + og["whole"]
        print("%s: %d object GETs (%d whole) of %d files, %d bytes, largest "
              "%d" % (what, gets, og["whole"], nfiles, og["bytes"],
                      og["max_body"]), flush=True)
        check(what + ": every GET ranged (none fetches an object whole)",
              og["whole"] == 0, "%d whole" % og["whole"])
        if name in OLMO:
            check(what + ": each file fetched once (%d GETs <= %d files + 2)"
                  % (gets, nfiles), gets <= nfiles + 2)
        else:
            check(what + ": GETs bounded by the files read (%d <= 4 x %d + "
                  "8)" % (gets, nfiles), gets <= 4 * nfiles + 8)


def outputs(env, dl, name, step, want):
    for kind in KINDS:
        what = "%s: %s -> s3" % (name, kind)
        top = os.path.join(dl, name, kind)
        got_dirs = sorted(os.listdir(top)) if os.path.isdir(top) else []
        check(what + ": one output directory", got_dirs ==
              [step + "-unsharded"], repr(got_dirs))
        got = tree(os.path.join(top, step + "-unsharded"))
        check(what + ": files", sorted(got) == sorted(want),
              "%s != %s" % (sorted(got), sorted(want)))
        bad = [k for k, v in want.items() if got.get(k) != v]
        check(what + ": bytes equal the local output", not bad,
              "differ: %s" % bad)
        # ls judges it complete. (DEST is listed as a run, not its parent
        # one level down: s3rver's delimiter listings leave out prefixes
        # that hold only deeper ones.)
        p = subprocess.run([CKPT, "ls", "s3://%s/out/%s/%s" % (B, name,
                                                               kind)],
                           env=env, capture_output=True, text=True,
                           timeout=120)
        rows = [tuple(ln.split("\t")[1:5]) for ln in p.stdout.splitlines()]
        num = step.replace("step", "")
        check(what + ": ls judges it a complete unsharded checkpoint",
              p.returncode == 0 and rows == [(step + "-unsharded", num,
                                              "unsharded", "complete")],
              "rc %d\n%s%s" % (p.returncode, p.stdout, p.stderr))

if __name__ == "__main__":
    sys.exit(main())
