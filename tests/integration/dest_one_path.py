#!/usr/bin/python3
# ctest-cost: 90
"""dest_one_path.py - two sources, one DEST path (issue 27, class 5).

  upload   `upload --delete-source a/run b/run DEST` puts both at
           DEST/run: a file both have with other bytes fails as a
           conflict naming both (the first SRC's copy stays), equal ones
           are skipped, and no source is deleted; `-n` says the same.
           Without a conflict both go. Local and s3 DEST. Before, the
           second overwrote the first's file and both sources were
           deleted, exit 0.
  process  two runs mapped to one W&B path (a8, b8 -> ent/proj/same1),
           each with its own config.yaml, in ONE `process` call (runs in
           parallel): ten tries, and never is a config.yaml lost (a
           source gone whose config.yaml is not at DEST), never are both
           deleted. The DEST path is leased (DEST/.ckpt-process/
           ent%2Fproj%2Fsame1.path.lease) while a run writes there: the
           other waits (skipped: leased) or, once the first is done,
           fails with a conflict. Before, a check-then-write: both
           listed DEST empty, both wrote, both were deleted.
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (Checker, S3Env, age_tree, ckpt, dest_tree,  # noqa: E402
                    gen_runs, old_ctime, scratch)

B = "ckpt-test"


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def listing(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def upload_two(c, env, tmp, dest, tag):
    root = os.path.join(tmp, "up-" + tag)
    a, b = os.path.join(root, "a", "run"), os.path.join(root, "b", "run")
    write(os.path.join(a, "config.yaml"), b"lr: 0.1\n")
    write(os.path.join(b, "config.yaml"), b"lr: 0.2\n")   # same size
    for d in (a, b):
        write(os.path.join(d, "shared.bin"), b"equal bytes" * 100)
    write(os.path.join(a, "only-a"), b"a")
    write(os.path.join(b, "only-b"), b"b")
    args = ["upload", "-v", "--delete-source", a, b, dest]
    rc_n, out_n, _ = ckpt(args[0], "-n", *args[1:], env=env)
    rc, out, err = ckpt(*args, env=env)
    want = ("error\t%s\t%s/run/config.yaml\tconflict: %s/run/config.yaml "
            "is also where %s goes (another SRC of this upload), with "
            "different bytes; not replaced" % (
                os.path.join(b, "config.yaml"), dest, dest,
                os.path.join(a, "config.yaml")))
    c.eq("%s: exit (%s)" % (tag, err[-300:]), rc, 1)
    c.eq("%s: -n exit" % tag, rc_n, 1)
    c.true("%s: the conflict row (%r)" % (tag, out), want in out.splitlines())
    c.true("%s: -n says it too (%r)" % (tag, out_n),
           want in out_n.splitlines())
    c.true("%s: the equal file skipped" % tag, "skip\t%s" % os.path.join(
        b, "shared.bin") in out)
    c.eq("%s: no source deleted" % tag, listing(a) + listing(b),
         ["config.yaml", "only-a", "shared.bin", "config.yaml", "only-b",
          "shared.bin"])
    got = dest_tree(env, dest + "/run")
    c.eq("%s: DEST holds the first SRC's config.yaml" % tag,
         got.get("config.yaml"), b"lr: 0.1\n")
    # Equal bytes everywhere: both sources go.
    for name, data in (("config.yaml", b"lr: 0.1\n"),
                       ("shared.bin", b"equal bytes" * 100)):
        for d in (a, b):
            write(os.path.join(d, name), data)
    rc, out, err = ckpt(*args, env=env)
    c.eq("%s, equal: exit (%s)" % (tag, out + err[-300:]), rc, 0)
    c.eq("%s, equal: both sources deleted" % tag,
         (os.path.exists(a), os.path.exists(b)), (False, False))
    c.eq("%s, equal: DEST the union" % tag, sorted(dest_tree(
        env, dest + "/run")), ["config.yaml", "only-a", "only-b",
                               "shared.bin"])


def process_two(c, env, tmp, gen, dest_of, tag, tries):
    lost = both_gone = 0
    outcomes = set()
    for t in range(tries):
        root = os.path.join(tmp, "p-%s-%d" % (tag, t))
        runs = {}
        for rid, lr in (("a8", b"0.1"), ("b8", b"0.2")):
            d = os.path.join(root, rid)
            shutil.copytree(os.path.join(gen, "2871005"), d)
            write(os.path.join(d, "config.yaml"), b"lr: " + lr + b"\n")
            runs[rid] = d
        age_tree(root)
        m = os.path.join(root, "map.tsv")
        with open(m, "w") as f:
            f.write("a8\tent/proj/same1\tslurm\nb8\tent/proj/same1\tslurm\n")
        dest = dest_of(t)
        rc, out, err = ckpt("process", "--min-age", "0", "--unshard", "none",
                            "--wandb-map", m, runs["a8"], runs["b8"],
                            "--dest", dest, env=env)
        at = dest_tree(env, dest + "/ent/proj/same1").get("config.yaml")
        gone = [r for r in runs if not os.path.exists(runs[r])]
        for r in gone:
            want = b"lr: " + (b"0.1" if r == "a8" else b"0.2") + b"\n"
            if at != want:
                lost += 1
                print("try %d: %s deleted, DEST config.yaml %r\n%s%s"
                      % (t, r, at, out, err), file=sys.stderr)
        both_gone += len(gone) == 2
        outcomes.add(tuple(sorted(x.split("\t")[0] for x in out.splitlines()
                                  if not x.startswith("total"))))
        c.true("%s try %d: exit 0 or 1 (%s)" % (tag, t, out + err[-300:]),
               rc in (0, 1))
        c.eq("%s try %d: one run processed" % (tag, t), len(gone), 1)
    c.eq("%s: no config.yaml lost in %d tries" % (tag, tries), lost, 0)
    c.eq("%s: never both deleted" % tag, both_gone, 0)
    c.true("%s: the other run waited or failed: %r" % (tag, outcomes),
           outcomes <= {("error", "process"), ("process", "skip")})


def main():
    c = Checker()
    os.environ.update(old_ctime())
    with scratch("ckpt-onepath-") as tmp, S3Env() as s3:
        env = s3.env()
        env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
        gen = os.path.join(tmp, "gen")
        gen_runs(gen)
        upload_two(c, env, tmp, os.path.join(tmp, "udest"), "upload local")
        upload_two(c, env, tmp, "s3://%s/udest" % B, "upload s3")
        process_two(c, env, tmp, gen,
                    lambda t: os.path.join(tmp, "pdest%d" % t), "local", 10)
        process_two(c, env, tmp, gen, lambda t: "s3://%s/pdest%d" % (B, t),
                    "s3", 4)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
