#!/usr/bin/python3
# ctest-cost: 30
"""process_filters.py - `ckpt process --include/--exclude/--drop-sharded/
--drop-incomplete` on the sample runs of tests/support/gen_runs.py, to a
local DEST and to s3rver behind the signing proxy: exact DEST contents,
exact rows, and exactly what stays at the source. Files the rules leave
out are never deleted (an archive holding some is kept whole); dropped
steps are left out of DEST and deleted with the source."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, HERE)
from s3test import BUILD, Checker, S3Env, tool  # noqa: E402
from s3test import old_ctime  # noqa: E402
from process_s3 import gen, local_tree, rows, s3_tree, snapshot  # noqa: E402
from gen_runs import whole_unsharded  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ckpt-test"


def ckpt(env, *args):
    r = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       timeout=600)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def without(files, *prefixes):
    return {k: v for k, v in files.items()
            if not any(k.startswith(p) for p in prefixes)}


def size(files):
    return sum(len(v) for v in files.values())


def source_left(path):
    """Files (links as 'LINK->target') still in a run directory."""
    out = []
    for d, ds, fs in os.walk(path):
        for n in ds + fs:
            p = os.path.join(d, n)
            if os.path.islink(p):
                out.append("%s->%s" % (os.path.relpath(p, path),
                                       os.readlink(p)))
            elif os.path.isfile(p):
                out.append(os.path.relpath(p, path))
    return sorted(out)


def drops_local(c, env, tmp):
    """--drop-sharded --drop-incomplete: step1000 (sharded, with its
    -unsharded sibling) and step2000 (aborted) are left out of DEST and
    deleted with everything else; step0 (no unsharded copy) goes."""
    runs = os.path.join(tmp, "runs-drop")
    gen(runs)
    whole_unsharded(os.path.join(runs, "2871001"))
    src = os.path.join(runs, "2871001")
    full = snapshot(src)
    want = without(full, "step1000/", "step2000/")
    dest = os.path.join(tmp, "dest-drop")
    src2 = os.path.join(runs, "2871201")
    shutil.copytree(src, src2, symlinks=True)
    shutil.rmtree(os.path.join(src2, "step1000-unsharded"))
    src2_all = snapshot(src2)
    rc, out, _ = ckpt(env, "process", "--no-wandb", "--unshard", "none",
                      "--drop-sharded", "--drop-incomplete", src,
                      "--dest", dest)
    c.eq("drop: exit", rc, 0)
    c.eq("drop: rows", rows(out), [
        ["process", src, dest + "/2871001", str(len(want)),
         str(size(want)), "0", str(size(full))],
        ["total", "process=1", "delete=0", "skip=0", "error=0", "files=%d" % len(want), "bytes=%d" % size(want),
         "steps=0", "freed=%d" % size(full)]])
    c.eq("drop: DEST", local_tree(os.path.join(dest, "2871001")), want)
    c.eq("drop: source gone", os.path.exists(src), False)

    # A sharded step the unshard phase merged in this run is dropped too:
    # DEST gets only its -unsharded copy.
    before = without(snapshot(src2), "step1000/")
    rc, out, err = ckpt(env, "process", "--no-wandb", "--drop-sharded",
                        "--tmp-dir", os.path.join(tmp, "scratch"), src2,
                        "--dest", dest)
    got = local_tree(os.path.join(dest, "2871201"))
    c.eq("drop unsharded now: exit", (rc, err.count("failed")), (0, 0))
    c.eq("drop unsharded now: DEST names", sorted(got), sorted(
        list(before) +
        ["step1000-unsharded/" + n
         for n in ("config.yaml", "model.pt", "optim.pt", "train.pt")]))
    c.eq("drop unsharded now: row", rows(out)[0], [
        "process", src2, dest + "/2871201", str(len(got)),
        str(size(got)), "1", str(size(src2_all))])
    c.eq("drop unsharded now: source gone", os.path.exists(src2), False)


def filters_s3(c, env, tmp):
    """--exclude to s3://: excluded files stay at the source (with the
    run's `latest` link), everything uploaded is deleted; an archive
    whose members were left out is kept whole."""
    runs = os.path.join(tmp, "runs-filt")
    gen(runs)
    whole_unsharded(os.path.join(runs, "2871001"))
    src = os.path.join(runs, "2871001")
    full = snapshot(src)
    want = without(full, "step0/", "train_data/", "step2000/")
    dest = "s3://%s/filt" % B
    rc, out, _ = ckpt(env, "process", "--no-wandb", "--unshard", "none",
                      "--exclude", "step0/", "--exclude", "*.npy",
                      "--drop-incomplete", "--json", src, "--dest", dest)
    ev = [json.loads(line) for line in out.splitlines()]
    c.eq("s3 exclude: exit", rc, 0)
    dele = [e for e in ev if e.get("phase") == "delete"]
    c.eq("s3 exclude: delete event",
         [(e["status"], e.get("reason"), e["files"], e["bytes"])
          for e in dele],
         [("ok", "kept 9 file(s) left out by --include/--exclude",
           len(full) - 9,
           size(full) - size({k: v for k, v in full.items()
                              if k.startswith("step0/") or
                              k.endswith(".npy")}))])
    run = [e for e in ev if e.get("type") == "run"][0]
    c.eq("s3 exclude: run row", (run["action"], run["files"], run["bytes"]),
         ("process", len(want), size(want)))
    c.eq("s3 exclude: DEST", s3_tree(env, "filt/2871001"), want)
    c.eq("s3 exclude: source keeps exactly the excluded files",
         source_left(src),
         sorted(["latest->step1000", "train_data/rank0.npy"] +
                ["step0/" + k[6:] for k in full if k.startswith("step0/")]))
    # A rerun without the rules (state done, source present) uploads the
    # files left out and only then deletes them; its row counts what DEST
    # holds of the run after it (issue 20 class 14), not only this pass.
    left = {k: v for k, v in full.items()
            if k.startswith("step0/") or k.endswith(".npy")}
    at_dest = without(full, "step2000/")
    rc, out, _ = ckpt(env, "process", "--no-wandb", "--unshard", "none",
                      src, "--dest", dest)
    c.eq("s3 rerun without rules: row", (rc, rows(out)[0]), (0, [
        "process", src, dest + "/2871001", str(len(at_dest)),
        str(size(at_dest)), "0", str(size(left))]))
    c.eq("s3 rerun without rules: DEST", s3_tree(env, "filt/2871001"),
         without(full, "step2000/"))
    c.eq("s3 rerun without rules: source gone", os.path.exists(src), False)

    arch = os.path.join(runs, "2871101.tar")
    afull = snapshot(arch)
    awant = {k: v for k, v in afull.items()
             if k == "config.yaml" or k.startswith("step1000-unsharded/")}
    rc, out, _ = ckpt(env, "process", "--no-wandb", "--unshard", "none",
                      "--include", "step1000-unsharded/", "--include",
                      "/config.yaml", arch, "--dest", dest)
    c.eq("s3 include archive: rows", (rc, rows(out)[0]), (0, [
        "process", arch, dest + "/2871101", str(len(awant)),
        str(size(awant)), "0", "0"]))
    c.eq("s3 include archive: DEST", s3_tree(env, "filt/2871101"), awant)
    c.eq("s3 include archive: archive kept", os.path.isfile(arch), True)


def order_and_usage(c, env, tmp):
    """First matching rule wins; patterns it cannot take are usage."""
    runs = os.path.join(tmp, "runs-order")
    gen(runs)
    whole_unsharded(os.path.join(runs, "2871001"))
    src = os.path.join(runs, "2871001")
    dest = os.path.join(tmp, "dest-order")
    res = []
    for rules in (["--include", "step0/**", "--exclude", "step0/train/"],
                  ["--exclude", "step0/train/", "--include", "step0/**"],
                  ["--include", "rank?.pt"],
                  ["--exclude", "*", "--include", "config.yaml"],
                  ["--include", "/config.yaml"]):
        rc, out, _ = ckpt(env, "process", "-n", "--no-wandb", "--unshard",
                          "none", *rules, src, "--dest", dest)
        res.append((rc, rows(out)[0][3]))
    # step0: 3 train/ files, 4 model_and_optim/, config.yaml; rank?.pt in
    # step0, step1000, step2000 train/ (latest not followed).
    c.eq("order: files per rule set", res,
         [(0, "8"), (0, "5"), (0, "9"), (0, "0"), (0, "1")])
    rc, _, err = ckpt(env, "process", "--no-wandb", "--include", "[ab]*",
                      src, "--dest", dest)
    c.eq("usage: class refused", (rc, "only *, ** and ?" in err), (2, True))
    c.eq("usage: nothing moved", os.path.isdir(src), True)


def main():
    # Trees are aged with utime(): ctimes aged too (s3test.old_ctime).
    os.environ.update(old_ctime())
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-filt-")
    try:
        with S3Env() as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            order_and_usage(c, env, tmp)
            drops_local(c, env, tmp)
            filters_s3(c, env, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
