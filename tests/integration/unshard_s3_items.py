#!/usr/bin/python3
# ctest-cost: 20
"""unshard_s3_items.py - `ckpt unshard s3://... DEST` of a DCP with many
small items reads each data file about once, in large ranged GETs, and
still checks every item.

The checkpoint: make_dcp.py --case big, 4 ranks, 8 MiB (302 keys, about
1,250 items of a few KiB each, ~9 MB), in s3rver behind the signing
proxy. Its output must be byte-for-byte the local unshard of the same
checkpoint, and the proxy's counters must show at most one GET per MiB
of data file (read-ahead blocks are at least 1 MiB), plus one per file
and 8 (metadata, listing): before, every item's zip head was probed
with a ranged GET of its own before the copy, about 1,260 GETs here.

Damaged copies of the checkpoint in the same bucket must still fail
(exit 1, one error naming the damage, nothing at DEST, no temporary
directory left), the item in the middle of a rank file:
  pickle   the first byte of an item's data.pkl flipped, its CRC-32
           rewritten to match (a consistent zip, a bad pickle);
  header   the local header signature of an item's tensor record;
  data     the first byte of an item's tensor record (its CRC-32 check).
The pickle damage also to an s3 DEST: exit 1 and no object under DEST
(its -unfinished marker stays beside it, as after any failed copy, until
a rerun completes it).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import BUILD, S3Env, sh  # noqa: E402
from harness import check, finish, generate  # noqa: E402
import zippatch  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "items"
MIB = 1 << 20
RANK = "__2_0.distcp"
NTH = 150           # an item in the middle of RANK


def unshard(env, src, dest):
    return subprocess.run([CKPT, "unshard", "-q", "--no-progress", "--no-sync",
                           src, dest], env=env, capture_output=True,
                          text=True, timeout=600)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def damage_header(path, nth):
    """The local header signature of the nth tensor record."""
    data = bytearray(read(path))
    recs = [r for r in zippatch.records(bytes(data))
            if re.search(r"/data/\d+$", r.name) and r.size]
    lh = bytes(data).rfind(b"PK\x03\x04", 0, recs[nth].data_off)
    data[lh + 3] = 0x05
    with open(path, "wb") as f:
        f.write(data)


DAMAGE = {
    "pickle": (lambda p: zippatch.patch(p, "data.pkl", True, NTH),
               r"tensor '[^']+' chunk \[.*\]: .*"),
    "header": (lambda p: damage_header(p, NTH),
               r"tensor '[^']+' chunk \[.*\]: .*"),
    "data": (lambda p: zippatch.patch(p, "/data/0", False, NTH),
             r".*" + re.escape(RANK) + r"'?: record '[^']+' fails its "
             r"CRC-32 check .*"),
}



def good(env, s3, tmp, ck):
    ref = os.path.join(tmp, "ref")
    sh(CKPT, "unshard", "-q", "--no-progress", "--no-sync", ck, ref)
    sizes = [os.path.getsize(os.path.join(ck, f)) for f in os.listdir(ck)]
    nitems = len([r for f in os.listdir(ck) if f.endswith(".distcp")
                  for r in zippatch.records(read(os.path.join(ck, f)))
                  if r.name.endswith("data.pkl")])
    bound = sum((s + MIB - 1) // MIB for s in sizes) + len(sizes) + 8
    out = os.path.join(tmp, "out")
    s3.reset_stats()
    p = unshard(env, "s3://%s/good" % B, out)
    og = s3.stats()["object_gets"]
    gets = og["ranged"] + og["whole"]
    print("good: %d items, %d bytes in %d files: %d GETs, %d bytes" %
          (nitems, sum(sizes), len(sizes), gets, og["bytes"]), flush=True)
    print("GETs, bytes per object: %s" % og.get("keys"), flush=True)
    check("good: exit 0", p.returncode == 0, p.stdout + p.stderr)
    check("good: output equals the local unshard",
          os.path.exists(os.path.join(out, "checkpoint.pt")) and
          read(os.path.join(out, "checkpoint.pt")) ==
          read(os.path.join(ref, "checkpoint.pt")))
    check("good: more items (%d) than the GET bound (%d)" % (nitems, bound),
          nitems > 2 * bound)
    check("good: %d GETs <= one per MiB of data file + files + 8 = %d" %
          (gets, bound), gets <= bound)
    check("good: every byte fetched about once (%d <= 1.25 x %d)" %
          (og["bytes"], sum(sizes)), og["bytes"] <= 1.25 * sum(sizes))


def damaged(env, tmp, name, want):
    out = os.path.join(tmp, "dest", "out-" + name)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    p = unshard(env, "s3://%s/%s" % (B, name), out)
    rows = p.stdout.splitlines()
    check("%s: exit 1" % name, p.returncode == 1,
          "%d %s" % (p.returncode, p.stderr))
    check("%s: one error row naming the damage, no message" % name,
          len(rows) == 1 and not p.stderr.strip() and re.fullmatch(
              r"error\t[^\t]*\t[^\t]*\t" + want, rows[0]) is not None,
          "%s\nwanted: %s" % (p.stdout + p.stderr, want))
    left = os.listdir(os.path.dirname(out))
    check("%s: nothing at DEST, no temporary left" % name, not left,
          str(left))


def damaged_to_s3(env, s3, name):
    dest = "s3://%s/out-%s" % (B, name)
    p = unshard(env, "s3://%s/%s" % (B, name), dest)
    check("%s -> s3: exit 1" % name, p.returncode == 1,
          "%d %s" % (p.returncode, p.stderr))
    ls = subprocess.run(["aws", "s3", "ls", "--recursive", "s3://%s/" % B],
                        env=env, capture_output=True, text=True)
    left = [ln for ln in ls.stdout.splitlines()
            if " out-%s/" % name in ln]
    check("%s -> s3: no object under DEST (%d keys listed)" %
          (name, len(ls.stdout.splitlines())),
          ls.returncode == 0 and ls.stdout and not left, "\n".join(left))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-s3-items-")
    try:
        generate(["make_dcp.py", os.path.join(tmp, "big"), "--case", "big",
                  "--ranks", "4", "--size-mb", "8", "--no-expected"])
        ck = os.path.join(tmp, "big", "ckpt")
        up = os.path.join(tmp, "up")
        shutil.copytree(ck, os.path.join(up, "good"))
        for name, (damage, _) in DAMAGE.items():
            shutil.copytree(ck, os.path.join(up, name))
            damage(os.path.join(up, name, RANK))
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            sh("aws", "s3", "cp", "--quiet", "--recursive", up,
               "s3://%s/" % B, env=env)
            good(env, s3, tmp, ck)
            for name, (_, want) in DAMAGE.items():
                damaged(env, tmp, name, want)
            damaged_to_s3(env, s3, "pickle")
            check("every request signed correctly",
                  s3.stats()["sig_fail"] == 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
