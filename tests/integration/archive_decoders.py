#!/usr/bin/env python3
# ctest-cost: 40
"""Compressed run archives made by the real tools (issue 22): bzip2,
lbzip2, pbzip2 (several streams), gzip, pigz, a multi-member gzip, xz -T
(several blocks), zstd -T and a multi-frame zstd. For each, `ckpt ls
ARCHIVE` gives the rows `ckpt ls` gives for what `tar x` extracts from
it, and `upload --extract ARCHIVE DEST` leaves DEST holding exactly the
files `tar x` makes. A truncated archive, one with a corrupt bzip2 block
and one with a bad gzip CRC are an error naming the archive (never a
short listing judged good); trailing garbage is reported. The same
archives read from s3 give the same rows and bytes.

Before our decoders, a multi-member gzip (pigz --independent writes
such, as does `cat a.gz b.gz`) was judged damaged: libarchive's gzip
filter checked only the last member's trailer against all the data
('gzip checksum mismatch').
"""
import os
import random
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (Checker, S3Env, contents, ckpt, file_rows,  # noqa: E402
                    gen_runs, noise, old_ctime, scratch, tool)

B = "ckpt-test"
RUN = "2871005"


def have(t):
    return shutil.which(t) is not None


def make_run(tmp):
    gen = os.path.join(tmp, "gen")
    gen_runs(gen)
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    shutil.copytree(os.path.join(gen, RUN), os.path.join(src, RUN))
    # 3 MB of compressible noise: many bzip2 blocks at -1, several xz
    # blocks, several zstd frames.
    noise(os.path.join(src, RUN, "blob.bin"), 30, 70000, 5)
    tar = os.path.join(tmp, "run.tar")
    subprocess.run(["tar", "cf", tar, "-C", src, RUN], check=True)
    return tar


def sh(cmd, tmp):
    subprocess.run(cmd, shell=True, check=True, cwd=tmp)


# name -> shell command making it from run.tar (in tmp)
VARIANTS = [
    ("bzip2.tar.bz2", "bzip2 -1 -c run.tar > {o}", None),
    ("lbzip2.tar.bz2", "lbzip2 -n 3 -1 -c run.tar > {o}", "lbzip2"),
    ("pbzip2.tar.bz2", "pbzip2 -p3 -b1 -1 -c run.tar > {o}", "pbzip2"),
    ("cat.tar.bz2", "head -c 700000 run.tar | bzip2 -2 > {o} && "
     "tail -c +700001 run.tar | bzip2 -1 >> {o}", None),
    ("gzip.tar.gz", "gzip -c run.tar > {o}", None),
    ("pigz.tar.gz", "pigz -p 3 -c run.tar > {o}", "pigz"),
    ("multi.tar.gz", "head -c 1000000 run.tar | gzip > {o} && "
     "tail -c +1000001 run.tar | gzip -1 >> {o}", None),
    ("xz.tar.xz", "xz -T2 -1 --block-size=400000 -c run.tar > {o}", None),
    ("zstd.tar.zst", "zstd -q -T0 -c run.tar > {o}", None),
    ("frames.tar.zst", "head -c 1000000 run.tar | zstd -q > {o} && "
     "tail -c +1000001 run.tar | zstd -q -5 >> {o}", None),
]


def rows(out, first):
    """ls rows with the first column (the archive or directory) made
    `first`."""
    res = []
    for ln in out.splitlines():
        cols = ln.split("\t")
        res.append([first] + cols[1:])
    return res


def extracted(tmp, arc, name):
    d = os.path.join(tmp, "x-" + name)
    os.makedirs(d)
    subprocess.run(["tar", "xf", arc, "-C", d], check=True)
    return os.path.join(d, RUN)


def good(c, tmp, made):
    for name, arc in made:
        ref = extracted(tmp, arc, name)
        rc, out, err = ckpt("ls", ref)
        want = (0, rows(out, "RUN"))
        rc, out, err = ckpt("ls", arc)
        c.eq("%s: ls rows as of tar x" % name, (rc, rows(out, "RUN")), want)
        dest = os.path.join(tmp, "d-" + name)
        rc, out, err = ckpt("upload", "--extract", "--no-progress", arc,
                            dest)
        c.eq("%s: upload --extract exit" % name, (rc, file_rows(out)),
             (0, []))
        c.eq("%s: DEST holds what tar x makes" % name, contents(dest),
             contents(ref))


def damage(tmp):
    """Damaged copies of the bzip2, gzip and zstd archives."""
    def put(name, data):
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
        return name
    bz = open(os.path.join(tmp, "bzip2.tar.bz2"), "rb").read()
    gz = open(os.path.join(tmp, "gzip.tar.gz"), "rb").read()
    zs = open(os.path.join(tmp, "zstd.tar.zst"), "rb").read()
    badblock = bytearray(bz)
    badblock[len(bz) // 2] ^= 0xFF
    return [
        (put("cut.tar.bz2", bz[:len(bz) // 2]),
         "cut.tar.bz2: truncated bzip2 input"),
        (put("badblock.tar.bz2", bytes(badblock)),
         "badblock.tar.bz2: bzip2 data is corrupt (CRC mismatch or corrupt "
         "data, block at byte "),
        (put("cut.tar.gz", gz[:len(gz) // 2]),
         "cut.tar.gz: truncated gzip input"),
        (put("cut.tar.zst", zs[:len(zs) // 2]),
         "cut.tar.zst: truncated zstd input"),
    ]


def damaged(c, tmp):
    os.chdir(tmp)
    for name, msg in damage(tmp):
        rc, out, err = ckpt("ls", name)
        # its row, the error in the verdict's column; nothing on stderr
        row = out.split("\t")
        verdict = row[4] if len(row) > 4 else ""
        c.eq("%s: ls fails naming it" % name,
             (rc, row[:4], verdict.startswith("error: ") and msg in verdict,
              err), (1, [name, "-", "-", "-"], True, ""))
        rc, out, err = ckpt("upload", "--extract", "--no-progress", name,
                            os.path.join(tmp, "dd-" + name))
        c.eq("%s: upload --extract fails naming it" % name,
             (rc, "error\t%s\t-\t%s" % (name, msg) in out), (1, True))
    # Trailing garbage after the streams of a run without a checkpoint:
    # reported, never deleted.
    sh("tar cf nockpt.tar -C src {0}/config.yaml {0}/wandb".format(RUN), tmp)
    # A multi-member gzip / several bzip2 streams of a run without a
    # checkpoint read to their proper end: deletable. (Before, the gzip
    # was 'damaged': one trailer checked against all members.)
    for z, ext in (("gzip", "gz"), ("bzip2", "bz2")):
        m = "multi-nockpt.tar." + ext
        sh("head -c 3000 nockpt.tar | %s > %s && tail -c +3001 nockpt.tar "
           "| %s >> %s" % (z, m, z, m), tmp)
        rc, out, err = ckpt("clean", "-n", "--min-age", "0", "--no-progress",
                            m)
        c.eq("%s: read to its end, judged" % m, (rc, out),
             (0, "would-delete\t%s\tno checkpoint\n" % m))
    for z, ext in (("bzip2", "bz2"), ("gzip", "gz"), ("xz", "xz"),
                   ("zstd -q", "zst")):
        t = "tail.tar." + ext
        sh("%s -c nockpt.tar > %s && printf 'trailing garbage' >> %s"
           % (z, t, t), tmp)
        rc, out, err = ckpt("clean", "--min-age", "0", "--no-progress", t)
        why = ("xz data is corrupt" if ext == "xz" else
               "16 bytes after the end of the compressed stream")
        c.eq("%s: clean reports the garbage, keeps the file" % t,
             (rc, out, os.path.exists(t)),
             (1, "error\t%s\t%s: %s\n" % (t, t, why),
              True))


def not_proper(c, tmp, env):
    """An archive not read to its proper end (a gzip trailer's CRC that
    does not match, bytes after the stream) is never deleted:
    `upload --extract --delete-source` fails it, `process` fails the run,
    the archive stays. Before, both deleted it."""
    os.chdir(tmp)
    gz = open("gzip.tar.gz", "rb").read()
    bad = bytearray(gz)
    bad[-8] ^= 0xFF
    cases = [("badcrc", bytes(bad), "gzip checksum mismatch (CRC-32 or "
              "length in the trailer does not match the data)"),
             ("tail", gz + b"junk", "4 bytes after the end of the "
              "compressed stream")]
    for name, data, why in cases:
        d = os.path.join(tmp, "np-" + name)
        os.makedirs(d)
        a = os.path.join(d, RUN + ".tar.gz")
        with open(a, "wb") as f:
            f.write(data)
        os.utime(a, (1e9, 1e9))
        rc, out, err = ckpt("upload", "-n", "--extract", "--delete-source",
                            "--no-progress", a, os.path.join(d, "up"))
        c.eq("%s: upload -n predicts it" % name,
             (rc, "error\t%s\t-\t%s\n" % (a, why) in out,
              "would-delete" in out), (1, True, False))
        rc, out, err = ckpt("upload", "--extract", "--delete-source",
                            "--no-progress", a, os.path.join(d, "up"))
        c.eq("%s: upload --extract --delete-source fails, keeps it" % name,
             (rc, "error\t%s\t-\t%s\n" % (a, why) in out,
              os.path.exists(a)), (1, True, True))
        rc, out, err = ckpt("process", "--no-wandb", "--min-age", "0",
                            "--no-progress", a, "--dest",
                            os.path.join(d, "pr"), env=env)
        c.eq("%s: process fails the run, keeps it" % name,
             (out.splitlines()[0].split("\t")[:2], os.path.exists(a)),
             (["error", a], True))


def remote(c, tmp, made, env):
    for name, arc in made:
        tool(env, "put", arc, "s3://%s/arc/%s" % (B, name))
    for name, arc in made:
        rc, out, err = ckpt("ls", arc)
        want = (0, rows(out, "RUN"))
        rc, out, err = ckpt("ls", "s3://%s/arc/%s" % (B, name), env=env)
        c.eq("s3 %s: ls rows as local" % name, (rc, rows(out, "RUN")), want)
    name, arc = made[1]
    dest = os.path.join(tmp, "s3d")
    rc, out, err = ckpt("upload", "--extract", "--no-progress",
                        "s3://%s/arc/%s" % (B, name), dest, env=env)
    c.eq("s3 %s: upload --extract" % name, (rc, contents(dest)),
         (0, contents(extracted(tmp, arc, "s3"))))


def readahead(c, tmp, s3, env):
    """A remote compressed archive is read in 4 MiB ranged GETs fetched
    ahead of the decoder (If-Match its ETag): every byte once, no more.
    Before, one 8 MiB GET at a time, in turn."""
    d = os.path.join(tmp, "ra")
    os.makedirs(os.path.join(d, RUN))
    for n in ("config.yaml", "wandb"):
        sh("cp -r src/%s/%s ra/%s/" % (RUN, n, RUN), tmp)
    with open(os.path.join(d, RUN, "noise.bin"), "wb") as f:
        f.write(random.Random(5).randbytes(10 << 20))
    for z, ext in (("gzip -1", "gz"), ("lbzip2 -n 2" if have("lbzip2")
                                        else "bzip2", "bz2")):
        arc = os.path.join(tmp, "ra.tar." + ext)
        sh("tar cf - -C ra %s | %s > %s" % (RUN, z, arc), tmp)
        size = os.path.getsize(arc)
        key = "ra/ra.tar." + ext
        tool(env, "put", arc, "s3://%s/%s" % (B, key))
        rc, want, _ = ckpt("ls", arc)
        s3.reset_stats()
        rc, out, err = ckpt("ls", "s3://%s/%s" % (B, key), env=env)
        og = s3.stats()["object_gets"]
        blocks = (size + (4 << 20) - 1) >> 22
        c.eq("s3 ra.tar.%s: rows" % ext, (rc, rows(out, "R"), err),
             (0, rows(want, "R"), ""))
        c.eq("s3 ra.tar.%s: 4 MiB GETs, each byte once (+ the 8-byte sniff)"
             % ext, (og["ranged"], og["bytes"], og["max_body"]),
             (blocks + 1, size + 8, 4 << 20))
        c.eq("s3 ra.tar.%s: read at its ETag" % ext,
             s3.stats()["emulated"]["if_match"] >= blocks, True)


def main():
    c = Checker()
    os.environ.update(old_ctime())
    with scratch("ckpt-decoders-") as tmp, S3Env() as s3:
        env = s3.env()
        env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
        tar = make_run(tmp)
        made = []
        for name, cmd, need in VARIANTS:
            # (scripts/install-deps.sh --test installs every tool: one
            # missing fails, never leaves its archive out)
            if need and not have(need):
                c.true("%s installed, for %s" % (need, name), False)
                continue
            sh(cmd.format(o=name), tmp)
            made.append((name, os.path.join(tmp, name)))
        c.true("several bzip2 streams from pbzip2",
               have("pbzip2") and open(os.path.join(tmp, "pbzip2.tar.bz2"),
                                          "rb").read().count(b"BZh1") > 1)
        good(c, tmp, made)
        damaged(c, tmp)
        not_proper(c, tmp, env)
        remote(c, tmp, made, env)
        readahead(c, tmp, s3, env)
        del tar
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
