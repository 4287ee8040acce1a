#!/usr/bin/python3
# ctest-cost: 4
"""layout_lightning.py - issue 21 (Lightning) under issue 20's rule:
PyTorch Lightning's checkpoints judged in `ckpt ls -l`, `clean -n` and
`clean` (src/trainers/lightning/judge.c).

The fixtures follow Lightning's documented layout (docs/formats/
lightning.md): ModelCheckpoint's FILES `epoch=E-step=S.ckpt` and
`last.ckpt` in lightning_logs/version_0/checkpoints/, each a torch zip
written here by Debian's torch 1.13 `torch.save` of a dict shaped like
Lightning's (epoch, global_step, state_dict, optimizer_states, ...); and
the FSDP strategy's sharded DIRECTORIES `epoch=E-step=S.ckpt/` in
checkpoints/: torch 1.13 DCP files (.metadata + __0_0.distcp) then
`meta.pt`, which Lightning writes last.

Runs whose newest Lightning checkpoint is complete are kept; a run is
deleted only on proof (a file cut short, a sharded directory missing its
.metadata or, DCP complete, its meta.pt); a whole checkpoint whose step
ckpt cannot read, or a .ckpt that is no torch zip, is `unknown`: an
error, never deleted. `--keep-last 1` does not prune Lightning's files
(its own save_top_k does). Before: ls printed no row for any of these
runs and clean said "no checkpoint" and deleted every one, the complete
ones too."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import torchshim  # noqa: E402,F401  (must precede torch)
import torch  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402
from s3test import Checker, ckpt, listing, plan, scratch  # noqa: E402

LOGS = "lightning_logs/version_0/checkpoints"


def lt_dict(epoch, step):
    """What Lightning's trainer.save_checkpoint hands torch.save."""
    return {"epoch": epoch, "global_step": step,
            "pytorch-lightning_version": "2.4.0",
            "state_dict": {"layer.weight": torch.arange(6.0).reshape(2, 3)},
            "loops": {}, "callbacks": {},
            "optimizer_states": [{"state": {}, "param_groups": []}],
            "lr_schedulers": [], "hparams_name": "kwargs",
            "hyper_parameters": {}}


def whole(run, name, epoch, step, cut=False, d=LOGS):
    p = os.path.join(run, d, name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    sd = lt_dict(epoch, step)
    if step is None:
        del sd["global_step"]
    torch.save(sd, p)
    if cut:
        os.truncate(p, os.path.getsize(p) // 2)


def sharded(run, name, epoch, step, drop=()):
    """The FSDP strategy's save: DCP files, then rank 0's meta.pt."""
    d = os.path.join(run, "checkpoints", name)
    os.makedirs(d)
    dcp.save_state_dict({"layer.weight": torch.arange(6.0).reshape(2, 3)},
                        dcp.FileSystemWriter(d), no_dist=True)
    meta = lt_dict(epoch, step)
    del meta["state_dict"], meta["optimizer_states"]
    torch.save(meta, os.path.join(d, "meta.pt"))
    for f in drop:
        os.remove(os.path.join(d, f))


def build(root):
    runs = {}

    def run(name):
        d = os.path.join(root, name)
        os.makedirs(os.path.join(d, "wandb"))
        with open(os.path.join(d, "config.yaml"), "w") as f:
            f.write("run_name: %s\n" % name)
        runs[name] = d
        return d

    d = run("lt-files")
    whole(d, "epoch=0-step=100.ckpt", 0, 100)
    whole(d, "epoch=1-step=200.ckpt", 1, 200)
    whole(d, "last.ckpt", 1, 200)
    whole(d, "epoch=2-step=300.ckpt", 2, 300, cut=True)
    whole(run("lt-cut"), "epoch=0-step=100.ckpt", 0, 100, cut=True)
    sharded(run("lt-sharded"), "epoch=0-step=50.ckpt", 0, 50)
    sharded(run("lt-sharded-cut"), "epoch=1-step=60.ckpt", 1, 60,
            drop=[".metadata"])
    sharded(run("lt-nometa"), "epoch=1-step=60.ckpt", 1, 60,
            drop=["meta.pt"])
    whole(run("lt-nostep"), "best.ckpt", 0, None, d="checkpoints")
    d = run("lt-notzip")
    os.makedirs(os.path.join(d, LOGS))
    with open(os.path.join(d, LOGS, "last.ckpt"), "wb") as f:
        f.write(b"\x80\x02}q\x00." * 8)  # a legacy (non-zip) torch.save
    return sorted(runs)


def main():
    c = Checker()
    with scratch("ckpt-lightning-") as tmp:
        names = build(tmp)
        os.chdir(tmp)
        before = {n: listing(n) for n in names}
        rc, out, err = ckpt("ls", "-l", *names)
        c.eq("ls -l rows", (rc, [tuple(l.split("\t")[:5])
                                 for l in out.splitlines()]), (0, LS))
        check_archives(c, names, out)
        for extra in ([], ["--keep-last", "1"]):
            rc, out, err = ckpt("clean", "-n", "--min-age", "0", *extra,
                                *names)
            c.eq("clean -n %s rows" % extra, (rc, out),
                 (1, clean_rows(True)))
            c.eq("clean -n %s: nothing deleted" % extra,
                 {n: listing(n) for n in names}, before)
        rc, out, err = ckpt("clean", "--min-age", "0", "--keep-last", "1",
                            *names)
        c.eq("clean rows as predicted", (rc, out), (1, clean_rows(False)))
        left = sorted(n for n in names if os.path.exists(n))
        c.eq("clean: only the runs proven bad are gone", left, sorted(KEEP))
        c.eq("clean: kept runs untouched (nothing pruned)",
             {n: listing(n) for n in left}, {n: before[n] for n in left})
    with scratch("ckpt-lightning-p-") as tmp:
        check_process(c, tmp)
    return c.finish()


def check_archives(c, names, rows):
    """Each run tarred and compressed four ways is judged as its directory
    (`ls -l`, the same rows but the name): a .ckpt cut short inside a
    compressed archive is incomplete too, from the zip's end kept while
    the archive was listed. Before: complete (the archive's own end check
    stood for its members)."""
    for ext, comp in ((".tar.gz", "gzip"), (".tar.zst", "zstd -q"),
                      (".tar.bz2", "bzip2"), (".tar.xz", "xz")):
        arcs = []
        for n in names:
            subprocess.run("tar cf - %s | %s -c > %s%s" % (n, comp, n, ext),
                           shell=True, check=True)
            arcs.append(n + ext)
        rc, out, err = ckpt("ls", "-l", *arcs)
        c.eq("%s: ls -l as the directories (%s)" % (ext, err[-300:]),
             (rc, out.replace(ext + "\t", "\t")), (0, rows))
        for a in arcs:
            os.remove(a)


def check_process(c, tmp):
    """process copies a kept Lightning run as it is (nothing unsharded,
    --drop-incomplete drops no .ckpt file) and deletes a proven bad one;
    -n predicts it."""
    src, dest = os.path.join(tmp, "src"), os.path.join(tmp, "dest")
    os.makedirs(src)
    build(src)
    names = ["lt-files", "lt-sharded", "lt-cut"]
    runs = [os.path.join(src, n) for n in names]
    files = {n: listing(os.path.join(src, n)) for n in names}
    args = ["--no-wandb", "--min-age", "0", "--drop-incomplete", "--dest",
            dest] + runs
    rc, dry, err = ckpt("process", "-n", *args)
    rows = sorted(l.split("\t")[:2] for l in dry.splitlines()
                  if not l.startswith("total"))
    c.eq("process -n rows", (rc, rows),
         (0, [["would-delete", runs[2]], ["would-process", runs[0]],
              ["would-process", runs[1]]]))
    rc, real, err = ckpt("process", *args)
    c.eq("process: as -n predicted", (rc, plan(real)), (0, plan(dry)))
    c.eq("process: kept runs copied whole, bad run not copied",
         sorted(os.listdir(dest)), [".ckpt-process", "lt-files",
                                    "lt-sharded"])
    for n in names[:2]:
        c.eq("process: %s at DEST as it was" % n,
             listing(os.path.join(dest, n)), files[n])
    c.eq("process: sources gone", sorted(os.listdir(src)),
         ["lt-nometa", "lt-nostep", "lt-notzip", "lt-sharded-cut"])


CUT = "cut short (no end of central directory)"
# ckpt ls -l: RUN, CHECKPOINT, STEP, FORMAT, STATE
LS = [
    ("lt-cut", "epoch=0-step=100.ckpt", "100", "lightning",
     "incomplete: epoch=0-step=100.ckpt: " + CUT),
    ("lt-files", "epoch=0-step=100.ckpt", "100", "lightning", "complete"),
    ("lt-files", "epoch=1-step=200.ckpt", "200", "lightning", "complete"),
    ("lt-files", "last.ckpt", "200", "lightning", "complete"),
    ("lt-files", "epoch=2-step=300.ckpt", "300", "lightning",
     "incomplete: epoch=2-step=300.ckpt: " + CUT),
    ("lt-nometa", "epoch=1-step=60.ckpt", "60", "lightning",
     "incomplete: meta.pt missing (Lightning writes it after the DCP "
     "files)"),
    ("lt-nostep", "best.ckpt", "-", "lightning",
     "unknown: best.ckpt records no global_step"),
    ("lt-notzip", "last.ckpt", "-", "lightning",
     "unknown: last.ckpt: not a zip file (an older torch.save format?): "
     "cannot verify"),
    ("lt-sharded", "epoch=0-step=50.ckpt", "50", "lightning", "complete"),
    ("lt-sharded-cut", "epoch=1-step=60.ckpt", "60", "lightning",
     "incomplete: .metadata missing"),
]
KEEP = {
    "lt-files": "keep\tlt-files\tcomplete checkpoint last.ckpt "
                "(lightning)",
    "lt-nostep": "error\tlt-nostep\tcannot judge checkpoint best.ckpt "
                 "(best.ckpt records no global_step); not deleted",
    "lt-notzip": "error\tlt-notzip\tcannot judge checkpoint last.ckpt "
                 "(last.ckpt: not a zip file (an older torch.save format?): "
                 "cannot verify); not deleted",
    "lt-sharded": "keep\tlt-sharded\tcomplete checkpoint "
                  "epoch=0-step=50.ckpt (lightning)",
}


def clean_rows(dry):
    out = []
    for name in sorted(set(r[0] for r in LS)):
        if name in KEEP:
            out.append(KEEP[name] + "\n")
            continue
        step, why = [(r[1], r[4]) for r in LS if r[0] == name][-1]
        out.append("%s\t%s\tno complete checkpoint with step > 0 (%s: %s)\n"
                   % ("would-delete" if dry else "delete", name, step,
                      why[len("incomplete: "):]))
    return "".join(out)


if __name__ == "__main__":
    sys.exit(main())
