#!/usr/bin/python3
# ctest-cost: 60
"""unshard_sink_s3.py - `ckpt unshard SRC s3://BUCKET/PREFIX`: outputs
written straight to object storage (s3rver behind the signing proxy),
no local copy.

- local -> s3 and s3 -> s3, torch and safetensors, for real torch 1.13
  DCP checkpoints (make_dcp.py: rows, an OLMo step with its
  model/optim/train split, one of ~40 MB: one PUT by default, a
  multipart upload under --memory 16M)
  and the committed torch 2.x fixtures: every output downloaded with
  aws-cli is byte-identical to a local unshard of the same SRC, torch
  outputs equal torch's own values (check_unshard.py), and no
  DEST-unfinished marker is left;
- injected 503s and connection resets (reads and writes) are survived;
- --memory 16M: the part buffers held never exceed it by more than one
  band's parts (buffers_peak), and peak RSS stays well below the output;
- run mode (RUN s3://…: stepN-unsharded/ under DEST) and a
  single-checkpoint archive (.tar, .tar.zst; local or in S3) to s3;
- OLMo torch_legacy and olmo_core steps, local -> s3, the same;
- (zarr and Orbax chunks that are not whole rows: unshard_sink_chunks.py);
- DEST refusals as for a local DEST (an output name that is a
  "directory", DEST an object), and a rerun over a killed run's leftovers
  (marker, stale object) finishes it.
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUP = os.path.join(HERE, "..", "support")
SRCDIR = os.path.join(HERE, "..", "..")
sys.path.insert(0, SUP)
from s3test import (BUILD, Checker, S3Env, digests, download,  # noqa: E402
                    sh, tool, unshard)
import harness  # noqa: E402
from harness import compare, generate  # noqa: E402

CKPT = os.environ.get("CKPT") or os.path.join(BUILD, "ckpt")
B = "ck"
MIB = 1 << 20

ckpt = unshard          # ckpt(env, ARGS...): `ckpt unshard ARGS`


def ckpt_rss(env, *args):
    """ckpt unshard with its peak RSS (KiB): (returncode, stdout, rss)."""
    p = subprocess.Popen([CKPT, "unshard", "--no-progress"] + list(args),
                         env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, out.decode(), ru.ru_maxrss


def sanitized():
    """A sanitizer build: its allocator quarantines freed memory, so RSS
    says nothing about ckpt's buffers there."""
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            return "CKPT_SANITIZE:BOOL=ON" in f.read()
    except OSError:
        return False


def objects(env, prefix):
    _, out, _ = tool(env, "ls", "-r", "s3://%s/%s" % (B, prefix),
                     check=False)
    return sorted(line.split("\t")[2] for line in out.decode().splitlines())


class Sink:
    def __init__(self, c, env, tmp):
        self.c, self.env, self.tmp = c, env, tmp
        self.n = 0

    def same(self, what, prefix, local, expected=None):
        """Outputs at s3 prefix equal the local outputs byte for byte."""
        got = download(self.env, B, prefix, os.path.join(self.tmp, "dl",
                                                      prefix))
        self.c.eq(what + ": bytes equal a local unshard", digests(got),
                  digests(local))
        self.c.eq(what + ": no marker left", objects(
            self.env, prefix + "-unfinished"), [])
        if expected:
            compare(what + ": torch values",
                    os.path.join(got, "checkpoint.pt"), expected)
        return got

    def case(self, name, src_local, src_remote, expected, opts=()):
        """src_remote None: local -> s3 only."""
        for fmt in ("torch", "safetensors"):
            loc = os.path.join(self.tmp, "loc", name + "-" + fmt)
            p = ckpt(self.env, "--format", fmt, *opts, src_local, loc)
            self.c.eq("%s %s: local exit" % (name, fmt),
                      (p.returncode, p.stderr), (0, ""))
            for how, src in (("local->s3", src_local),
                             ("s3->s3", src_remote)):
                if not src:
                    continue
                prefix = "out/%s/%s-%s" % (how[:2], name, fmt)
                p = ckpt(self.env, "--format", fmt, *opts, src,
                         "s3://%s/%s" % (B, prefix))
                what = "%s %s %s" % (how, name, fmt)
                self.c.eq(what + ": exit", (p.returncode, p.stderr),
                          (0, ""))
                self.c.true(what + ": row names DEST", p.stdout.startswith(
                    "unshard\t%s\ts3://%s/%s\t" % (src, B, prefix)))
                self.same(what, prefix, loc,
                          expected if fmt == "torch" else None)


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-unshard-sink-")
    try:
        fx = os.path.join(tmp, "fx")
        generate(*[["make_dcp.py", os.path.join(fx, case), "--case", case,
                    "--no-verify"] for case in ("rows", "olmo")],
                 ["make_dcp.py", os.path.join(fx, "big"), "--case", "big",
                  "--size-mb", "40", "--no-verify"],
                 ["make_olmo_legacy.py", os.path.join(fx, "legacy"),
                  "--ranks", "3", "--no-verify"],
                 ["make_olmo_core.py", os.path.join(fx, "core")])
        v2 = os.path.join(SRCDIR, "tests", "fixtures")
        cases = [("rows", os.path.join(fx, "rows"), "expected.pt"),
                 ("big", os.path.join(fx, "big"), "expected.pt")]
        for ver in ("dcp-v2.14", "dcp-v2.6"):
            # committed fixtures: a missing one fails its compare
            cases.append((ver + "-row", os.path.join(v2, ver, "row"),
                          "reference.pt"))
        with S3Env(buckets=[B]) as s3:
            env = s3.env()
            s = Sink(c, env, tmp)
            for name, d, _ in cases[:1] + cases[2:] + [
                    ("olmo", os.path.join(fx, "olmo"), None)]:
                sh("aws", "s3", "cp", "--quiet", "--recursive",
                   os.path.join(d, "ckpt"), "s3://%s/src/%s/" % (B, name),
                   env=env)
            # The big one local -> s3 only: reading a remote source of
            # 2,450 chunks is the source layer's business (and slow).
            for name, d, exp in cases:
                s.case(name, os.path.join(d, "ckpt"),
                       None if name == "big" else
                       "s3://%s/src/%s" % (B, name), os.path.join(d, exp))
            # The OLMo split: four objects; model.pt equals torch's.
            s.case("olmo", os.path.join(fx, "olmo", "ckpt"),
                   "s3://%s/src/olmo" % B, None)
            c.eq("olmo: outputs", objects(env, "out/s3/olmo-torch"),
                 ["config.yaml", "model.pt", "optim.pt", "train.pt"])
            compare("olmo: model.pt values", os.path.join(
                tmp, "dl", "out", "s3", "olmo-torch", "model.pt"),
                os.path.join(fx, "olmo", "expected_olmo", "model.pt"))
            c.eq("every request signed correctly", s3.stats()["sig_fail"],
                 0)

            # --verify reads the objects back.
            p = ckpt(env, "--verify", os.path.join(fx, "rows", "ckpt"),
                     "s3://%s/out/verify" % B)
            c.eq("verify: exit", (p.returncode, p.stderr), (0, ""))

            c.eq("every request signed correctly, --verify's too",
                 s3.stats()["sig_fail"], 0)

            # Faults on every request of the outputs: 503s and resets,
            # also of PUTs whose body was stored. --memory 16M: the output
            # does not fit, so parts of a multipart upload get them
            # (unshard_sink_put.py: faults on one PUT).
            s3.reset_stats()
            s3.configure(slowdown=0.2, reset=0.2, reset_writes=True,
                         fault_match="/out/faults")
            p = ckpt(env, "--retries", "12", "--memory", "16M",
                     os.path.join(fx, "big", "ckpt"),
                     "s3://%s/out/faults" % B)
            st = s3.stats()
            s3.configure(slowdown=0, reset=0, reset_writes=False,
                         fault_match="")
            # a transfer cut (a reset) is said at once (what the retry
            # waits on); nothing else is
            c.eq("faults: exit, only retries said",
                 (p.returncode, [ln for ln in p.stderr.splitlines()
                                 if ": retrying (" not in ln]), (0, []))
            c.true("faults: some injected", st["faults"]["slowdown"] > 0
                   and st["faults"]["reset"] > 0)
            c.true("faults: a multipart upload",
                   st["methods"].get("POST", 0) >= 2)
            s.same("faults", "out/faults",
                   os.path.join(tmp, "loc", "big-torch"))

            # Memory: --memory 16M with parts of 8 MiB on a 40 MB output,
            # against a local unshard of the same (no part buffers).
            _, _, rss_local = ckpt_rss(env, os.path.join(fx, "big", "ckpt"),
                                       os.path.join(tmp, "loc", "rss"))
            rc, out, rss = ckpt_rss(env, "--json", "--memory", "16M",
                                    os.path.join(fx, "big", "ckpt"),
                                    "s3://%s/out/mem" % B)
            c.eq("memory: exit", rc, 0)
            peak = json.loads(out)["buffers_peak"] if rc == 0 else -1
            c.true("memory: part buffers within --memory plus one band's "
                   "parts (%d)" % peak, 8 * MIB <= peak <= 32 * MIB)
            size = os.path.getsize(os.path.join(tmp, "loc", "big-torch",
                                                "checkpoint.pt"))
            c.true("memory: peak RSS %d KiB within a local unshard's (%d "
                   "KiB) plus 40 MiB, below that plus the %d-byte output" %
                   (rss, rss_local, size), sanitized() or (
                       rss - rss_local < 40 * 1024 and
                       (rss - rss_local) * 1024 < size))
            s.same("memory", "out/mem", os.path.join(tmp, "loc",
                                                     "big-torch"))

            # Run mode: each step's -unsharded under DEST.
            run = os.path.join(tmp, "run")
            shutil.copytree(os.path.join(fx, "rows", "ckpt"),
                            os.path.join(run, "step10"))
            shutil.copytree(os.path.join(fx, "olmo", "ckpt"),
                            os.path.join(run, "step20"))
            sh("aws", "s3", "cp", "--quiet", "--recursive", run,
               "s3://%s/runs/r1/" % B, env=env)
            p = ckpt(env, run, os.path.join(tmp, "loc", "run"))
            c.eq("run local: exit", (p.returncode, p.stderr), (0, ""))
            p = ckpt(env, "s3://%s/runs/r1" % B, "s3://%s/out/run" % B)
            c.eq("run: exit", (p.returncode, p.stderr), (0, ""))
            c.eq("run: rows", [ln.split("\t")[:2] for ln in
                               p.stdout.splitlines()],
                 [["unshard", "step10"], ["unshard", "step20"]])
            s.same("run", "out/run", os.path.join(tmp, "loc", "run"))
            p = ckpt(env, "s3://%s/runs/r1" % B, "s3://%s/out/run" % B)
            c.eq("run again: both skipped", [ln.split("\t")[:2] for ln in
                                             p.stdout.splitlines()],
                 [["skip", "step10"], ["skip", "step20"]])

            # An archive holding one checkpoint (under a name that is not
            # a step's): its outputs in DEST itself.
            tar = os.path.join(tmp, "one.tar")
            with tarfile.open(tar, "w") as t:
                t.add(os.path.join(fx, "rows", "ckpt"), "final")
            p = ckpt(env, tar, "s3://%s/out/tar" % B)
            c.eq("archive: exit", (p.returncode, p.stderr), (0, ""))
            c.eq("archive: outputs", objects(env, "out/tar"),
                 ["checkpoint.pt"])
            s.same("archive", "out/tar",
                   os.path.join(tmp, "loc", "rows-torch"))

            # The same archive in S3 (read in place), and as .tar.zst.
            zst = os.path.join(tmp, "one.tar.zst")
            sh("tar", "-I", "zstd", "-cf", zst, "-C",
               os.path.join(fx, "rows"), "--transform", "s,^ckpt,final,",
               "ckpt")
            for arch in (tar, zst):
                key = "arch/" + os.path.basename(arch)
                sh("aws", "s3", "cp", "--quiet", arch, "s3://%s/%s" % (B, key),
                   env=env)
                for where, src in (("local", arch),
                                   ("s3", "s3://%s/%s" % (B, key))):
                    what = "archive %s %s" % (where, os.path.basename(arch))
                    prefix = "out/arch-%s-%s" % (where, arch[-3:])
                    p = ckpt(env, src, "s3://%s/%s" % (B, prefix))
                    c.eq(what + ": exit", (p.returncode, p.stderr), (0, ""))
                    s.same(what, prefix, os.path.join(tmp, "loc",
                                                      "rows-torch"))

            # Other formats' planners write through the same sink.
            s.case("legacy", os.path.join(fx, "legacy", "ckpt"), None, None)
            s.case("olmo_core", os.path.join(fx, "core", "f32-2", "ckpt"),
                   None, None)

            # Refusals, as for a local DEST.
            tool(env, "put", "/dev/stdin",
                 "s3://%s/out/dir/checkpoint.pt/x" % B, input=b"x")
            p = ckpt(env, os.path.join(fx, "rows", "ckpt"),
                     "s3://%s/out/dir" % B)
            c.eq("name is a directory: exit 1 and why", (
                p.returncode, harness.error_of(p)), (
                1, "'s3://%s/out/dir/checkpoint.pt' is a directory: not "
                "replaced by an output file" % B))
            c.eq("name is a directory: nothing written",
                 objects(env, "out/dir"), ["checkpoint.pt/x"])
            tool(env, "put", "/dev/stdin", "s3://%s/out/obj" % B,
                 input=b"{}")
            p = ckpt(env, os.path.join(fx, "rows", "ckpt"),
                     "s3://%s/out/obj" % B)
            c.eq("DEST an object: exit 1", p.returncode, 1)
            c.true("DEST an object: why", "exists and is not a directory"
                   in harness.error_of(p))

            # A killed run's leftovers: marker, a stale output, another
            # file of DEST (kept, as a local DEST keeps its other files).
            for key, body in (("out/left-unfinished", b"x"),
                              ("out/left/checkpoint.pt", b"old"),
                              ("out/left/notes.txt", b"mine")):
                tool(env, "put", "/dev/stdin", "s3://%s/%s" % (B, key),
                     input=body)
            p = ckpt(env, os.path.join(fx, "rows", "ckpt"),
                     "s3://%s/out/left" % B)
            c.eq("rerun: exit", (p.returncode, p.stderr), (0, ""))
            c.eq("rerun: outputs and other files", objects(env, "out/left"),
                 ["checkpoint.pt", "notes.txt"])
            c.eq("rerun: marker gone", objects(env, "out/left-unfinished"),
                 [])
            got = download(env, B, "out/left", os.path.join(tmp, "dl-left"))
            c.eq("rerun: bytes", digests(got)["checkpoint.pt"], digests(
                os.path.join(tmp, "loc", "rows-torch"))["checkpoint.pt"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish() | harness.finish()


if __name__ == "__main__":
    sys.exit(main())
