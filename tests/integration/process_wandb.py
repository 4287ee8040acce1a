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
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("CKPT_SRC", "."), "tests",
                                "support"))
import wandb_fixtures as wf  # noqa: E402
from torchzip import torch_zip  # noqa: E402
from tally import check, finish  # noqa: E402
from wandbtest import (ambiguous, ckpt, files, local_run,  # noqa: E402
                       slurm_archive, write_logs)


def process(args, url, key=wf.KEY, home=None):
    return ckpt(["process", "--min-age", "0"] + args, url, key=key,
                home=home)


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
        local_run(db, os.path.join(runs, "local1"), "OLMo-1B-pr", step)
        _, arc = slurm_archive(db, tmp, runs, "OLMo-7B-pa", step)
        d = os.path.join(runs, "dup")
        ambiguous(db, d)
        step(d, "step10", b"d" * 100)
        d = os.path.join(runs, "bad1")
        os.makedirs(os.path.join(d, "wandb"))
        wf.write_config(d, wf.olmo_config("OLMo-bad", None),
                        W(name="OLMo-bad"))
        logs = write_logs(tmp)
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
                ["process", arc, p2],
                ["delete", os.path.join(runs, "bad1"), "no checkpoint"],
                ["error", os.path.join(runs, "dup"), rows[2][2]],
                ["process", os.path.join(runs, "local1"), p1]])
            check("ambiguous: the map phase says so",
                  rows[2][2].startswith("map: no W&B run path for run "
                                        "'dup' ("), True)
            check("total", rows[-1][1:5], ["process=2", "delete=1",
                                           "skip=0", "error=1"])
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
    return finish()


if __name__ == "__main__":
    sys.exit(main())
