#!/usr/bin/python3
# ctest-cost: 60
"""unshard_inplace.py - every format is read in place: from object storage
(s3rver behind the signing proxy) by ranged GETs and from a plain .tar by
member reads, never fetched or extracted into scratch.

For each of OLMo torch_legacy, OLMo local, OLMo olmo_core and zarr v2 (real
torch 1.13 / python3-zarr fixtures) and an Orbax OCDBT step (make_orbax.py;
its values are checked by unshard_orbax.py), the step is first unsharded from its
local directory (the reference), then
  * as a run in S3:             ckpt unshard s3://ck/F/run DEST
  * as one checkpoint in S3:    ckpt unshard s3://ck/F/run/STEP DEST
  * as a run in a local .tar:   ckpt unshard F-run.tar DEST
  * as a run in a .tar in S3:   ckpt unshard s3://ck/F-run.tar DEST
  * a root checkpoint in .tar:  ckpt unshard F-step.tar DEST
each with --tmp-dir below a regular file, so that creating any scratch
directory fails the step. Every output must be byte-identical to the
reference (which torch checks against the fixture's expected state). From
the proxy's counters: every object GET is ranged, and the files a format
never needs (OLMo's train/rank{R>0}.pt) were never fetched, so an OLMo
local step costs fewer bytes than it holds. The other formats read some
bytes twice at this fixture size (a 64 KiB window parses a rank file's
zip or safetensors header, then the tensor data is read; the run judge
and the planner both read metadata.json), so for them the byte count is
printed, not asserted; so are the request counts and the largest GET
(range sizes are source.c's policy, not this test's)."""
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SUP = os.path.join(HERE, "..", "support")
sys.path.insert(0, SUP)
from s3test import BUILD, Checker, S3Env, sh  # noqa: E402
import harness  # noqa: E402
from harness import compare, generate  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ck"


def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def contents(root):
    out = {}
    for f in files(root):
        with open(os.path.join(root, f), "rb") as fh:
            out[f] = fh.read()
    return out


def sizes(root):
    return {f: os.path.getsize(os.path.join(root, f)) for f in files(root)}


def make_tar(path, root, arcroot):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        t.add(root, arcname=arcroot)


# Format -> (fixture step directory below fx, step name, expected for torch).
CASES = {
    "legacy": ("legacy/ckpt", "step10", "legacy/expected"),
    "local": ("local/w4-21fp/ckpt", "step20", "local/w4-21fp/expected"),
    "olmo_core": ("core/ckpt", "step30", "core/expected"),
    "zarr": ("zarr/ckpt", "0000000040", "zarr/expected.pt"),
    # Values checked by unshard_orbax.py; here the bytes of the local
    # unshard are the reference.
    "orbax": ("orbax/run/1", "100", None),
}


def unshard(c, what, env, src, dest, trap):
    """Run `ckpt unshard -v` with scratch made impossible; return stderr."""
    p = subprocess.run([CKPT, "unshard", "-v", "--no-progress", "--tmp-dir",
                        os.path.join(trap, "scratch"), src, dest], env=env,
                       capture_output=True, text=True, timeout=600)
    c.eq(what + ": exit", (p.returncode, [l for l in p.stderr.splitlines()
                                          if "error" in l]), (0, []))
    return p.stderr


def same_outputs(c, what, got, ref):
    c.eq(what + ": files", files(got), files(ref))
    c.true(what + ": byte-identical to the local unshard",
           contents(got) == contents(ref))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-unshard-inplace-")
    try:
        fx = os.path.join(tmp, "fx")
        generate(["make_olmo_legacy.py", os.path.join(fx, "legacy"),
                  "--ranks", "3", "--no-verify"],
                 ["make_olmo_local.py", os.path.join(fx, "local"),
                  "--no-verify"],
                 ["make_olmo_core.py", os.path.join(fx, "core"), "--case",
                  "f32-2", "--no-verify"],
                 ["make_zarr.py", os.path.join(fx, "zarr")])
        # No main(argv): its own process.
        subprocess.run([harness.PY, os.path.join(SUP, "make_orbax.py"),
                        os.path.join(fx, "orbax")], check=True,
                       capture_output=True)
        # A regular file: --tmp-dir below it can never be created.
        trap = os.path.join(tmp, "trap")
        open(trap, "w").close()
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            for fmt, (rel, step, expected) in CASES.items():
                check_format(c, s3, env, tmp, fx, trap, fmt, rel, step,
                             expected)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish() | harness.finish()


def check_format(c, s3, env, tmp, fx, trap, fmt, rel, step, expected):
    base = os.path.join(tmp, fmt)
    stepdir = os.path.join(fx, rel)
    run = os.path.join(base, "run")
    os.makedirs(run)
    shutil.copytree(stepdir, os.path.join(run, step))
    step_bytes = sum(sizes(stepdir).values())

    ref = os.path.join(base, "ref")
    sh(CKPT, "unshard", "--no-progress", stepdir, ref)
    if expected:
        compare("%s: the local unshard equals the fixture's expected "
                "state" % fmt, ref, os.path.join(fx, expected))

    # A run in S3, read by ranged GETs.
    sh("aws", "s3", "cp", "--quiet", "--recursive", run,
       "s3://%s/%s/run/" % (B, fmt), env=env)
    s3.reset_stats()
    dest = os.path.join(base, "out-s3run")
    log = unshard(c, fmt + " s3 run", env, "s3://%s/%s/run" % (B, fmt),
                  dest, trap)
    st = s3.stats()
    c.true(fmt + " s3 run: read in place",
           "%s: read in place from s3://%s/%s/run" % (step, B, fmt) in log)
    same_outputs(c, fmt + " s3 run", os.path.join(dest, step + "-unsharded"),
                 ref)
    reads(c, fmt + " s3 run", st, step_bytes, fmt,
          "%s/run/%s" % (fmt, step))

    # The step alone, as one remote checkpoint.
    s3.reset_stats()
    dest = os.path.join(base, "out-s3one")
    unshard(c, fmt + " s3 checkpoint", env,
            "s3://%s/%s/run/%s" % (B, fmt, step), dest, trap)
    same_outputs(c, fmt + " s3 checkpoint", dest, ref)
    reads(c, fmt + " s3 checkpoint", s3.stats(), step_bytes, fmt,
          "%s/run/%s" % (fmt, step))

    # The run in a plain tar, local and in S3: member reads.
    tar = os.path.join(base, fmt + "-run.tar")
    make_tar(tar, run, "run")
    dest = os.path.join(base, "out-tar")
    log = unshard(c, fmt + " tar run", env, tar, dest, trap)
    c.true(fmt + " tar run: read in place",
           "%s: read in place from %s" % (step, tar) in log)
    same_outputs(c, fmt + " tar run", os.path.join(dest, step + "-unsharded"),
                 ref)
    sh("aws", "s3", "cp", "--quiet", tar, "s3://%s/%s-run.tar" % (B, fmt),
       env=env)
    s3.reset_stats()
    dest = os.path.join(base, "out-s3tar")
    unshard(c, fmt + " s3 tar run", env, "s3://%s/%s-run.tar" % (B, fmt),
            dest, trap)
    same_outputs(c, fmt + " s3 tar run",
                 os.path.join(dest, step + "-unsharded"), ref)
    reads(c, fmt + " s3 tar run", s3.stats(), step_bytes, fmt)

    # One checkpoint at the root of a plain tar: DEST is the checkpoint.
    tar1 = os.path.join(base, fmt + "-step.tar")
    make_tar(tar1, stepdir, ".")
    dest = os.path.join(base, "out-tar1")
    unshard(c, fmt + " tar checkpoint", env, tar1, dest, trap)
    same_outputs(c, fmt + " tar checkpoint", dest, ref)


# Files a format never reads: OLMo's unsharders keep train/rank0.pt only.
UNREAD = {
    "legacy": [],
    "local": ["train/rank1.pt", "train/rank2.pt", "train/rank3.pt"],
    "olmo_core": ["train/rank1.pt"],
    "zarr": [],
    "orbax": [],
}


def reads(c, what, st, step_bytes, fmt, prefix=None):
    """Check the proxy's counters of one unshard; prefix: the step's key
    prefix (a run in S3), else the step was read from a tar in S3."""
    og = st["object_gets"]
    keys = og["keys"]
    print("%s: %d requests (%s), %d object GETs (%d ranged, %d whole), %d "
          "bytes of a %d-byte step, largest GET %d" % (
              what, st["requests"], " ".join(
                  "%s %d" % kv for kv in sorted(st["methods"].items())),
              og["ranged"] + og["whole"], og["ranged"], og["whole"],
              og["bytes"], step_bytes, og["max_body"]),
          flush=True)
    c.eq(what + ": every request signed correctly", st["sig_fail"], 0)
    c.eq(what + ": no object fetched whole (every GET ranged)", og["whole"],
         0)
    if prefix is None:
        return
    c.eq(what + ": files the format does not need are never fetched",
         [f for f in UNREAD[fmt] if "/%s/%s/%s" % (B, prefix, f) in keys],
         [])
    if fmt == "local":
        # Three of its four train/ files unread: less than the step even
        # with the 64 KiB windows that parse each rank file's zip.
        c.true(what + ": fewer bytes fetched than the step holds",
               og["bytes"] < step_bytes)


if __name__ == "__main__":
    sys.exit(main())
