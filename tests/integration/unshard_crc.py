#!/usr/bin/python3
# ctest-cost: 15
"""unshard_crc.py: the CRC-32 of torch zip records is checked as the bytes
stream through `ckpt unshard` (local sources too).

A byte flipped inside the tensor data of a real fixture, the file size
and zip structure unchanged, must fail the run (exit 1) with one error
naming the file and the record, and leave nothing at DEST; before, the
flipped byte went into the output with exit 0.

- a torch 1.13 DCP tensor item (make_dcp.py --case rows);
- the storage records of an OLMo torch_legacy rank file
  (make_olmo_legacy.py, 2 ranks);
- a DCP byte item whose pickle holds a tensor (make_dcp.py --case
  objects): its storage record is copied verbatim, and checked too.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import CKPT, check, error_of, finish, generate  # noqa: E402
import zippatch  # noqa: E402


def unshard(ck, out):
    return subprocess.run([CKPT, "unshard", "--no-progress", ck, out],
                          capture_output=True, text=True)


def flip(path, pattern):
    """Flip the first data byte of every record whose name matches."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    for r in zippatch.records(bytes(data)):
        if re.search(pattern, r.name) and r.size:
            data[r.data_off] ^= 0xff
    with open(path, "wb") as f:
        f.write(data)


def corrupted(tmp, name, fixture, files, pattern, want):
    ck = os.path.join(tmp, "bad-" + name)
    shutil.copytree(os.path.join(tmp, fixture, "ckpt"), ck)
    for f in files:
        flip(os.path.join(ck, f), pattern)
    out = os.path.join(tmp, "out-" + name)
    p = unshard(ck, out)
    err = [error_of(p)]
    check("%s: exit 1" % name, p.returncode == 1,
          "%d %s" % (p.returncode, p.stderr))
    check("%s: one error naming file and record" % name, len(err) == 1 and
          re.fullmatch(want % {"d": re.escape(ck)}, err[0]) is not None,
          "%s\nwanted: %s" % (err, want % {"d": ck}))
    check("%s: nothing at DEST" % name, not os.path.exists(out) and
          not [x for x in os.listdir(tmp) if x.startswith(".ckpt-")],
          str(os.listdir(tmp)))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-crc-")
    try:
        generate(["make_dcp.py", os.path.join(tmp, "rows"), "--case", "rows",
                  "--no-verify"],
                 ["make_dcp.py", os.path.join(tmp, "objects"), "--case",
                  "objects", "--no-verify"],
                 ["make_olmo_legacy.py", os.path.join(tmp, "leg"), "--ranks",
                  "2", "--no-verify"])
        p = unshard(os.path.join(tmp, "rows", "ckpt"),
                    os.path.join(tmp, "good"))
        check("intact fixture: exit 0", p.returncode == 0, p.stderr)
        crc = r" fails its CRC-32 check \(stored [0-9a-f]{8}, read " \
              r"[0-9a-f]{8}\): the file is corrupted"
        corrupted(tmp, "dcp-tensor", "rows", ["__0_0.distcp"], r"/data/0$",
                  r"'%(d)s/__0_0\.distcp': record "
                  r"'archive/data/0'" + crc)
        corrupted(tmp, "legacy-rank", "leg", ["rank1.pt"], r"/data/\d+$",
                  r"'%(d)s/rank1\.pt': record '[^']+/data/\d+'"
                  + crc)
        # __0_0.distcp: the byte item 'with_tensors' is the only zip with
        # a second storage (data/1).
        corrupted(tmp, "dcp-byte-item", "objects", ["__0_0.distcp"],
                  r"/data/1$", r"'%(d)s/__0_0\.distcp': record "
                  r"'archive/data/1'" + crc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
