#!/usr/bin/python3
# ctest-cost: 22
"""upload_extract.py - `ckpt upload --extract`: a .tar.gz and a .tar.zst
in object storage become an uncompressed tree under a remote prefix,
streamed (the archive is read once, nothing is written locally), with the
single top directory stepped into; a rerun sends nothing; --no-strip keeps
the top directory; a member outside the top directory is reported;
--delete-source removes the archive only after every member arrived."""
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from s3test import BUILD, Checker, S3Env, tool  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ckpt-test"
MIB = 1 << 20


def members(rng):
    m = {"config.yaml": b"run: 1\n", "step10/model.pt": rng.randbytes(
        20 * MIB + 3), "step10/empty": b"", "odd names/a b+c=d é.txt":
        b"odd\n"}
    for i in range(40):
        m["step10/shards/s%02d" % i] = rng.randbytes(rng.randrange(1, 9000))
    return m


def tar_bytes(files, top="run1", extra=()):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        if top:
            d = tarfile.TarInfo(top)
            d.type = tarfile.DIRTYPE
            tf.addfile(d)
        for name, data in list(files.items()) + list(extra):
            info = tarfile.TarInfo("%s/%s" % (top, name) if top else name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def ckpt(env, *args):
    r = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       timeout=600)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def last(out):
    s = json.loads(out.strip().splitlines()[-1])
    return s["copy"], s["skip"], s["error"]


def listing(env, prefix):
    _, out, _ = tool(env, "ls", "-r", "s3://%s/%s" % (B, prefix))
    return out.decode()


def want_listing(files, top=""):
    rows = sorted(("%s%s" % (top, n), len(d)) for n, d in files.items())
    return "".join("f\t%d\t%s\n" % (s, n) for n, s in rows)


def read_back(c, env, files, prefix, tmp):
    back = os.path.join(tmp, "back")
    shutil.rmtree(back, ignore_errors=True)
    rc, _, err = ckpt(env, "upload", "-q", "s3://%s/%s" % (B, prefix), back)
    ok = rc == 0
    for name, data in files.items():
        with open(os.path.join(back, name), "rb") as f:
            ok = ok and f.read() == data
    c.true("%s read back identical (%s)" % (prefix, err.strip()), ok)


def put(env, tmp, name, data):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    tool(env, "put", path, "s3://%s/arch/%s" % (B, name))
    return path


def extract_kind(c, s3, env, tmp, files, name, data, faults):
    put(env, tmp, name, data)
    src = "s3://%s/arch/%s" % (B, name)
    dest = "x-" + name.split(".", 1)[1].replace(".", "")
    s3.reset_stats()
    rc, out, err = ckpt(env, "upload", "--json", "--extract", src,
                        "s3://%s/%s" % (B, dest))
    st = s3.stats()
    c.eq("%s exit (%s)" % (name, err.strip()), rc, 0)
    c.eq("%s summary" % name, last(out), (len(files), 0, 0))
    c.eq("%s listing" % name, listing(env, dest), want_listing(files))
    if not faults:
        # Streamed once: the archive's bytes were fetched once, not twice,
        # and every member byte was sent once.
        c.true("%s read once: %d GET bytes for %d" % (
            name, st["get_bytes"], len(data)),
            len(data) <= st["get_bytes"] < len(data) + 65536)
        c.eq("%s sent every byte once" % name, st["put_bytes"],
             sum(len(d) for d in files.values()))
    read_back(c, env, files, dest, tmp)
    s3.reset_stats()
    rc, out, _ = ckpt(env, "upload", "--json", "--extract", src,
                      "s3://%s/%s" % (B, dest))
    c.eq("%s rerun skips all, sends nothing" % name,
         (rc, last(out), s3.stats()["put_bytes"]), (0, (0, len(files), 0),
                                                    0))


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-extract-")
    rng = random.Random(11)
    files = members(rng)
    raw = tar_bytes(files)
    gz = subprocess.run(["gzip", "-c"], input=raw, capture_output=True,
                        check=True).stdout
    zst = subprocess.run(["zstd", "-q", "-c"], input=raw,
                         capture_output=True, check=True).stdout
    try:
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            s3.configure(slowdown=0.3, reset=0.05, reset_writes=True)
            extract_kind(c, s3, env, tmp, files, "run1.tar.gz", gz, True)
            s3.configure(slowdown=0.0, reset=0.0, reset_writes=False)
            extract_kind(c, s3, env, tmp, files, "run1.tar.zst", zst, False)

            rc, _, _ = ckpt(env, "upload", "-q", "--extract", "--no-strip",
                            "s3://%s/arch/run1.tar.gz" % B,
                            "s3://%s/nostrip" % B)
            c.eq("--no-strip keeps run1/", (rc, listing(env, "nostrip")),
                 (0, want_listing(files, "run1/")))

            two = io.BytesIO()
            with tarfile.open(fileobj=two, mode="w") as tf:
                for n, d in (("run1/a.txt", b"a"), ("other.txt", b"o")):
                    info = tarfile.TarInfo(n)
                    info.size = len(d)
                    tf.addfile(info, io.BytesIO(d))
            put(env, tmp, "two.tar", two.getvalue())
            rc, out, _ = ckpt(env, "upload", "--extract",
                              "s3://%s/arch/two.tar" % B,
                              "s3://%s/two" % B)
            c.eq("member outside the top directory",
                 (rc, out.split("\ntotal\t")[0] + "\n"),
                 (1, "error\ts3://%s/arch/two.tar/other.txt\t-\toutside "
                  "'run1/', the archive's top directory that was stepped "
                  "into (use --no-strip)\n" % B))
            c.eq("the rest arrived", listing(env, "two"), "f\t1\ta.txt\n")

            put(env, tmp, "run2.tar.gz", gz)
            rc, out, _ = ckpt(env, "upload", "-q", "--extract",
                              "s3://%s/arch/run1.tar.gz" % B,
                              "s3://%s/arch/run2.tar.gz" % B,
                              "s3://%s/dd" % B)
            c.eq("several archives go to DEST/STEM/",
                 (rc, listing(env, "dd")), (0, want_listing(files, "run1/")
                                            + want_listing(files, "run2/")))

            # --delete-source: the archive goes once every member arrived.
            rc, out, _ = ckpt(env, "upload", "-v", "--delete-source",
                              "--extract", "s3://%s/arch/run1.tar.zst" % B,
                              "s3://%s/x-tarzst" % B)
            c.eq("delete-source row", (rc, out.splitlines()[-2]),
                 (0, "delete\ts3://%s/arch/run1.tar.zst\t-" % B))
            rc, _, _ = tool(env, "stat", "s3://%s/arch/run1.tar.zst" % B,
                            check=False)
            c.eq("archive deleted", rc, 1)
            c.eq("members still there", listing(env, "x-tarzst"),
                 want_listing(files))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
