#!/usr/bin/python3
# ctest-cost: 40
"""process_dest_proof.py - `ckpt process` deletes a source only on proof
found at DEST, and DEST is never overwritten by a run that did not write
it (issue 20, classes 4, 10, 11, 14), to a local DEST and to s3rver
behind the signing proxy; `process -n` predicts every row exactly:

  * 4: an `-unsharded` output already at DEST that this run did not
    write (here: its config.yaml changed) is unsharded again and
    compared: it differs, so the run fails with a conflict, the sharded
    step stays at the source and DEST is unchanged; so does a stub that
    holds only some of the output's files, each with the right bytes. The same output
    with the right bytes (a killed worker's) is adopted and licenses
    --drop-sharded.
    A "new" state recording outputs made from another source of the same
    run id fails the run (those outputs license nothing here).
  * 10: a state object whose "dest" was edited (`../escaped`, another
    run's directory, DEST's own `.ckpt-process`) fails the run; the
    source is kept and nothing is written outside the run's place.
  * 11: two runs mapped to one W&B path: the second, whose config.yaml
    differs, fails with a conflict naming the file, its source kept, the
    first's files at DEST unchanged; a requeue whose files are identical
    (plus new ones) converges and is deleted.
  * 14: after a delete that failed (an LD_PRELOAD shim refuses one
    unlink), the rerun's row and state count what DEST holds of the run,
    not the one file that pass deleted.
  * a map file's W&B path with a hidden component (`.ckpt-process/x/y`)
    is refused.

Before: the stub was adopted and step1000 deleted; the edited state sent
the copy to DEST/../escaped or into run 1005's directory and deleted the
source; the second run overwrote the first's config.yaml and both sources
were deleted; the rerun's row said 1 file; the hidden path was accepted
and the run landed in DEST/.ckpt-process/x/y."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from s3test import (BUILD, CKPT, Checker, S3Env, age_tree,  # noqa: E402
                    contents, digests, gen_runs, remote_contents, tool)

B = "ckpt-test"
SHIM = os.path.join(BUILD, "libunlink_fail_preload.so")
BASE = ["--min-age", "0", "--runs", "1"]


def run(env, *args):
    p = subprocess.run([CKPT] + list(args), env=env, capture_output=True,
                       text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def rows(out):
    """Run rows; processed rows without their seconds."""
    res = []
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "total":
            continue
        res.append(f[:-1] if f[0] == "process" else f)
    return res


class Dest:
    """DEST as a location, and what it holds below a run's place."""

    def __init__(self, env, tmp, name, s3):
        self.env, self.s3 = env, s3
        self.loc = ("s3://%s/%s" % (B, name) if s3
                    else os.path.join(tmp, name))
        self.name = name

    def at(self, rel):
        return self.loc + "/" + rel

    def tree(self, rel):
        if self.s3:
            return remote_contents(self.env, B, self.name + "/" + rel)
        return contents(os.path.join(self.loc, rel))

    def put(self, rel, data, tmp):
        if self.s3:
            f = os.path.join(tmp, "put.bin")
            with open(f, "wb") as fh:
                fh.write(data)
            tool(self.env, "put", f, self.at(rel))
        else:
            p = os.path.join(self.loc, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as fh:
                fh.write(data)

    def state(self, rid):
        return json.loads(self.tree(".ckpt-process")[rid + ".json"])

    def set_state(self, rid, st, tmp):
        self.put(".ckpt-process/%s.json" % rid, json.dumps(st).encode(),
                 tmp)


def copy_run(g, root, name, sharded_only=False):
    src = os.path.join(root, name)
    shutil.copytree(os.path.join(g, "2871001"), src, symlinks=True)
    if sharded_only:
        shutil.rmtree(os.path.join(src, "step1000-unsharded"))
    age_tree(root)
    return src


def same_length_change(b):
    """Other bytes, same length: the last letter changed."""
    i = max(k for k in range(len(b)) if chr(b[k]).isalpha())
    return b[:i] + (b"x" if b[i:i + 1] != b"x" else b"y") + b[i + 1:]


def both(c, what, env, args, want_rc):
    """`process -n ARGS` then `process ARGS`: the same rows (-n's status
    `processed` too, its row exact), the same exit code. Returns the real
    run's rows."""
    rc_n, out_n, err_n = run(env, "process", "-n", *args)
    rc, out, err = run(env, "process", *args)
    c.eq("%s: exit (%s)" % (what, err.strip()[-300:]), rc, want_rc)
    c.eq("%s: -n exit (%s)" % (what, err_n.strip()[-300:]), rc_n, want_rc)
    c.eq("%s: -n predicts the row" % what,
         [["process"] + r[1:6] if r[0] == "would-process" else r
          for r in rows(out_n)],
         [r[:6] if r[0] == "process" else r for r in rows(out)])
    return rows(out)


def class4(c, env, tmp, g, d):
    tag = "4 %s" % ("s3" if d.s3 else "local")
    root = os.path.join(tmp, "r4-" + d.name)
    src = copy_run(g, root, "4001", sharded_only=True)
    ref = os.path.join(tmp, "ref4-" + d.name)
    rc, _, err = run(env, "unshard", "--no-progress", "-q",
                     os.path.join(src, "step1000"), ref)
    c.eq("%s: local unshard (%s)" % (tag, err.strip()), rc, 0)
    outs = contents(ref)
    stub = dict(outs)
    stub["config.yaml"] = same_length_change(outs["config.yaml"])
    for n, b in stub.items():
        d.put("4001/step1000-unsharded/" + n, b, tmp)
    before = digests(src)
    args = BASE + ["--no-wandb", "--drop-sharded", src, "--dest", d.loc]
    got = both(c, tag + " stub", env, args, 1)
    c.eq("%s stub: row" % tag, [r[:2] for r in got], [["error", src]])
    why = got[0][2] if got and len(got[0]) > 2 else ""
    c.true("%s stub: a conflict naming config.yaml (%s)" % (tag, why),
           why.startswith("unshard: conflict: " +
                          d.at("4001/step1000-unsharded")) and
           d.at("4001/step1000-unsharded/config.yaml: MD5 ") in why)
    c.eq("%s stub: source untouched (step1000 kept)" % tag, digests(src),
         before)
    c.eq("%s stub: DEST unchanged" % tag, d.tree("4001"),
         {"step1000-unsharded/" + n: b for n, b in stub.items()})
    # The right bytes (a worker killed before its state write): adopted.
    d.put("4001/step1000-unsharded/config.yaml", outs["config.yaml"], tmp)
    got = both(c, tag + " adopt", env, args, 0)
    c.eq("%s adopt: processed" % tag, [r[:2] for r in got],
         [["process", src]])
    at = d.tree("4001")
    c.eq("%s adopt: step1000 dropped, its output at DEST" % tag,
         sorted(k for k in at if k.startswith("step1000")),
         sorted("step1000-unsharded/" + n for n in outs))
    c.eq("%s adopt: row counts DEST" % tag, got[0][3:5] if got else None,
         [str(len(at)), str(sum(len(v) for v in at.values()))])
    c.eq("%s adopt: state records the outputs" % tag,
         sorted((e["path"], e["size"], e["sum"])
                for e in d.state("4001").get("unsharded", [])),
         sorted(("step1000-unsharded/" + n, len(b),
                 hashlib.md5(b).hexdigest()) for n, b in outs.items()))
    c.eq("%s adopt: source gone" % tag, os.path.exists(src), False)


def class4_partial(c, env, tmp, g, d):
    """A stub holding only some of the files the step unshards to (each
    of them with the right bytes): not the run's output either."""
    tag = "4 partial %s" % ("s3" if d.s3 else "local")
    root = os.path.join(tmp, "r4p-" + d.name)
    src = copy_run(g, root, "4101", sharded_only=True)
    ref = os.path.join(tmp, "ref4p-" + d.name)
    rc, _, err = run(env, "unshard", "--no-progress", "-q",
                     os.path.join(src, "step1000"), ref)
    c.eq("%s: local unshard (%s)" % (tag, err.strip()), rc, 0)
    outs = contents(ref)
    stub = {n: b for n, b in outs.items() if n != "config.yaml"}
    c.eq("%s: the stub leaves one file out" % tag, len(stub) + 1, len(outs))
    for n, b in stub.items():
        d.put("4101/step1000-unsharded/" + n, b, tmp)
    before = digests(src)
    args = BASE + ["--no-wandb", "--drop-sharded", src, "--dest", d.loc]
    got = both(c, tag, env, args, 1)
    c.eq("%s: row" % tag, [r[:2] for r in got], [["error", src]])
    why = got[0][2] if got and len(got[0]) > 2 else ""
    c.eq("%s: a conflict, k of the n files there" % tag, why,
         "unshard: conflict: %s at DEST was not written by this run and "
         "is not what it unshards to (%d of the %d files the step "
         "unshards to are there); not replaced, source kept"
         % (d.at("4101/step1000-unsharded"), len(stub), len(outs)))
    c.eq("%s: source untouched (step1000 kept)" % tag, digests(src),
         before)
    c.eq("%s: DEST unchanged" % tag, d.tree("4101"),
         {"step1000-unsharded/" + n: b for n, b in stub.items()})


def class4_same_id(c, env, tmp, g, d):
    """A "new" state (a killed worker's) recording outputs made from
    another source with the same run id: those outputs are not this
    run's and license no --drop-sharded here."""
    tag = "4 same id %s" % ("s3" if d.s3 else "local")
    ra = copy_run(g, os.path.join(tmp, "r4a-" + d.name), "4201",
                  sharded_only=True)
    rb = copy_run(g, os.path.join(tmp, "r4b-" + d.name), "4201",
                  sharded_only=True)
    ref = os.path.join(tmp, "ref4b-" + d.name)
    rc, _, err = run(env, "unshard", "--no-progress", "-q",
                     os.path.join(ra, "step1000"), ref)
    c.eq("%s: local unshard (%s)" % (tag, err.strip()), rc, 0)
    outs = contents(ref)
    for n, b in outs.items():
        d.put("4201/step1000-unsharded/" + n, b, tmp)
    d.set_state("4201", {
        "run": "4201", "phase": "new", "dest": "4201", "src": ra,
        "files": 0, "bytes": 0, "steps": 1, "freed": 0,
        "unsharded": [{"path": "step1000-unsharded/" + n, "size": len(b),
                       "sum": hashlib.md5(b).hexdigest()}
                      for n, b in sorted(outs.items())]}, tmp)
    before = digests(rb)
    args = BASE + ["--no-wandb", "--drop-sharded", rb, "--dest", d.loc]
    got = both(c, tag, env, args, 1)
    c.eq("%s: row" % tag, got, [[
        "error", rb, "lease: run id '4201' at DEST has unshard outputs "
        "made from %s (%s); this is another run with the same id: left "
        "untouched" % (ra, d.at(".ckpt-process/4201.json"))]])
    c.eq("%s: source untouched (step1000 kept)" % tag, digests(rb), before)


def class10(c, env, tmp, g, d):
    tag = "10 %s" % ("s3" if d.s3 else "local")
    root = os.path.join(tmp, "r10-" + d.name)
    src = copy_run(g, root, "1001")
    other = copy_run(g, root, "1005")
    with open(os.path.join(other, "config.yaml"), "ab") as f:
        f.write(b"# run 1005\n")
    age_tree(root)
    args = BASE + ["--no-wandb", "--unshard", "none"]
    rc, _, err = run(env, "process", *args, other, "--dest", d.loc)
    c.eq("%s: run 1005 processed (%s)" % (tag, err.strip()), rc, 0)
    rc, _, err = run(env, "process", *args, "--keep-source", src,
                     "--dest", d.loc)
    c.eq("%s: run 1001 copied, source kept (%s)" % (tag, err.strip()), rc, 0)
    good = d.state("1001")
    dest_1005 = d.tree("1005")
    dest_1001 = d.tree("1001")
    before = digests(src)
    state_at = d.at(".ckpt-process/1001.json")
    for edit, why in (
            ("../escaped", "judge: %s: not a ckpt process state object "
             "(remove it to start the run over)" % state_at),
            (".ckpt-process", "judge: %s: not a ckpt process state object "
             "(remove it to start the run over)" % state_at),
            ("1005", "map: the state at DEST (%s) says run '1001' went to "
             "'1005', but it maps to '1001': left untouched" % state_at)):
        st = dict(good, dest=edit)
        d.set_state("1001", st, tmp)
        got = both(c, "%s %s" % (tag, edit), env,
                   args + [src, "--dest", d.loc], 1)
        c.eq("%s %s: row" % (tag, edit), got, [["error", src, why]])
        c.eq("%s %s: source kept" % (tag, edit), digests(src), before)
        c.eq("%s %s: run 1005 at DEST unchanged" % (tag, edit),
             d.tree("1005"), dest_1005)
        c.eq("%s %s: run 1001 at DEST unchanged" % (tag, edit),
             d.tree("1001"), dest_1001)
        if d.s3:
            _, ls, _ = tool(env, "ls", "-r", "s3://%s/" % B)
            c.eq("%s %s: nothing outside DEST" % (tag, edit),
                 [ln for ln in ls.decode().splitlines()
                  if "escaped" in ln or ".ckpt-process/.ckpt" in ln], [])
        else:
            c.eq("%s %s: nothing outside DEST" % (tag, edit),
                 os.path.exists(os.path.join(tmp, "escaped")), False)
            c.eq("%s %s: nothing in the state dir but states" % (tag, edit),
                 sorted(os.listdir(os.path.join(d.loc, ".ckpt-process"))),
                 ["1001.json", "1005.json"])
    # The state put back: verified and deleted.
    d.set_state("1001", good, tmp)
    got = both(c, tag + " restored", env, args + [src, "--dest", d.loc], 0)
    c.eq("%s restored: processed" % tag, [r[:2] for r in got],
         [["process", src]])
    c.eq("%s restored: source gone" % tag, os.path.exists(src), False)


def class11(c, env, tmp, g, d):
    tag = "11 %s" % ("s3" if d.s3 else "local")
    root = os.path.join(tmp, "r11-" + d.name)
    first = copy_run(g, root, "1101")
    second = copy_run(g, root, "1102")
    requeue = copy_run(g, root, "1103")
    cfg = os.path.join(second, "config.yaml")
    with open(cfg, "rb") as f:
        data = f.read()
    with open(cfg, "wb") as f:
        # local: same size (compared by checksum); s3: another size
        f.write(same_length_change(data) if not d.s3
                else data + b"# run 1102\n")
    with open(os.path.join(requeue, "train_data", "rank1.npy"), "wb") as f:
        f.write(b"requeued " * 100)
    age_tree(root)
    m = os.path.join(tmp, "map11-%s.tsv" % d.name)
    with open(m, "w") as f:
        for r in ("1101", "1102", "1103"):
            f.write("%s\tent/proj/abc\tslurm\n" % r)
    args = BASE + ["--wandb-map", m, "--unshard", "none"]
    rc, _, err = run(env, "process", *args, first, "--dest", d.loc)
    c.eq("%s: first run processed (%s)" % (tag, err.strip()), rc, 0)
    at_first = d.tree("ent/proj/abc")
    before = digests(second)
    got = both(c, tag + " second", env, args + [second, "--dest", d.loc], 1)
    how = ("with different bytes" if not d.s3 else
           "with %d bytes, the source has %d" % (len(data), len(data) + 11))
    c.eq("%s second: conflict naming config.yaml" % tag, got,
         [["error", second, "upload: %s: conflict: %s already exists at "
           "DEST %s; not replaced (DEST keeps its copy: it may be the only "
           "one)"
           % (cfg, d.at("ent/proj/abc/config.yaml"), how)]])
    c.eq("%s second: source kept" % tag, digests(second), before)
    c.eq("%s second: first run's files at DEST unchanged" % tag,
         d.tree("ent/proj/abc"), at_first)
    # The same as an archive: its members are compared as they are read
    # (-n reads the small ones to say so too).
    arch = os.path.join(root, "1104.tar")
    with tarfile.open(arch, "w") as t:
        t.add(second, arcname="1104")
    age_tree(root)
    with open(m, "a") as f:
        f.write("1104\tent/proj/abc\tslurm\n")
    got = both(c, tag + " archive", env, args + [arch, "--dest", d.loc], 1)
    c.eq("%s archive: conflict naming config.yaml" % tag, got,
         [["error", arch, "upload: %s/1104/config.yaml: conflict: %s "
           "already exists at DEST %s; not replaced (DEST keeps its copy: it "
           "may be the only one)" % (arch, d.at("ent/proj/abc/config.yaml"),
                                     how)]])
    c.true("%s archive: kept" % tag, os.path.exists(arch))
    c.eq("%s archive: first run's files at DEST unchanged" % tag,
         d.tree("ent/proj/abc"), at_first)
    # A requeue: the same files (skipped) and a new one (uploaded).
    got = both(c, tag + " requeue", env, args + [requeue, "--dest", d.loc],
               0)
    at = d.tree("ent/proj/abc")
    c.eq("%s requeue: row" % tag, got, [[
        "process", requeue, d.at("ent/proj/abc"), str(len(at)),
        str(sum(len(v) for v in at.values())), "0",
        got[0][6] if got and len(got[0]) > 6 else "?"]])
    want = dict(at_first)
    want["train_data/rank1.npy"] = b"requeued " * 100
    c.eq("%s requeue: DEST is the union" % tag, at, want)
    c.eq("%s requeue: source gone" % tag, os.path.exists(requeue), False)


def class14(c, env, tmp, g, d):
    tag = "14 %s" % ("s3" if d.s3 else "local")
    root = os.path.join(tmp, "r14-" + d.name)
    src = copy_run(g, root, "1401")
    args = BASE + ["--no-wandb", "--unshard", "none", src, "--dest", d.loc]
    # ASan wants its runtime first; the shim only wraps unlink().
    e = dict(env, LD_PRELOAD=SHIM, CKPT_TEST_UNLINK_FAIL="rank0.npy",
             ASAN_OPTIONS=(env.get("ASAN_OPTIONS", "") +
                           ":verify_asan_link_order=0").lstrip(":"))
    rc, out, err = run(e, "process", *args)
    c.eq("%s: delete fails (%s)" % (tag, err.strip()[-300:]), rc, 1)
    c.true("%s: row says delete (%s)" % (tag, out.strip()),
           rows(out) and rows(out)[0][2].startswith("delete: "))
    c.eq("%s: one file left at the source" % tag,
         sorted(os.path.relpath(os.path.join(dp, n), src)
                for dp, _, fs in os.walk(src) for n in fs),
         ["latest", "train_data/rank0.npy"])
    c.eq("%s: state uploaded" % tag, d.state("1401")["phase"], "uploaded")
    at = d.tree("1401")
    n, size = str(len(at)), str(sum(len(v) for v in at.values()))
    got = both(c, tag + " rerun", env, args, 0)
    c.eq("%s rerun: row counts DEST" % tag, [r[:6] for r in got],
         [["process", src, d.at("1401"), n, size, "0"]])
    st = d.state("1401")
    c.eq("%s rerun: state counts DEST" % tag,
         (st["phase"], str(st["files"]), str(st["bytes"])),
         ("done", n, size))
    c.eq("%s rerun: source gone" % tag, os.path.exists(src), False)


def hidden_path(c, env, tmp, g):
    root = os.path.join(tmp, "rdot")
    src = copy_run(g, root, "1501")
    dest = os.path.join(tmp, "dest-dot")
    m = os.path.join(tmp, "mapdot.tsv")
    with open(m, "w") as f:
        f.write("1501\t.ckpt-process/x/y\tslurm\n")
    before = digests(src)
    for dry in ([], ["-n"]):
        rc, out, err = run(env, "process", *dry, *BASE, "--wandb-map", m,
                           "--unshard", "none", src, "--dest", dest)
        c.eq("dot %s: exit" % dry, rc, 1)
        c.true("dot %s: error (%s)" % (dry, err.strip()),
               err.strip().endswith("ckpt: error: %s:1: bad W&B path "
                                    "'.ckpt-process/x/y'" % m))
        c.eq("dot %s: nothing written" % dry, os.path.exists(dest), False)
    c.eq("dot: source kept", digests(src), before)


def main():
    c = Checker()
    tmp = tempfile.mkdtemp(prefix="ckpt-dest-proof-")
    try:
        g = os.path.join(tmp, "g")
        gen_runs(g)
        with S3Env() as s3:
            env = s3.env()
            env["CKPT_STATE_DIR"] = os.path.join(tmp, "state")
            hidden_path(c, env, tmp, g)
            for s3dest in (False, True):
                sfx = "s3" if s3dest else "local"
                class4(c, env, tmp, g, Dest(env, tmp, "dest4-" + sfx, s3dest))
                class4_partial(c, env, tmp, g,
                               Dest(env, tmp, "dest4p-" + sfx, s3dest))
                class4_same_id(c, env, tmp, g,
                               Dest(env, tmp, "dest4s-" + sfx, s3dest))
                class10(c, env, tmp, g,
                        Dest(env, tmp, "dest10-" + sfx, s3dest))
                class11(c, env, tmp, g,
                        Dest(env, tmp, "dest11-" + sfx, s3dest))
                class14(c, env, tmp, g,
                        Dest(env, tmp, "dest14-" + sfx, s3dest))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
