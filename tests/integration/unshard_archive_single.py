#!/usr/bin/python3
# ctest-cost: 30
"""unshard_archive_single.py: an archive that holds ONE checkpoint under a
name that is not a checkpoint name (`tar czf ck.tar.gz final/`, or the
checkpoint's files at the archive's top), or under a checkpoint name
(`tar cf s.tar step100/`: it went to DEST/step100-unsharded/, as if the
archive were a run), behaves exactly like the
directory it contains: `ckpt unshard` writes the same bytes into DEST,
`ckpt ls` lists the one checkpoint, and `ckpt clean --force` keeps it
(it used to answer "no checkpoint": `error` for unshard, `delete` for a
forced clean).

Every archive kind ckpt reads (.tar, .tar.gz, .tar.zst, .tar.bz2,
.tar.xz, .zip), each with a top directory and without one, for a real
torch 1.13 DCP checkpoint (make_dcp.py), an OLMo legacy step (2 ranks),
a zarr v2 checkpoint (Debian's python3-zarr) and an Orbax OCDBT step
(make_orbax.py; `ls -l` lists its arrays as for the step in its run).
"""
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import CKPT, PY, SUP, check, compare, finish, generate  # noqa
from s3test import contents  # noqa: E402

KINDS = {
    ".tar": None, ".tar.gz": ["gzip", "-n"], ".tar.zst": ["zstd", "-q"],
    ".tar.bz2": ["bzip2"], ".tar.xz": ["xz"], ".zip": "zip",
}


def ckpt(*args):
    return subprocess.run([CKPT] + list(args), capture_output=True,
                          text=True)


files_of = contents     # {relative path: bytes}


def make_archive(src, path, top):
    """src's files into path, below top/ (or at the top when top is "")."""
    kind = next(k for k in sorted(KINDS, key=len, reverse=True)
                if path.endswith(k))
    names = sorted(os.path.relpath(os.path.join(r, n), src)
                   for r, _, ns in os.walk(src) for n in ns)
    if kind == ".zip":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
            for n in names:
                z.write(os.path.join(src, n), os.path.join(top, n))
        return
    plain = path if kind == ".tar" else path[:-len(kind)] + ".tmp.tar"
    with tarfile.open(plain, "w", format=tarfile.GNU_FORMAT) as t:
        if top:
            t.add(src, arcname=top, recursive=False)
        for n in names:
            t.add(os.path.join(src, n), arcname=os.path.join(top, n))
    if kind != ".tar":
        with open(path, "wb") as f:
            subprocess.run(KINDS[kind] + ["-c", plain], stdout=f, check=True)
        os.unlink(plain)


def one_format(tmp, name, src, fmt):
    ref = os.path.join(tmp, name + "-ref")
    r = ckpt("unshard", "--no-progress", src, ref)
    check("%s: the directory unshards" % name, r.returncode == 0, r.stderr)
    want = files_of(ref)
    for kind in sorted(KINDS):
        for top in ("final", "", "step100"):
            tag = "%s %s %s" % (name, kind, top + "/" if top else "no top")
            arc = os.path.join(tmp, "%s-%s%s" % (name, top or "flat", kind))
            make_archive(src, arc, top)
            out = os.path.join(tmp, "out")
            shutil.rmtree(out, ignore_errors=True)
            r = ckpt("unshard", "--no-progress", arc, out)
            ck = top or os.path.basename(arc)[:-len(kind)]
            check("%s: unshard exit 0, one row" % tag, r.returncode == 0 and
                  r.stdout.startswith("unshard\t%s\t%s: " % (ck, out)),
                  r.stdout + r.stderr)
            check("%s: the directory's bytes" % tag, os.path.isdir(out) and
                  files_of(out) == want, str(sorted(files_of(out))
                                              if os.path.isdir(out) else
                                              "no DEST"))
            r = ckpt("ls", arc)
            size = sum(os.path.getsize(os.path.join(a, f))
                       for a, _, fs in os.walk(src) for f in fs)
            nfiles = sum(len(fs) for _, _, fs in os.walk(src))
            check("%s: ls row" % tag, (r.returncode, r.stdout) == (
                0, "%s\t%s\t%s\t%s\tcomplete\t%d\t%d\n" % (
                    arc, ck, "100" if top == "step100" else "-", fmt, size,
                    nfiles)), r.stdout + r.stderr)
            r = ckpt("clean", "--force", "--min-age", "0", arc)
            check("%s: clean --force keeps it" % tag,
                  (r.returncode, r.stdout) == (0, "keep\t%s\tcomplete "
                  "checkpoint %s (%s)\n" % (arc, ck, fmt))
                  and os.path.exists(arc), r.stdout + r.stderr)
            os.unlink(arc)
    return ref


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-arc-single-")
    try:
        generate(["make_dcp.py", os.path.join(tmp, "rows"), "--case", "rows",
                  "--no-verify"],
                 ["make_olmo_legacy.py", os.path.join(tmp, "leg"), "--ranks",
                  "2", "--no-verify"])
        subprocess.run([PY, os.path.join(SUP, "make_zarr.py"),
                        os.path.join(tmp, "zarr")], check=True,
                       stdout=subprocess.DEVNULL)
        ref = one_format(tmp, "dcp", os.path.join(tmp, "rows", "ckpt"),
                         "dcp")
        compare("dcp: reference output bit-exact",
                os.path.join(ref, "checkpoint.pt"),
                os.path.join(tmp, "rows", "expected.pt"))
        one_format(tmp, "legacy", os.path.join(tmp, "leg", "ckpt"),
                   "olmo-legacy")
        ref = one_format(tmp, "zarr", os.path.join(tmp, "zarr", "ckpt"),
                         "zarr")
        compare("zarr: reference output bit-exact",
                os.path.join(ref, "checkpoint.pt"),
                os.path.join(tmp, "zarr", "expected.pt"))
        subprocess.run([PY, os.path.join(SUP, "make_orbax.py"),
                        os.path.join(tmp, "orbax")], check=True,
                       stdout=subprocess.DEVNULL)
        step = os.path.join(tmp, "orbax", "run", "1")
        one_format(tmp, "orbax", step, "orbax")
        arrays = [ln.split("\t", 3)[3] for ln in
                  ckpt("ls", "-l", os.path.join(tmp, "orbax", "run"))
                  .stdout.splitlines() if "\tarray\t" in ln and
                  ln.split("\t")[1] == "1"]
        root = [ln.split("\t", 3)[3] for ln in ckpt("ls", "-l", step)
                .stdout.splitlines() if "\tarray\t" in ln]
        check("orbax root checkpoint: ls -l lists its arrays",
              len(arrays) > 3 and root == arrays, str(root))
        # A plain directory that is one checkpoint: forced clean judges it.
        r = ckpt("clean", "-n", "--force", "--min-age", "0",
                 os.path.join(tmp, "rows", "ckpt"))
        check("checkpoint directory: clean --force keeps it", r.stdout ==
              "keep\t%s\tcomplete checkpoint ckpt (dcp)\n" %
              os.path.join(tmp, "rows", "ckpt"), r.stdout + r.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
