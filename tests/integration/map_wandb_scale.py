#!/usr/bin/env python3
"""Batch efficiency of ckpt map-wandb: many runs of one project share
queries. 300 runs take one request per 50 keys (per phase), not one per
run; 1,000 runs with every kind of evidence stay within a few dozen.

Env: CKPT (binary), CKPT_SRC (repo root).
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.environ.get("CKPT_SRC", "."), "tests",
                                "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wandb_fixtures as wf  # noqa: E402
from map_wandb import ckpt  # noqa: E402
from tally import check, finish  # noqa: E402

PROJECT = "olmo-scale"


def build(tmp, n):
    """n runs of each kind in one project; returns the three lists."""
    db = wf.DB()
    db.add_filler(100)
    local, slurm, named = [], [], []
    W = wf.wandb_section
    for i in range(n):
        # Local run dir; every 10th a requeue with two W&B runs.
        cfg = wf.olmo_config("loc-%d" % i, "/weka/loc-%d" % i)
        ids = ["l%07d" % i] + (["m%07d" % i] if i % 10 == 0 else [])
        d = os.path.join(tmp, "local", "loc-%d" % i)
        os.makedirs(d)
        wf.write_config(d, cfg, W(project=PROJECT, name="loc-%d" % i))
        for k, rid in enumerate(ids):
            db.add(rid, project=PROJECT, display="loc-%d" % i, config=cfg)
            wf.add_wandb_run(d, rid, stamp="20240501_10000%d" % k)
        local.append(d)
        # Slurm id in save_folder only.
        job = str(7000000 + i)
        cfg = wf.olmo_config("sl-%d" % i, "/results/" + job)
        db.add("s%07d" % i, project=PROJECT, display="sl-%d" % i, config=cfg)
        d = os.path.join(tmp, "slurm", job)
        os.makedirs(d)
        wf.write_config(d, cfg, W(project=PROJECT, name="sl-%d" % i))
        slurm.append(d)
        # Display name only.
        cfg = wf.olmo_config("nm-%d" % i, "/weka/nm-%d" % i)
        db.add("n%07d" % i, project=PROJECT, display="nm-%d" % i,
               group="g%d" % (i % 3), config=cfg)
        d = os.path.join(tmp, "named", "nm-%d" % i)
        os.makedirs(d)
        wf.write_config(d, cfg, W(project=PROJECT, name="nm-%d" % i,
                                  group="g%d" % (i % 3)))
        named.append(d)
    db.write(os.path.join(tmp, "db.json"))
    return local, slurm, named


def run_batch(fake, what, runs, want_requests, want_prefix):
    fake.reset()
    t = time.monotonic()
    rc, out, err = ckpt(runs, fake.url)
    took = time.monotonic() - t
    rows = out.splitlines()
    check("%s: exit" % what, rc, 0)
    check("%s: rows" % what, len(rows), len(runs))
    bad = [r for r in rows if "\t%s" % want_prefix not in r]
    check("%s: all mapped" % what, bad[:3], [])
    got = fake.requests()
    print("     %s: %d runs, %d requests, %.2f s" % (what, len(runs), got,
                                                    took))
    check("%s: requests" % what, got, want_requests)
    return rows


def main():
    n = 300
    tmp = tempfile.mkdtemp(prefix="ckpt-mapwandb-scale-")
    try:
        local, slurm, named = build(tmp, n)
        with wf.FakeWandb(os.path.join(tmp, "db.json")) as fake:
            # 330 ids: 7 $in queries of <= 50 ids, one page each.
            rows = run_batch(fake, "300 local ids", local, 7,
                             "ai2-llm/%s/" % PROJECT)
            check("requeue picks the latest", rows[0].split("\t")[1],
                  "ai2-llm/%s/m0000000" % PROJECT)
            # 300 Slurm ids: 6 $regex queries of 50 ids; the local-id phase
            # sends nothing.
            run_batch(fake, "300 slurm ids", slurm, 6,
                      "ai2-llm/%s/s" % PROJECT)
            run_batch(fake, "300 display names", named, 6,
                      "ai2-llm/%s/n" % PROJECT)
            # All 900 at once, plus 100 repeats (same RUN_IDs, shared
            # queries): still one request per 50 keys per phase.
            allruns = local + slurm + named + local[:100]
            run_batch(fake, "1000 mixed", allruns, 7 + 6 + 6,
                      "ai2-llm/%s/" % PROJECT)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
