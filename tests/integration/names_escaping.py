#!/usr/bin/env python3
# ctest-cost: 10
"""Names with TAB, newline, ESC, an invalid UTF-8 byte, a C1 control, a
backslash and valid non-ASCII UTF-8, through every command (ls, clean,
unshard, map-wandb, upload): exact stdout and stderr bytes in the escaped
form of docs/output.md (one row per line, fields split on TAB exactly, no
control byte on the terminal, no forged log line), and --json lines that
Python parses as strict UTF-8 JSON, with every valid UTF-8 name exact.

Env: CKPT (binary).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from torchzip import torch_zip  # noqa: E402
from tally import FAILS, check, finish  # noqa: E402

MODEL = torch_zip(b"x" * 10)   # a whole torch.save zip, 140 bytes

CKPT = os.path.abspath(os.environ.get("CKPT", "build/ckpt")).encode()

NAMES = [b"tab\tname", b"tab name", b"nl\nckpt: error: forged",
         b"esc\x1b[31mred", b"bad\xffbyte", b"c1\xc2\x9b2J",
         b"back\\slash", b"back\\x41", "caf\u00e9".encode()]


def esc(b):
    """The scheme of docs/output.md, written independently of the C."""
    out = bytearray()
    i = 0
    names = {0x5c: b"\\\\", 0x09: b"\\t", 0x0a: b"\\n", 0x0d: b"\\r"}
    while i < len(b):
        c = b[i]
        if c in names:
            out += names[c]
            i += 1
            continue
        if c < 0x80:
            if c < 0x20 or c == 0x7f:
                out += b"\\x%02x" % c
            else:
                out.append(c)
            i += 1
            continue
        n = 0
        for ln in (2, 3, 4):
            try:
                if len(b[i:i + ln].decode("utf-8")) == 1:
                    n = ln
                    break
            except UnicodeDecodeError:
                pass
        if n and not 0x80 <= ord(b[i:i + n].decode()) <= 0x9f:
            out += b[i:i + n]
            i += n
            continue
        for k in range(2 if n == 2 else 1):  # a C1 control: both bytes
            out += b"\\x%02x" % b[i + k]
        i += 2 if n == 2 else 1
    return bytes(out)


def json_name(b):
    """What --json shows: the name, or its escaped form when the name is
    not valid UTF-8."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return esc(b).decode()


def run(args, cwd):
    p = subprocess.run([CKPT] + args, capture_output=True, cwd=cwd,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def messages(err):
    """stderr lines without the timestamp."""
    return [re.sub(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", b"", l)
            for l in err.split(b"\n") if l]


def json_lines(what, out):
    """Each stdout line parsed as strict UTF-8 JSON."""
    objs = []
    for line in out.split(b"\n")[:-1]:
        try:
            objs.append(json.loads(line.decode("utf-8", errors="strict")))
        except (UnicodeDecodeError, ValueError) as e:
            FAILS.append(what)
            print("FAIL %s: not UTF-8 JSON: %r (%s)" % (what, line, e))
    check("%s: one object per line" % what, len(objs),
          out.count(b"\n"))
    return objs


def no_controls(what, data):
    """Nothing but TAB and LF below 0x20, no DEL, no C1, valid UTF-8."""
    bad = [c for c in data if (c < 0x20 and c not in (9, 10)) or c == 0x7f]
    try:
        text = data.decode("utf-8")
        c1 = [c for c in text if 0x80 <= ord(c) <= 0x9f]
    except UnicodeDecodeError:
        c1 = ["invalid UTF-8"]
    check("%s: no control bytes" % what, (bad, c1), ([], []))


def make(tmp):
    for n in NAMES:
        good = os.path.join(tmp, b"runs", n, b"step1000")
        os.makedirs(good)
        with open(os.path.join(good, b"model.pt"), "wb") as f:
            f.write(MODEL)
        os.makedirs(os.path.join(tmp, b"bad", n, b"step2000"))
        os.makedirs(os.path.join(tmp, b"src", n))
        with open(os.path.join(tmp, b"src", n, n), "wb") as f:
            f.write(b"y")


def test_ls(tmp):
    names = sorted(NAMES)
    rc, out, err = run([b"ls", b"runs"], tmp)
    want = b"".join(b"runs/%s\tstep1000\t1000\tunsharded\tcomplete\t140\t1\n"
                    % esc(n) for n in names)
    check("ls: rows", out, want)
    check("ls: fields split on TAB", [len(l.split(b"\t")) for l in
                                      out.split(b"\n")[:-1]],
          [7] * len(names))
    check("ls: exit", rc, 0)
    no_controls("ls", out + err)
    rc, out, err = run([b"ls", b"--json", b"runs"], tmp)
    objs = json_lines("ls --json", out)
    check("ls --json: names", [o["run"] for o in objs],
          ["runs/" + json_name(n) for n in names])
    # A missing name with a newline: one escaped error line, no forged one.
    forged = b"runs/gone\n2026-01-01T00:00:00Z ckpt: error: \x1b[2Jforged"
    rc, out, err = run([b"ls", forged], tmp)
    # (its error row: docs/output.md, each event once, on one stream)
    check("ls missing: the error row", out,
          b"%s\t-\t-\t-\terror: stat '%s': No such file or directory"
          b"\t-\t-\n" % (esc(forged), esc(forged)))
    check("ls missing: no message", err, b"")
    check("ls missing: exit", rc, 1)
    no_controls("ls missing", out + err)
    # Arguments echoed by usage errors are escaped too.
    rc, out, err = run([b"ls", b"--jobs", b"1\x1b[2J\n"], tmp)
    check("ls bad option: stderr", err.split(b"\n")[0],
          b"ckpt ls: error: --jobs needs a number, got '1\\x1b[2J\\n'")
    check("ls bad option: exit", rc, 2)
    rc, out, err = run([b"ls", b"--bogus\x1b"], tmp)
    check("ls unknown option: stderr", err.split(b"\n")[0],
          b"ckpt ls: error: unknown option '--bogus\\x1b'")
    no_controls("ls usage", out + err)
    rc, out, err = run([b"no\x1b[2Jcmd"], tmp)
    check("unknown command: stderr", err,
          b"ckpt: 'no\\x1b[2Jcmd' is not a ckpt command. See 'ckpt "
          b"--help'.\n")
    check("unknown command: exit", rc, 2)


def test_clean(tmp):
    names = sorted(NAMES)
    args = [b"clean", b"-n", b"--min-age", b"0"] + [b"bad/" + n for n in names] + \
        [b"runs/" + n for n in names]
    rc, out, err = run(args, tmp)
    want = b"".join(b"would-delete\tbad/%s\tno complete checkpoint with "
                    b"step > 0 (step2000: empty)\n" % esc(n) for n in names)
    want += b"".join(b"keep\truns/%s\tcomplete checkpoint step1000 "
                     b"(unsharded)\n" % esc(n) for n in names)
    check("clean -n: rows", out, want)
    check("clean -n: exit", rc, 0)
    no_controls("clean -n", out + err)
    rc, out, err = run([b"clean", b"-n", b"--json", b"--min-age", b"0"] +
                       [b"bad/" + n for n in names], tmp)
    objs = json_lines("clean --json", out)
    check("clean --json: runs", [o["run"] for o in objs],
          ["bad/" + json_name(n) for n in names])
    # For real: the bad runs go, and the rows name them escaped.
    rc, out, err = run([b"clean", b"--min-age", b"0"] + [b"bad/" + n for n in names], tmp)
    check("clean: rows", out, want.split(b"keep")[0].replace(
        b"would-delete", b"delete"))
    check("clean: deleted", sorted(os.listdir(os.path.join(tmp, b"bad"))),
          [])
    no_controls("clean", out + err)


def test_unshard(tmp):
    src = b"runs/" + NAMES[2] + b"/missing\tckpt"
    rc, out, err = run([b"unshard", src, b"out"], tmp)
    check("unshard missing: row", out,
          b"error\t%s\tout\topen '%s': No such file or directory\n"
          % (esc(src), esc(src)))
    check("unshard missing: exit", rc, 1)
    no_controls("unshard", out + err)
    rc, out, err = run([b"unshard", b"--step", b"1\x9b", src, b"out"], tmp)
    check("unshard bad step: stderr", err.split(b"\n")[0],
          b"ckpt unshard: error: --step needs a number, got '1\\x9b'")
    check("unshard bad step: exit", rc, 2)
    rc, out, err = run([b"unshard", b"--json", src, b"out"], tmp)
    objs = json_lines("unshard --json", out)
    check("unshard --json: src", [o["src"] for o in objs],
          [src.decode()])


def test_map_wandb(tmp):
    names = sorted(NAMES)
    args = [b"map-wandb", b"--offline"] + [b"runs/" + n for n in names]
    rc, out, err = run(args, tmp)
    check("map-wandb: rows", out, b"".join(
        b"%s\t-\tunknown: no W&B evidence (no wandb/ run directory, no "
        b"config.yaml)\n" % esc(n) for n in names))
    check("map-wandb: exit", rc, 1)
    no_controls("map-wandb", out + err)
    rc, out, err = run(args[:1] + [b"--json"] + args[1:], tmp)
    objs = json_lines("map-wandb --json", out)
    check("map-wandb --json: runs", [(o["id"], o["run"]) for o in objs],
          [(json_name(n), "runs/" + json_name(n)) for n in names])


def test_upload(tmp):
    rc, out, err = run([b"upload", b"-v", b"src", b"dest"], tmp)
    rows = sorted(r for r in out.split(b"\n")[:-1]
                  if not r.startswith(b"total\t"))
    check("upload -v: rows", rows, sorted(
        b"copy\tsrc/%s/%s\tdest/%s/%s" % (esc(n), esc(n), esc(n), esc(n))
        for n in NAMES))
    check("upload: exit", rc, 0)
    check("upload: the files arrived under their own names",
          sorted(os.listdir(os.path.join(tmp, b"dest"))), sorted(NAMES))
    no_controls("upload -v", out + err)
    rc, out, err = run([b"upload", b"-v", b"--json", b"src", b"dest2"], tmp)
    objs = json_lines("upload --json", out)
    check("upload --json: sources", sorted(o["src"] for o in objs
                                           if o.get("action") == "copy"),
          sorted("src/%s/%s" % (json_name(n), json_name(n)) for n in NAMES))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-names-").encode()
    try:
        make(tmp)
        test_ls(tmp)
        test_clean(tmp)
        test_unshard(tmp)
        test_map_wandb(tmp)
        test_upload(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
