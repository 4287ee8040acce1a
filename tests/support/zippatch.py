"""zippatch.py - change bytes inside the stored records of torch.save zips
(also several zips one after another in a file, as DCP's .distcp files
hold them), for tests of checksums and of objects replaced mid-read.

    records(data) -> [Record]        every record of every zip in data
    patch(path, name_suffix, fix_crc, nth=0)
        flips the first byte of the nth record whose name ends with
        name_suffix; with fix_crc the local header and central directory
        CRC-32 are rewritten to match (a consistent, different file of the
        same size), else they are left (a corrupted record). Returns the
        record's full name.
"""
import struct
import zlib


class Record:
    def __init__(self, name, data_off, size, crc_offs):
        self.name = name          # full name, e.g. "archive/data/0"
        self.data_off = data_off  # absolute offset of the data in the file
        self.size = size
        self.crc_offs = crc_offs  # absolute offsets of its CRC fields


def _eocds(data):
    i = data.find(b"PK\x05\x06")
    while i >= 0:
        yield i
        i = data.find(b"PK\x05\x06", i + 1)


def records(data):
    out = []
    for e in _eocds(data):
        n, cd_size, cd_off = struct.unpack_from("<HII", data, e + 10)
        cd_abs = e - cd_size
        if e >= 76 and data[e - 20:e - 16] == b"PK\x06\x07":
            # ZIP64 (torch writes it always): the end record sits before
            # the locator, and both before the EOCD.
            rec = e - 20 - 56
            assert data[rec:rec + 4] == b"PK\x06\x06", "bad ZIP64 record"
            n, = struct.unpack_from("<Q", data, rec + 32)
            cd_size, cd_off = struct.unpack_from("<QQ", data, rec + 40)
            cd_abs = rec - cd_size
        base = cd_abs - cd_off
        p = cd_abs
        for _ in range(n):
            assert data[p:p + 4] == b"PK\x01\x02", "bad central directory"
            csize, usize = struct.unpack_from("<II", data, p + 20)
            nlen, xlen, clen = struct.unpack_from("<HHH", data, p + 28)
            lho, = struct.unpack_from("<I", data, p + 42)
            name = data[p + 46:p + 46 + nlen].decode()
            extra = data[p + 46 + nlen:p + 46 + nlen + xlen]
            if usize == 0xffffffff or lho == 0xffffffff:
                q = 0
                while q < len(extra):
                    tag, ln = struct.unpack_from("<HH", extra, q)
                    if tag == 1:
                        vals = list(struct.unpack_from(
                            "<%dQ" % (ln // 8), extra, q + 4))
                        if usize == 0xffffffff:
                            usize = vals.pop(0)
                        if csize == 0xffffffff:
                            csize = vals.pop(0)
                        if lho == 0xffffffff:
                            lho = vals.pop(0)
                    q += 4 + ln
            lh = base + lho
            assert data[lh:lh + 4] == b"PK\x03\x04", "bad local header"
            lnlen, lxlen = struct.unpack_from("<HH", data, lh + 26)
            doff = lh + 30 + lnlen + lxlen
            offs = [p + 16]
            if struct.unpack_from("<I", data, lh + 14)[0]:
                offs.append(lh + 14)
            if data[doff + usize:doff + usize + 4] == b"PK\x07\x08":
                offs.append(doff + usize + 4)   # data descriptor
            out.append(Record(name, doff, usize, offs))
            p += 46 + nlen + xlen + clen
    return out


def patch(path, name_suffix, fix_crc, nth=0):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    recs = [r for r in records(bytes(data)) if r.name.endswith(name_suffix)
            and r.size > 0]
    r = recs[nth]
    data[r.data_off] ^= 0xff
    if fix_crc:
        crc = zlib.crc32(bytes(data[r.data_off:r.data_off + r.size]))
        for o in r.crc_offs:
            struct.pack_into("<I", data, o, crc)
    with open(path, "wb") as f:
        f.write(data)
    return r.name
