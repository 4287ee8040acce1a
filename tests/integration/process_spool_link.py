#!/usr/bin/python3
# ctest-cost: 12
"""process_spool_link.py - the members of a spooled archive go to a local
DEST as the spool's own files (issue 22): hashed while they were spooled,
hard-linked into place, never read or written again.

The run: 2871001 of the sample (step1000 unsharded), tarred and zstd'ed.
An LD_PRELOAD shim (tests/support/link_preload.c) logs every link() and,
on request, flips the first byte of the first file linked right before
the link is made. `process --no-wandb --min-age 0` (the archive deleted
at the end), umask 022:
  * --tmp-dir on DEST's file system: every file member linked from the
    spool (and nothing else); DEST byte for byte what processing the
    extracted directory gives, every file mode 0644 as a copy's; the
    archive deleted, no spool and no temporary left;
  * DEST a set-group-ID directory of another group (root only; otherwise
    a `SKIP:` line): linked, and every file at DEST has the directory's
    group, as a copy would;
  * --tmp-dir on another file system (a tmpfs the test mounts; without
    mount(2), /dev/shm where it is one; else a `SKIP:` line): no link,
    the same DEST;
  * a spooled member changed as it is linked: the run fails in upload
    naming the change, the archive is kept, no temporary left at DEST;
    the rerun converges to the same DEST.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import BUILD, CKPT, Checker, snapshot  # noqa: E402
from onepass import (archive, dest, in_top, make_run,  # noqa: E402
                     masked, preload_env, processed_dir)

SHIM = os.path.join(BUILD, "liblink_preload.so")
ARGS = ["--no-wandb", "--min-age", "0", "--no-progress", "--runs", "1"]
NOGROUP = 65534


def run(top, arc, tmpdir="tmp", change=False):
    """process a copy of arc in top/ with the link logger: (rc, rows,
    stderr, links as (old, new, rc) with paths relative to top)."""
    name, log = in_top(top, arc, "links")
    env = preload_env(SHIM, CKPT_TEST_LINKS_OUT=log)
    if change:
        env["CKPT_TEST_LINK_CHANGE"] = tmpdir + "/"
    r = subprocess.run([CKPT, "process"] + ARGS +
                       ["--tmp-dir", tmpdir, name, "--dest", "dest"],
                       cwd=top, env=env, capture_output=True, text=True,
                       timeout=300, preexec_fn=lambda: os.umask(0o022))
    links = []
    if os.path.exists(log):
        with open(log) as f:
            for line in f:
                old, new, rc = line.rstrip("\n").split("\t")
                links.append((os.path.relpath(os.path.join(top, old), top),
                              os.path.relpath(os.path.join(top, new), top),
                              int(rc)))
    return (r.returncode, [masked(x) for x in r.stdout.splitlines()],
            r.stderr, links)


def spool_links(links):
    """The links made from the spool (the lease is made by a link too)."""
    return [x for x in links if x[0].startswith("tmp/")]


def members_linked(links):
    """The run's paths of the spool files linked (made), sorted."""
    out = []
    for old, _, rc in spool_links(links):
        parts = old.split("/")
        # tmp/.ckpt-…/t/2871001/REL (a name stored twice: …/m/N)
        if rc == 0 and len(parts) > 4 and parts[2] == "t":
            out.append("/".join(parts[4:]))
    return sorted(out)


def dest_files(top):
    """(path, mode, gid) of every file at top/dest but the state's."""
    out = []
    root = os.path.join(top, "dest")
    for d, _, fs in os.walk(root):
        for n in fs:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if not rel.startswith(".ckpt-process/"):
                st = os.lstat(p)
                out.append((rel, st.st_mode & 0o7777, st.st_gid))
    return sorted(out)


def no_state(d):
    return {k: v for k, v in d.items() if not k.startswith(".ckpt-process/")}


def temps(top):
    """Temporaries (.ckpt-*.tmp) left at top/dest or in top/tmp."""
    out = []
    for sub in ("dest", "tmp"):
        for d, ds, fs in os.walk(os.path.join(top, sub)):
            out += [os.path.relpath(os.path.join(d, n), top)
                    for n in ds + fs
                    if n.startswith(".ckpt-") and n.endswith(".tmp")]
    return sorted(out)


def other_fs(tmp):
    """(directory, None, undo) on another file system than tmp: a tmpfs
    mounted for the test (root), else a directory in /dev/shm where that
    is another file system; (None, why, None) where neither can be had."""
    mnt = os.path.join(tmp, "otherfs")
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "none", mnt],
                       capture_output=True, text=True)
    if r.returncode == 0:
        return mnt, None, lambda: subprocess.run(["umount", "-l", mnt])
    if (os.path.isdir("/dev/shm") and
            os.stat("/dev/shm").st_dev != os.stat(tmp).st_dev):
        shm = tempfile.mkdtemp(prefix="ckpt-link-", dir="/dev/shm")
        return shm, None, lambda: shutil.rmtree(shm, ignore_errors=True)
    return None, ("mount -t tmpfs refused: %s; /dev/shm is not another "
                  "file system" % r.stderr.strip()), None


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="process-spool-link-")
    try:
        src = make_run(tmp)
        want = no_state(processed_dir(c, src, tmp, ARGS))
        arc = archive(src, tmp, ".tar.zst", ["zstd", "-q", "-c"])
        members = sorted(snapshot(os.path.join(src, "2871001")))

        top = os.path.join(tmp, "same")
        got = run(top, arc)
        c.eq("same fs: exit 0 (%s)" % got[2][-300:], got[0], 0)
        c.eq("same fs: every file member linked from the spool",
             members_linked(got[3]), members)
        c.eq("same fs: nothing else linked, every link below dest",
             (len(spool_links(got[3])),
              all(n.startswith("dest/") for _, n, _ in got[3])),
             (len(members), True))
        c.eq("same fs: DEST as from the extracted directory",
             no_state(dest(top)), want)
        c.eq("same fs: modes as a copy's (0644)",
             {m for _, m, _ in dest_files(top)}, {0o644})
        c.eq("same fs: archive deleted, no spool or temporary left",
             (os.path.exists(os.path.join(top, "2871001.tar.zst")),
              os.listdir(os.path.join(top, "tmp")), temps(top)),
             (False, [], []))

        if os.geteuid() != 0:
            print("SKIP: process_spool_link set-group-ID DEST of another "
                  "group (not root: cannot give a directory another "
                  "group)", flush=True)
        else:
            top = os.path.join(tmp, "sgid")
            os.makedirs(os.path.join(top, "dest"))
            os.chown(os.path.join(top, "dest"), -1, NOGROUP)
            os.chmod(os.path.join(top, "dest"), 0o2775)
            got = run(top, arc)
            c.eq("set-group-ID DEST: exit 0, linked (%s)" % got[2][-300:],
                 (got[0], members_linked(got[3])), (0, members))
            c.eq("set-group-ID DEST: every file has its group",
                 {g for _, _, g in dest_files(top)}, {NOGROUP})
            c.eq("set-group-ID DEST: DEST as from the directory",
                 no_state(dest(top)), want)

        shm, why, undo = other_fs(tmp)
        if shm is None:
            print("SKIP: process_spool_link --tmp-dir on another file "
                  "system (%s)" % why, flush=True)
        else:
            try:
                top = os.path.join(tmp, "other")
                got = run(top, arc, tmpdir=shm)
                c.eq("other fs: exit 0, nothing linked (%s)"
                     % got[2][-300:],
                     (got[0], [x for x in got[3] if x[0].startswith(shm)]),
                     (0, []))
                c.eq("other fs: DEST as from the directory",
                     no_state(dest(top)), want)
                c.eq("other fs: no spool left", os.listdir(shm), [])
            finally:
                undo()

        top = os.path.join(tmp, "change")
        got = run(top, arc, change=True)
        row = got[1][0].split("\t") if got[1] else []
        c.eq("changed as linked: exit 1, failed, archive kept",
             (got[0], row[:2],
              os.path.exists(os.path.join(top, "2871001.tar.zst"))),
             (1, ["error", "2871001.tar.zst"], True))
        c.true("changed as linked: the row names the change (%s)" % row,
               len(row) > 2 and row[2].startswith("upload: ") and
               "changed while it was linked (modification time differs)"
               in row[2])
        c.eq("changed as linked: no temporary left", temps(top), [])
        got = run(top, arc)
        c.eq("changed as linked, rerun: exit 0, DEST as from the directory "
             "(%s)" % got[2][-300:], (got[0], no_state(dest(top))),
             (0, want))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
