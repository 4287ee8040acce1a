#!/usr/bin/env python3
"""process_wandb.py - `ckpt process` without --wandb-map or --no-wandb asks
W&B (the fake GraphQL server) for every queued run at once, before any
data moves, exactly as map-wandb does: a run directory found by its local
wandb run id and a run archive found by its Slurm id land under
DEST/ENTITY/PROJECT/RUN_ID/ with their logs and their sources are
deleted; an ambiguous run is `failed ... map:`, untouched, exit 1; a bad
run is deleted whatever W&B says; without an API key nothing at all is
processed."""
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("CKPT_SRC", "."), "tests",
                                "support"))
import wandb_fixtures as wf  # noqa: E402
from torchzip import torch_zip  # noqa: E402

CKPT = os.environ.get("CKPT", "build/ckpt")
FAILS = []


def check(what, got, want):
    if got != want:
        FAILS.append(what)
        print("FAIL %s\n  got:  %r\n  want: %r" % (what, got, want))
    else:
        print("ok   %s" % what)


def process(args, url, key=wf.KEY, home=None):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("WANDB_") and k != "NETRC"}
    e["WANDB_BASE_URL"] = url
    e["HOME"] = home
    e["CKPT_STATE_DIR"] = os.path.join(home, "state")
    if key is not None:
        e["WANDB_API_KEY"] = key
    p = subprocess.run([CKPT, "process", "--min-age", "0"] + args,
                       capture_output=True, text=True, env=e, timeout=300)
    if wf.KEY in p.stdout or wf.KEY in p.stderr:
        FAILS.append("key leaked")
    return p.returncode, p.stdout, p.stderr


def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def step(d, name, data):
    os.makedirs(os.path.join(d, name))
    with open(os.path.join(d, name, "model.pt"), "wb") as f:
        f.write(torch_zip(data))


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-process-wandb-")
    try:
        db = wf.DB()
        runs = os.path.join(tmp, "runs")
        W = wf.wandb_section
        cfg = wf.olmo_config("OLMo-1B-pr", "/results/1000001")
        db.add("ab12cd34", display="OLMo-1B-pr", config=cfg, step=1000)
        d = os.path.join(runs, "local1")
        os.makedirs(d)
        wf.write_config(d, cfg, W(name="OLMo-1B-pr"))
        wf.add_wandb_run(d, "ab12cd34", slurm="1000001", last_step=1000)
        step(d, "step1000", b"weights" * 1000)
        cfg = wf.olmo_config("OLMo-7B-pa", "/results/3000003")
        db.add("sl000001", display="OLMo-7B-pa", config=cfg, step=100)
        a = os.path.join(tmp, "a", "3000003")
        os.makedirs(a)
        wf.write_config(a, cfg, W(name="OLMo-7B-pa"))
        step(a, "step100", b"w" * 5000)
        arc = os.path.join(runs, "3000003.tar.gz")
        with tarfile.open(arc, "w:gz") as t:
            t.add(a, arcname="3000003")
        cfg = wf.olmo_config("OLMo-dup", None)
        db.add("du000001", display="OLMo-dup", config=cfg)
        db.add("du000002", display="OLMo-dup", config=cfg)
        d = os.path.join(runs, "dup")
        os.makedirs(d)
        wf.write_config(d, cfg, W(name="OLMo-dup"))
        step(d, "step10", b"d" * 100)
        d = os.path.join(runs, "bad1")
        os.makedirs(os.path.join(d, "wandb"))
        wf.write_config(d, wf.olmo_config("OLMo-bad", None),
                        W(name="OLMo-bad"))
        logs = os.path.join(tmp, "logs")
        os.makedirs(logs)
        for name in ("slurm-3000003.out", "train-ab12cd34.log",
                     "slurm-30000031.out"):
            with open(os.path.join(logs, name), "w") as f:
                f.write(name + "\n")
        dbp = os.path.join(tmp, "db.json")
        db.write(dbp)
        dest = os.path.join(tmp, "bucket")
        want1 = files(os.path.join(runs, "local1"))
        before = files(runs)
        with wf.FakeWandb(dbp) as fake:
            rc, out, err = process([runs, "--dest", dest], fake.url,
                                   key=None, home=tmp)
            check("no key: exit 1", rc, 1)
            check("no key: no rows", out, "")
            check("no key: says how", "WANDB_API_KEY" in err, True)
            check("no key: nothing touched", (files(runs),
                  os.path.exists(dest)), (before, False))

            rc, out, err = process(["--logs", logs, runs, "--dest", dest],
                                   fake.url, home=tmp)
            check("exit 1 (the ambiguous run)", rc, 1)
            rows = [line.split("\t") for line in out.splitlines()]
            # runs are worked on at once: their rows in the queue's order
            order = [arc] + [os.path.join(runs, n)
                             for n in ("bad1", "dup", "local1")]
            rows = sorted(rows[:-1], key=lambda r: (
                order.index(r[1]) if r[1] in order else 9, r[1])) + rows[-1:]
            p1 = os.path.join(dest, "ai2-llm/olmo-small/ab12cd34")
            p2 = os.path.join(dest, "ai2-llm/olmo-small/sl000001")
            check("rows", [r[:3] for r in rows[:-1]], [
                ["processed", arc, p2],
                ["deleted", os.path.join(runs, "bad1"), "no checkpoint"],
                ["failed", os.path.join(runs, "dup"), rows[2][2]],
                ["processed", os.path.join(runs, "local1"), p1]])
            check("ambiguous: the map phase says so",
                  rows[2][2].startswith("map: no W&B run path for run "
                                        "'dup' ("), True)
            check("total", rows[-1][1:6], ["processed=2", "done=0",
                                           "deleted=1", "skipped=0",
                                           "failed=1"])
            check("W&B asked", fake.stats()["ops"].get("Runs", 0) >= 1,
                  True)
            check("local1 at DEST", files(p1),
                  sorted(want1 + ["logs/train-ab12cd34.log"]))
            check("archive at DEST, extracted", files(p2),
                  ["config.yaml", "logs/slurm-3000003.out",
                   "step100/model.pt"])
            check("sources: only the ambiguous run left",
                  sorted(os.listdir(runs)), ["dup"])
            check("logs kept", sorted(os.listdir(logs)), [
                "slurm-3000003.out", "slurm-30000031.out",
                "train-ab12cd34.log"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failures" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
