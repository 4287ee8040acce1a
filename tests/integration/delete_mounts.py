#!/usr/bin/python3
# ctest-cost: 5
"""delete_mounts.py - deleting never crosses into another filesystem
(issue 20 class 8), as `rm --one-file-system`. A bad run holding a tmpfs
or a bind mount is an error naming it in clean and process, -n says so,
and the other filesystem's files stay; `unshard --delete-sharded` refuses
a step holding one (-n predicts it); `upload --delete-source` copies the
files of a mount inside SRC but deletes none of them. A file
bind-mounted into a checkpoint that `clean --keep-last` prunes, after the
walk that found no mount (at the prune's re-check, the second lstat of
the step: tests/support/age_preload.c runs `mount --bind` then), stays:
the tree delete refuses it by name, `error RUN '<aside>/config.yaml' is a
mount point (another filesystem); not deleting across it`, and the
bound file keeps its bytes. Needs mount(2)
(root, and a machine that permits it): where mount(2) is refused the test
says so and exits 77 (skipped, not passed; scripts/test.sh fails on it
unless tests/skips-allowed.txt lists it)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import Checker, age, ckpt, gen, tree  # noqa: E402


def mount(*args):
    return subprocess.run(["mount"] + list(args), capture_output=True,
                          text=True)


def umount(path):
    subprocess.run(["umount", "-l", path], capture_output=True)


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe")
        os.makedirs(probe)
        r = mount("-t", "tmpfs", "none", probe)
        if r.returncode != 0:
            print("SKIP: delete_mounts (mount -t tmpfs refused: %s; this "
                  "test needs root)" % r.stderr.strip(), flush=True)
            return 77
        umount(probe)
        runs = os.path.join(tmp, "runs")
        gen(runs)
        mounted = []
        try:
            body(c, tmp, runs, mounted)
        finally:
            # (wherever they are now: a failing ckpt may have renamed
            # what holds them)
            with open("/proc/self/mounts") as f:
                mine = [line.split()[1] for line in f
                        if line.split()[1].startswith(tmp + "/")]
            for m in sorted(mine, key=len, reverse=True):
                umount(m)
    return c.finish()


def tmpfs(mounted, path, files):
    os.makedirs(path, exist_ok=True)
    r = mount("-t", "tmpfs", "none", path)
    assert r.returncode == 0, r.stderr
    mounted.append(path)
    for n, data in files.items():
        with open(os.path.join(path, n), "wb") as f:
            f.write(data)


def body(c, tmp, runs, mounted):
    dest = os.path.join(tmp, "dest")
    # A bad run (step0 and an aborted step500) with a tmpfs in step500,
    # and one with a bind mount of a directory kept elsewhere.
    run = os.path.join(runs, "2871003")
    tmpfs(mounted, os.path.join(run, "step500", "scratch"),
          {"data": b"precious"})
    other = os.path.join(tmp, "other")
    os.makedirs(other)
    with open(os.path.join(other, "keep"), "wb") as f:
        f.write(b"elsewhere")
    brun = os.path.join(runs, "2871004")
    os.makedirs(os.path.join(brun, "train_data", "bound"))
    r = mount("--bind", other, os.path.join(brun, "train_data", "bound"))
    assert r.returncode == 0, r.stderr
    mounted.append(os.path.join(brun, "train_data", "bound"))
    age(runs)
    cases = ((run, "step500/scratch"), (brun, "train_data/bound"))
    for rn, at in cases:
        msg = ("holds a mount point (another filesystem): %s; not deleting "
               "across it" % at)
        before = tree(rn)
        for args in (["clean", "-n"], ["clean"]):
            rc, out, err = ckpt(*(args + [rn]))
            c.eq("%s %s: error naming the mount" % (" ".join(args), at),
                 (rc, out), (1, [["error", rn, msg]]))
        for args in (["process", "-n"], ["process"]):
            rc, out, err = ckpt(*(args + ["--no-wandb", rn, "--dest",
                                          dest]))
            c.eq("%s %s: failed judge" % (" ".join(args), at),
                 (rc, out[0]), (1, ["error", rn, "judge: " + msg]))
        c.eq("%s: run and mount untouched" % at, tree(rn), before)
    c.eq("tmpfs file intact", tree(os.path.join(run, "step500", "scratch")),
         {"data": b"precious"})
    c.eq("bind-mounted directory intact", tree(other),
         {"keep": b"elsewhere"})

    # unshard --delete-sharded: step1000 has a complete -unsharded copy;
    # a tmpfs inside it keeps it whole, and -n says so first.
    good = os.path.join(tmp, "good")
    shutil.copytree(os.path.join(runs, "2871001"), good, symlinks=True)
    # the copy is ckpt's own output (the generated one was written by
    # torch.save: other bytes, itself a refusal before the mount's)
    shutil.rmtree(os.path.join(good, "step1000-unsharded"))
    rc, out, err = ckpt("unshard", "--step", "1000", good, good)
    c.eq("unshard step1000 (%s)" % err, rc, 0)
    tmpfs(mounted, os.path.join(good, "step1000", "scratch"),
          {"data": b"precious"})
    before = tree(os.path.join(good, "step1000"))
    want = ["error", "step1000", "'%s' holds a mount point (another "
            "filesystem): scratch; not deleting across it"
            % os.path.join(good, "step1000")]
    for args in (["unshard", "-n"], ["unshard"]):
        rc, out, err = ckpt(*(args + ["--delete-sharded", good, good]))
        c.eq("%s --delete-sharded: step1000 refused" % " ".join(args),
             [o for o in out if o[1] == "step1000"], [want])
    c.eq("unshard: step1000 and the tmpfs intact",
         tree(os.path.join(good, "step1000")), before)
    # ...and one unsharded now, then refused: -n says so too.
    good2 = os.path.join(tmp, "good2")
    shutil.copytree(os.path.join(runs, "2871001"), good2, symlinks=True)
    shutil.rmtree(os.path.join(good2, "step1000-unsharded"))
    tmpfs(mounted, os.path.join(good2, "step1000", "scratch"),
          {"data": b"precious"})
    before = tree(os.path.join(good2, "step1000"))
    want[2] = want[2].replace(good, good2)
    for args in (["unshard", "-n"], ["unshard"]):
        rc, out, err = ckpt(*(args + ["--step", "1000", "--delete-sharded",
                                      good2, good2]))
        c.eq("%s --delete-sharded (unsharded now): step1000 refused"
             % " ".join(args),
             (rc, [o[:3] for o in out if o[1] == "step1000"]), (1, [want]))
    c.eq("unshard: step1000 and the tmpfs intact (2)",
         tree(os.path.join(good2, "step1000")), before)

    # upload --delete-source: a tmpfs inside SRC is copied, never deleted.
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    with open(os.path.join(src, "own"), "wb") as f:
        f.write(b"own")
    tmpfs(mounted, os.path.join(src, "m"), {"data": b"precious"})
    up = os.path.join(tmp, "up")
    rc, out, err = ckpt("upload", "--delete-source", src, up)
    data = os.path.join(src, "m", "data")
    c.eq("upload --delete-source: the mount's file not deleted",
         (rc, [r for r in out if r[0] != "total"]),
         (1, [["error", data, "-", "'%s' is on another filesystem (below "
               "a mount point); not deleting across it" % data]]))
    c.eq("upload: copied", tree(up), {"own": b"own", "m/data": b"precious"})
    c.eq("upload: the mount's file stays", tree(src), {"m/data": b"precious"})
    bound_file(c, tmp, runs)


def bound_file(c, tmp, runs):
    """clean --keep-last 1 prunes step0 of a good run; a file is
    bind-mounted onto step0/config.yaml between the walk and the delete."""
    run = os.path.join(tmp, "prune", "2871001")
    shutil.copytree(os.path.join(runs, "2871001"), run, symlinks=True)
    age(os.path.dirname(run))
    own = tree(os.path.join(run, "step0"))["config.yaml"]
    keep = os.path.join(tmp, "keep")
    with open(keep, "wb") as f:
        f.write(b"bound from elsewhere")
    step = os.path.join(run, "step0")
    env = dict(os.environ, CKPT_TEST_WRITE_ON=step,
               CKPT_TEST_WRITE_ON_CALL="stat", CKPT_TEST_WRITE_ON_NTH="2",
               CKPT_TEST_RUN="mount --bind '%s' '%s/config.yaml'"
               % (keep, step))
    rc, out, err = ckpt("clean", "--keep-last", "1", run, env=env)
    pat = (r"'%s/\.step0\.ckpt-del-[^/]+/config\.yaml' is a mount point "
           r"\(another filesystem\); not deleting across it$"
           % re.escape(run))
    c.eq("prune, a file bound in late: refused by name (%s)"
         % err.strip()[-300:],
         (rc, [(r[0], r[1], "<that refusal>" if re.match(pat, r[2])
                else r[2]) for r in out]),
         (1, [("error", run, "<that refusal>")]))
    with open(keep, "rb") as f:
        c.eq("prune: the bound file's bytes kept", f.read(),
             b"bound from elsewhere")
    aside = [n for n in os.listdir(run) if n.startswith(".step0.ckpt-del-")]
    # (what else of it is gone depends on the directory's order)
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    c.eq("prune: the aside step holds the mount point",
         [os.path.join(run, n, "config.yaml") in points for n in aside],
         [True])
    for n in aside:
        subprocess.run(["umount", os.path.join(run, n, "config.yaml")],
                       check=True)
    c.eq("prune: under the mount, the step's own file",
         [tree(os.path.join(run, n)).get("config.yaml") for n in aside],
         [own])


if __name__ == "__main__":
    sys.exit(main())
