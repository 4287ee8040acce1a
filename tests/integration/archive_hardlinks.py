#!/usr/bin/env python3
# ctest-cost: 20
"""Archives whose members are hard links (issue 20, class 12).

GNU tar stores a file's second name as a hard link member with no data.
A run whose step4000-unsharded/ holds hard links of step3000-unsharded/'s
files, archived with `tar cf` and `tar czf`:

- `upload --extract --delete-source` (local and s3 DEST) and `process`
  (local and s3 DEST) copy each link member as its target's bytes: DEST
  holds both steps byte for byte, the counts say 10 files, and only then
  is the archive deleted.
- A link whose target is not in the archive fails the copy: exit 1, the
  archive kept.
- A symbolic link member (not copied) keeps the archive too, warned
  about; OLMo's `latest` link member goes with the run, silently.
"""
import io
import os
import shutil
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (Checker, age_tree, contents, ckpt,  # noqa: E402
                    dest_tree, gen_runs, s3_session)
from process_s3 import rows  # noqa: E402

B = "ckpt-test"
LINKED = ("config.yaml", "model.pt", "train.pt")


def make_run(tmp):
    """The run as a directory (what DEST must hold) and as .tar/.tar.gz
    made by GNU tar, step4000's files hard links of step3000's."""
    gen = os.path.join(tmp, "gen")
    gen_runs(gen)
    src = os.path.join(tmp, "src")
    run = os.path.join(src, "2871005")
    shutil.copytree(os.path.join(gen, "2871005"), run)
    os.mkdir(os.path.join(run, "step4000-unsharded"))
    for n in LINKED:
        os.link(os.path.join(run, "step3000-unsharded", n),
                os.path.join(run, "step4000-unsharded", n))
    want = contents(run)
    arcs = os.path.join(tmp, "arcs")
    os.mkdir(arcs)
    for ext, flag in ((".tar", "cf"), (".tar.gz", "czf")):
        subprocess.run(["tar", flag, os.path.join(arcs, "2871005" + ext),
                        "-C", src, "2871005"], check=True)
    listing = subprocess.run(["tar", "tvf", os.path.join(arcs,
                                                         "2871005.tar")],
                             check=True, capture_output=True,
                             text=True).stdout
    assert listing.count(" link to ") == 3, listing
    age_tree(arcs)
    return want, arcs


def fresh(arcs, tmp, ext, name):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    p = os.path.join(d, "2871005" + ext)
    shutil.copy2(os.path.join(arcs, "2871005" + ext), p)
    age_tree(d)
    return p


def cases(arcs, tmp, verb, tag):
    """(what, archive, DEST) for each archive kind and each kind of DEST:
    a fresh copy of the archive and a DEST of its own, named after tag."""
    for ext in (".tar", ".tar.gz"):
        for dname in ("local", "s3"):
            arc = fresh(arcs, tmp, ext, "%s-%s-%s" % (tag, dname, ext))
            dest = (os.path.join(tmp, "d%s-%s-%s" % (tag, dname, ext))
                    if dname == "local" else
                    "s3://%s/%s%s" % (B, tag, ext.replace(".", "-")))
            yield "%s %s -> %s" % (verb, ext, dname), arc, dest


def upload(c, env, tmp, arcs, want):
    for what, arc, dest in cases(arcs, tmp, "upload", "up"):
        rc, out, err = ckpt("upload", "--extract", "--delete-source",
                            "--no-progress", arc, dest, env=env)
        c.eq("%s: exit" % what, rc, 0)
        c.eq("%s: no warning" % what, "warning" in err, False)
        c.eq("%s: counts" % what, "\tcopy=10\t" in out, True)
        c.eq("%s: DEST byte for byte" % what, dest_tree(env, dest), want)
        c.eq("%s: archive deleted" % what, os.path.exists(arc), False)


def process(c, env, tmp, arcs, want):
    for what, arc, dest in cases(arcs, tmp, "process", "pr"):
        rc, out, _ = ckpt("process", "--no-wandb", "--no-progress",
                          "--unshard", "none", arc, "--dest", dest,
                          env=env)
        r = rows(out)[0]
        c.eq("%s: exit, row" % what, (rc, r[0], r[1], r[3:5]),
             (0, "process", arc, ["10", str(sum(map(len,
                                                      want.values())))]))
        c.eq("%s: DEST byte for byte" % what,
             dest_tree(env, dest + "/2871005"), want)
        c.eq("%s: archive deleted" % what, os.path.exists(arc), False)


def link_tar(tmp, name, kind, links, target):
    """tmp/NAME/run.tar: run/a.bin (100 bytes), then each of links as a
    member of tarfile type kind (a hard or symbolic link) to target."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    arc = os.path.join(d, "run.tar")
    with tarfile.open(arc, "w") as t:
        data = b"x" * 100
        ti = tarfile.TarInfo("run/a.bin")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
        for n in links:
            ti = tarfile.TarInfo(n)
            ti.type = kind
            ti.linkname = target
            t.addfile(ti)
    return arc


def dangling(c, env, tmp):
    arc = link_tar(tmp, "dang", tarfile.LNKTYPE, ["run/b.bin"],
                   "run/gone.bin")
    rc, out, _ = ckpt("upload", "--extract", "--delete-source",
                      "--no-progress", arc, os.path.join(tmp, "ddang"),
                      env=env)
    c.eq("dangling: exit 1", rc, 1)
    c.eq("dangling: row", [r for r in out.splitlines() if "b.bin" in r],
         ["error\t%s/run/b.bin\t-\thard link to 'run/gone.bin', which "
          "is not a file in the archive; not copied" % arc])
    c.true("dangling: archive kept", os.path.isfile(arc))


def symlink_member(c, env, tmp):
    arc = link_tar(tmp, "sym", tarfile.SYMTYPE, ["run/b.bin", "run/latest"],
                   "a.bin")
    for dry in (["-n"], []):
        rc, out, err = ckpt("upload", *dry, "--extract", "--delete-source",
                            "--no-progress", arc, os.path.join(tmp, "dsym"),
                            env=env)
        warned = sorted(ln.split("warning: ", 1)[1] for ln in
                        err.splitlines() if "warning: " in ln)
        c.eq("symlink member %s: exit, warnings" % dry, (rc, warned),
             (0, ["%s/run/b.bin: link inside the archive; not copied" % arc,
                  "%s: not deleted: 1 member(s) in it are symbolic links "
                  "or special files, which are not copied" % arc]))
        c.true("symlink member %s: archive kept" % dry, os.path.isfile(arc))


def main():
    c = Checker()
    with s3_session("ckpt-hardlinks-") as (tmp, env):
        want, arcs = make_run(tmp)
        upload(c, env, tmp, arcs, want)
        process(c, env, tmp, arcs, want)
        dangling(c, env, tmp)
        symlink_member(c, env, tmp)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
