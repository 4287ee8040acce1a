#!/usr/bin/env python3
"""Write damaged and unusual tar archives of one run, for `ckpt clean`.

usage: make_damaged.py DIR

Every archive holds (or held) the run 'run/': config.yaml, wandb/ (six
5000-byte files), step100/model.pt (3000 bytes), in that order, GNU
format. Writes into DIR:
  good.tar        the intact archive
  hole.tar        4 KiB of zeros over the middle of wandb/ (a header and
                  part of its data); `tar -i` still lists step100/model.pt
  zhdr.tar        one 512-byte header in wandb/ zeroed
  garbled.tar     the same header overwritten with 0xff bytes
  hole-bad.tar    like hole.tar, but step100/model.pt is empty (a bad run)
  cat.tar         an archive without a checkpoint, then good.tar (cat a b)
  cat-bad.tar     two archives without a checkpoint, concatenated
  junk.tar        good.tar without its checkpoint, then 512 bytes of text
  cut.tar         cut at the member boundary before step100/ (no
                  end-of-archive blocks): the checkpoint is not there
  cut-ok.tar      cut right after step100/model.pt's data
  cut.tar.gz      cut.tar gzipped (a complete gzip stream)
  badcrc.tar.gz   the gzip of an archive without a checkpoint, CRC broken
  tail.tar.gz     a good gzip stream of a bad run, then 100 bytes of text
  hardlink.tar    step100/model.pt stored as a hard link to blob/w.bin
  dangling.tar    step100/model.pt a hard link to a member not present
  partial.tar     what a tar writer has written when it pauses after
                  wandb/ (no end-of-archive blocks yet)
Python's tarfile/gzip only.
"""
import gzip
import io
import os
import sys
import tarfile


def member(tf, name, data=None, kind=None, link=None):
    info = tarfile.TarInfo(name)
    info.mtime = 1700000000
    if kind is not None:
        info.type = kind
        info.linkname = link or ""
        tf.addfile(info)
        return
    if data is None:
        info.type = tarfile.DIRTYPE
        tf.addfile(info)
        return
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def torch_zip(size):
    """A zip of exactly size bytes laid out as torch.save's (one stored
    record under an archive prefix): `ckpt clean` checks model.pt's zip
    structure, not only that it is there."""
    import zipfile
    def build(n):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
            z.writestr("archive/data.pkl", b"m" * n)
        return buf.getvalue()
    over = len(build(0))
    data = build(size - over)
    assert len(data) == size
    return data


MODEL = torch_zip(3000)


def run_members(tf, model=MODEL, with_ckpt=True, upto_wandb=False):
    member(tf, "run/config.yaml", b"run_name: damaged\n")
    member(tf, "run/wandb")
    for i in range(6):
        member(tf, "run/wandb/f%d" % i, bytes([65 + i]) * 5000)
    if upto_wandb or not with_ckpt:
        return
    member(tf, "run/step100")
    member(tf, "run/step100/model.pt", model)


def archive(**kw):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        run_members(tf, **kw)
    return buf.getvalue()


def offsets(data):
    """name -> (header offset, data offset, size) of each member."""
    tf = tarfile.open(fileobj=io.BytesIO(data))
    return {m.name: (m.offset, m.offset_data, m.size) for m in tf}


def main(out):
    os.makedirs(out, exist_ok=True)

    def put(name, data):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)

    good = archive()
    put("good.tar", good)
    off = offsets(good)
    h = off["run/wandb/f1"][0]
    put("hole.tar", good[:h] + b"\0" * 4096 + good[h + 4096:])
    put("zhdr.tar", good[:h] + b"\0" * 512 + good[h + 512:])
    put("garbled.tar", good[:h] + b"\xff" * 512 + good[h + 512:])
    bad = archive(model=b"")
    put("hole-bad.tar", bad[:h] + b"\0" * 4096 + bad[h + 4096:])
    nockpt = archive(with_ckpt=False)
    put("cat.tar", nockpt + good)
    put("cat-bad.tar", nockpt + nockpt)
    put("junk.tar", nockpt + b"not padding\n" * 42 + b"12345678")
    cut = good[:off["run/step100"][0]]
    put("cut.tar", cut)
    m = off["run/step100/model.pt"]
    put("cut-ok.tar", good[:m[1] + (m[2] + 511) // 512 * 512])
    put("cut.tar.gz", gzip.compress(cut, mtime=0))
    z = bytearray(gzip.compress(nockpt, mtime=0))
    z[-8] ^= 0xFF  # the CRC32 in the gzip trailer
    put("badcrc.tar.gz", bytes(z))
    put("tail.tar.gz", gzip.compress(nockpt, mtime=0) + b"trailing text\n" * 7
        + b"xx")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        member(tf, "run/config.yaml", b"run_name: damaged\n")
        member(tf, "run/wandb")
        member(tf, "run/blob/w.bin", MODEL)
        member(tf, "run/step100/model.pt", kind=tarfile.LNKTYPE,
               link="run/blob/w.bin")
    put("hardlink.tar", buf.getvalue())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        member(tf, "run/config.yaml", b"run_name: damaged\n")
        member(tf, "run/wandb")
        member(tf, "run/step100/model.pt", kind=tarfile.LNKTYPE,
               link="run/blob/gone.bin")
    put("dangling.tar", buf.getvalue())
    part = archive(upto_wandb=True)
    put("partial.tar", part[:off["run/step100"][0]])


if __name__ == "__main__":
    main(sys.argv[1])
