#!/usr/bin/python3
# ctest-cost: 10
"""unshard_run.py: `ckpt unshard RUN DEST` over whole runs (SPEC `unshard`).

One run holds: step5 (DCP) with an existing step5-unsharded, step10 (OLMo
torch_new: model_and_optim/ + train/rank*.pt + its own config.yaml),
step15 (OLMo torch_legacy rank*.pt, 3 ranks), step20 (plain DCP, no config.yaml: the run's is copied), step30 (aborted:
no .metadata), step40 (Orbax whose legacy msgpack 'checkpoint' holds no
arrays: an error naming it, exit 1, the others still proceed), 0000000050 (zarr, seqax naming) and 0000000060
(zarr without write_completed: skipped), step70 (nothing recognisable:
unsupported). The run is unsharded as a directory, a .tar and a
.tar.gz; output lines, files produced and deleted are asserted exactly and
values through tests/support/check_unshard.py (real torch 1.13).
"""
import json
import os
import shutil
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from harness import CKPT, check, compare, finish, generate, run  # noqa: E402
from s3test import listing as files  # noqa: E402


def unshard(*args):
    p = run(CKPT, "unshard", "--no-progress", *args, ok=False)
    return p.returncode, p.stdout.splitlines(), p.stderr


def make_run(tmp, fx):
    r = os.path.join(tmp, "run")
    os.makedirs(os.path.join(r, "wandb"))
    with open(os.path.join(r, "config.yaml"), "w") as f:
        f.write("run: test\n")
    shutil.copytree(os.path.join(fx, "rows", "ckpt"), os.path.join(r, "step5"))
    os.makedirs(os.path.join(r, "step5-unsharded"))
    shutil.copy(os.path.join(fx, "rows", "expected.pt"),
                os.path.join(r, "step5-unsharded", "model.pt"))
    shutil.copytree(os.path.join(fx, "olmo", "ckpt"),
                    os.path.join(r, "step10"))
    shutil.copytree(os.path.join(fx, "legacy", "ckpt"),
                    os.path.join(r, "step15"))
    shutil.copytree(os.path.join(fx, "rows", "ckpt"),
                    os.path.join(r, "step20"))
    shutil.copytree(os.path.join(fx, "rows", "ckpt"),
                    os.path.join(r, "step30"))
    os.remove(os.path.join(r, "step30", ".metadata"))
    o = os.path.join(r, "step40")
    os.makedirs(os.path.join(o, "default"))
    with open(os.path.join(o, "_CHECKPOINT_METADATA"), "w") as f:
        f.write('{"commit_timestamp_nsecs": 1}')
    open(os.path.join(o, "commit_success.txt"), "w").close()
    with open(os.path.join(o, "default", "checkpoint"), "wb") as f:
        f.write(b"\x80")       # msgpack: an empty map
    shutil.copytree(os.path.join(fx, "zarr", "ckpt"),
                    os.path.join(r, "0000000050"))
    os.makedirs(os.path.join(r, "step70"))
    with open(os.path.join(r, "step70", "weights.bin"), "wb") as f:
        f.write(b"?" * 64)
    shutil.copytree(os.path.join(fx, "zarr-inc", "ckpt"),
                    os.path.join(r, "0000000060"))
    return r


ORBAX_UNSUPPORTED = ("Orbax step without arrays: no item (manifest.ocdbt, "
                     "_METADATA or a legacy msgpack 'checkpoint') holds any")


def expected_lines(dest, step10="step10", deleted=None):
    """deleted: the run, when --delete-sharded (step5's copy in the run
    is complete by structure, but it is not what step5 unshards to: a
    torch.save of the expected tensors as model.pt, where ckpt writes
    checkpoint.pt; it licenses no delete, and step5 stays)."""
    def done(step, n, t):
        s = "unshard\t%s\t%s/%s-unsharded: %s, %d tensors" % (
            step, dest, step, n, t)
        return s + ("; deleted %s/%s" % (deleted, step) if deleted else "")
    return [
        "error\tstep5\talready unsharded: step5-unsharded in the run "
        "exists, but it is not what step5 unshards to (checkpoint.pt: stat "
        "'%s/step5-unsharded/checkpoint.pt': No such file or directory); "
        "step5 not deleted" % deleted if deleted else
        "skip\tstep5\talready unsharded: step5-unsharded in the run",
        done(step10, "4 files", 32),
        done("step15", "4 files", 44),
        done("step20", "2 files", 5),
        "skip\tstep30\tincomplete: .metadata missing",
        "error\tstep40\t" + ORBAX_UNSUPPORTED,
        done("0000000050", "2 files", 10),
        "skip\t0000000060\tincomplete: .zattrs missing (write_completed "
        "not set)",
        "error\tstep70\tunsupported checkpoint format 'unknown' (no "
        "recognised checkpoint files)",
    ]


def check_outputs(name, dest, fx):
    check(name + ": files", files(dest) == [
        "0000000050-unsharded/checkpoint.pt",
        "0000000050-unsharded/config.yaml",
        "step10-unsharded/config.yaml", "step10-unsharded/model.pt",
        "step10-unsharded/optim.pt", "step10-unsharded/train.pt",
        "step15-unsharded/config.yaml", "step15-unsharded/model.pt",
        "step15-unsharded/optim.pt", "step15-unsharded/train.pt",
        "step20-unsharded/checkpoint.pt", "step20-unsharded/config.yaml"],
        str(files(dest)))
    o = os.path.join(dest, "step10-unsharded")
    compare(name + ": step10 model", os.path.join(o, "model.pt"),
            os.path.join(fx, "olmo", "expected_olmo", "model.pt"))
    with open(os.path.join(o, "train.pt"), "rb") as a, \
            open(os.path.join(fx, "olmo", "ckpt", "train", "rank0.pt"),
                 "rb") as b:
        check(name + ": train.pt is train/rank0.pt", a.read() == b.read())
    with open(os.path.join(o, "config.yaml"), "rb") as a, \
            open(os.path.join(fx, "olmo", "ckpt", "config.yaml"), "rb") as b:
        check(name + ": step10 keeps its own config.yaml",
              a.read() == b.read())
    compare(name + ": step15 (torch_legacy) values",
            os.path.join(dest, "step15-unsharded"),
            os.path.join(fx, "legacy", "expected"))
    compare(name + ": zarr values",
            os.path.join(dest, "0000000050-unsharded", "checkpoint.pt"),
            os.path.join(fx, "zarr", "expected.pt"))
    with open(os.path.join(dest, "step20-unsharded", "config.yaml")) as f:
        check(name + ": step20 gets the run's config.yaml",
              f.read() == "run: test\n")
    compare(name + ": step20 values",
            os.path.join(dest, "step20-unsharded", "checkpoint.pt"),
            os.path.join(fx, "rows", "expected.pt"))


def case_dir(tmp, fx):
    r = make_run(tmp, fx)
    before = files(r)
    dest = os.path.join(tmp, "out-dir")
    rc, lines, err = unshard(r, dest)
    check("dir: exit 1 (orbax)", rc == 1, err)
    check("dir: the errors are rows only", "ckpt: error" not in err, err)
    check("dir: lines", lines == expected_lines(dest), "\n".join(lines))
    check("dir: source untouched", files(r) == before)
    check_outputs("dir", dest, fx)
    # A second pass skips what DEST already holds.
    rc, lines, _ = unshard("--step", "10", r, dest)
    check("dir rerun: skip at DEST", rc == 0 and lines == [
        "skip\tstep10\talready unsharded: %s/step10-unsharded exists" %
        dest], "\n".join(lines))
    rc, lines, _ = unshard("--step", "7", r, dest)
    check("dir: --step without match", rc == 1 and lines == [
        "error\t-\tno sharded checkpoint with that step"], "\n".join(lines))
    # --delete-sharded: deleted only after the verified output exists.
    dest2 = os.path.join(tmp, "out-del")
    rc, lines, err = unshard("--delete-sharded", r, dest2)
    check("delete: exit 1 (orbax)", rc == 1, err)
    check("delete: lines", lines == expected_lines(dest2, deleted=r),
          "\n".join(lines))
    # Everything left is unsharded or not ours: a rerun into the run itself
    # has nothing to do.
    done_run = os.path.join(tmp, "done-run")
    os.makedirs(os.path.join(done_run, "step3-unsharded"))
    with open(os.path.join(done_run, "step3-unsharded", "model.pt"),
              "wb") as f:
        f.write(b"x" * 8)
    rc, lines, _ = unshard(done_run, done_run)
    check("rerun: nothing sharded left", rc == 0 and lines == [
        "skip\t-\tno sharded checkpoint"], "%d %s" % (rc, lines))
    os.makedirs(os.path.join(tmp, "not-a-run"))
    rc, lines, _ = unshard(os.path.join(tmp, "not-a-run"),
                           os.path.join(tmp, "nothing"))
    check("no checkpoints: error", rc == 1 and lines == [
        "error\t-\tno checkpoint"], "%d %s" % (rc, lines))
    check("delete: exactly the unsharded steps deleted", files(r) == [
        f for f in before
        if not f.startswith(("step10/", "step15/", "step20/",
                             "0000000050/"))],
        str(files(r)))
    check_outputs("delete", dest2, fx)


def case_archives(tmp, fx):
    r = make_run(os.path.join(tmp, "a"), fx)
    for ext, mode in ((".tar", "w"), (".tar.gz", "w:gz")):
        arc = os.path.join(tmp, "run1" + ext)
        with tarfile.open(arc, mode) as t:
            t.add(r, arcname="run1")
        dest = os.path.join(tmp, "out" + ext)
        rc, lines, err = unshard(arc, dest)
        check(ext + ": exit 1 (orbax)", rc == 1, err)
        want = expected_lines(dest)
        if ext != ".tar":
            # One streaming pass: skips first, then each step as its last
            # member is read (tarfile stores names sorted).
            # (step40's Orbax error comes when its members are read.)
            done = [l for l in want if l.startswith("unshard\t") or
                    l.startswith("error\tstep40")]
            want = [l for l in want if l not in done] + sorted(
                done, key=lambda l: l.split("\t")[1])
        check(ext + ": lines", lines == want, "\n".join(lines))
        check_outputs(ext, dest, fx)
        rc, lines, err = unshard("--delete-sharded", arc, dest + "-del")
        check(ext + ": --delete-sharded refused", rc == 2 and lines == []
              and "never deletes inside an archive" in err and
              not os.path.exists(dest + "-del"), err)
    arc = os.path.join(tmp, "run1.tar")
    rc, lines, err = unshard("-v", "--step", "20", arc,
                             os.path.join(tmp, "out-in-place"))
    check(".tar: a DCP step is read in place, not extracted",
          rc == 0 and "step20: read in place from %s" % arc in err, err)
    compare(".tar in place: step20 values",
            os.path.join(tmp, "out-in-place", "step20-unsharded",
                         "checkpoint.pt"),
            os.path.join(fx, "rows", "expected.pt"))
    dest = os.path.join(tmp, "out-latest")
    rc, lines, _ = unshard("--json", "--step", "20", arc, dest)
    o = json.loads(lines[0]) if len(lines) == 1 else {}
    check("json: one object", rc == 0 and o.get("action") == "unshard"
          and o.get("checkpoint") == "step20" and o.get("step") == 20 and
          o.get("files") == 2 and [f["name"] for f in o["outputs"]] ==
          ["checkpoint.pt", "config.yaml"], str(lines))
    rc, lines, _ = unshard("-n", arc, os.path.join(tmp, "out-dry"))
    check("dry-run: nothing written",
          not os.path.exists(os.path.join(tmp, "out-dry"))
          and lines[1].startswith("would-unshard\tstep10\t"), str(lines))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-unshard-run-")
    try:
        fx = os.path.join(tmp, "fx")
        # All fixtures from one torch process.
        generate(["make_dcp.py", os.path.join(fx, "rows"), "--case", "rows",
                  "--no-verify"],
                 ["make_dcp.py", os.path.join(fx, "olmo"), "--case", "olmo",
                  "--no-verify"],
                 ["make_zarr.py", os.path.join(fx, "zarr")],
                 ["make_zarr.py", os.path.join(fx, "zarr-inc"), "--incomplete",
                  "--no-expected"],
                 ["make_olmo_legacy.py", os.path.join(fx, "legacy"),
                  "--ranks", "3", "--no-verify"])
        case_dir(tmp, fx)
        case_archives(tmp, fx)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
