#!/usr/bin/env python3
# ctest-cost: 30
"""ckpt map-wandb against W&B servers that make it wait: one that accepts
and never answers, one that trickles a byte at a time (neither may hold a
request past --wandb-timeout, nor a query with its retries past 3x that),
listings that never end (fresh cursors forever: a page cap) or loop (a
cursor seen twice), and the stderr notice saying what is waited for.
Exact rows, exit codes, request counts, and bounded wall time.

Env: CKPT (binary), CKPT_SRC (repo root).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.environ.get("CKPT_SRC", "."), "tests",
                                "support"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wandb_fixtures as wf  # noqa: E402
from tally import FAILS, check, finish  # noqa: E402
from wandbtest import CKPT  # noqa: E402

LIMIT = 40  # seconds any one ckpt run may take here
# The lower bounds are exact (a deadline that ends a wait early fails);
# the upper ones are the longest a run should take times this: ctest -j3
# under ASan on 2 loaded cores stretches a 2 s run well past 4 s, and a
# wait that never ends still runs into LIMIT. (The 12 s notice run gets
# 2x: a second notice would come at 20 s.)
SLACK = 3


def ckpt(args, url, env=None):
    """(rc, stdout, stderr, seconds); a run past LIMIT is a failure."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("WANDB_") and not k.startswith("CKPT_WANDB")}
    e["WANDB_BASE_URL"] = url
    e["WANDB_API_KEY"] = wf.KEY
    e.update(env or {})
    t = time.monotonic()
    try:
        p = subprocess.run([CKPT, "map-wandb"] + args, capture_output=True,
                           text=True, env=e, timeout=LIMIT)
    except subprocess.TimeoutExpired:
        FAILS.append("%s: still waiting after %d s" % (args, LIMIT))
        print("FAIL %s: still waiting after %d s" % (args, LIMIT))
        return None, "", "", LIMIT
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t


def build(tmp):
    db = wf.DB()
    cfg = wf.olmo_config("OLMo-1B-local", "/results/1000001")
    db.add("ab12cd34", display="OLMo-1B-local", config=cfg)
    local = os.path.join(tmp, "runs", "local1")
    os.makedirs(local)
    wf.write_config(local, cfg, wf.wandb_section(name="OLMo-1B-local"))
    wf.add_wandb_run(local, "ab12cd34")
    # No wandb/ directory: found by listing runs (Slurm id, display name).
    named = os.path.join(tmp, "runs", "named")
    os.makedirs(named)
    wf.write_config(named, wf.olmo_config("OLMo-named", "/results/named"),
                    wf.wandb_section(name="OLMo-named"))
    db.write(os.path.join(tmp, "db.json"))
    return local, named


def row_error(out):
    parts = out.rstrip("\n").split("\t")
    return parts[2] if len(parts) == 3 else out


def test_never_answers(fake, local):
    api = fake.url + "/graphql"
    fake.reset()
    fake.fault("hang", 100, seconds=60)
    rc, out, err, secs = ckpt(["--wandb-timeout", "1", local], fake.url)
    check("never: row", row_error(out),
          "error: W&B API %s: no complete response within 1 s (run "
          "ai2-llm/olmo-small/ab12cd34; gave up after 2 attempts)" % api)
    check("never: exit", rc, 1)
    # 1 s, a 1-1.25 s backoff, 1 s; the next backoff (2 s) would pass 3 s.
    check("never: requests", fake.requests(), 2)
    check("never: bounded (%.1f s)" % secs, 3 <= secs < SLACK * 3.25, True)

    # The same from the environment, with one attempt.
    fake.reset()
    fake.fault("hang", 100, seconds=60)
    rc, out, err, secs = ckpt(["--retries", "1", local], fake.url,
                              env={"CKPT_WANDB_TIMEOUT": "2"})
    check("never (env): row", row_error(out),
          "error: W&B API %s: no complete response within 2 s (run "
          "ai2-llm/olmo-small/ab12cd34)" % api)
    check("never (env): bounded (%.1f s)" % secs, 2 <= secs < SLACK * 2,
          True)


def test_trickle(fake, local):
    """A byte every 0.3 s keeps any stall timeout quiet: only the
    request's total limit ends it."""
    api = fake.url + "/graphql"
    fake.reset()
    fake.fault("trickle", 100, seconds=60, interval=0.3)
    rc, out, err, secs = ckpt(["--retries", "1", local], fake.url,
                              env={"CKPT_WANDB_TIMEOUT": "2",
                                   "WANDB_HTTP_TIMEOUT": "1"})
    check("trickle: row", row_error(out),
          "error: W&B API %s: no complete response within 2 s (run "
          "ai2-llm/olmo-small/ab12cd34)" % api)
    check("trickle: exit", rc, 1)
    check("trickle: requests", fake.requests(), 1)
    check("trickle: bounded (%.1f s)" % secs, 2 <= secs < SLACK * 2, True)


def test_notice(fake, local):
    """After 10 s, stderr says what is waited for (then every 10 s)."""
    fake.reset()
    fake.fault("hang", 100, seconds=60)
    rc, out, err, secs = ckpt(["--wandb-timeout", "12", "--retries", "1",
                               local], fake.url)
    lines = [l.split(" ", 1)[1] for l in err.splitlines()]
    check("notice: stderr", lines, [
        "ckpt: waiting for 127.0.0.1:%d: run ai2-llm/olmo-small/ab12cd34, "
        "10 s" % fake.port])
    check("notice: row", row_error(out),
          "error: W&B API %s/graphql: no complete response within 12 s "
          "(run ai2-llm/olmo-small/ab12cd34)" % fake.url)
    check("notice: exit", rc, 1)
    check("notice: bounded (%.1f s)" % secs, 12 <= secs < 2 * 12, True)
    fake.reset()
    fake.fault("hang", 100, seconds=60)
    rc, out, err, secs = ckpt(["-q", "--wandb-timeout", "11", "--retries",
                               "1", local], fake.url)
    check("notice: not with -q", "waiting" in err, False)


def test_endless(fake, named):
    fake.reset()
    fake.fault("endless")
    rc, out, err, secs = ckpt([named], fake.url,
                              env={"CKPT_WANDB_MAX_PAGES": "40"})
    check("endless: row", row_error(out),
          "error: W&B API: runs of ai2-llm/olmo-small: more than 40 pages "
          "(CKPT_WANDB_MAX_PAGES allows more)")
    check("endless: exit", rc, 1)
    check("endless: requests", fake.stats()["ops"], {"Runs": 40})
    fake.reset()
    fake.fault("loop")
    rc, out, err, secs = ckpt([named], fake.url)
    check("loop: row", row_error(out),
          "error: W&B API: runs of ai2-llm/olmo-small: page 3 repeats an "
          "earlier cursor (the listing loops)")
    check("loop: requests", fake.stats()["ops"], {"Runs": 3})


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-mapwandb-waits-")
    try:
        local, named = build(tmp)
        with wf.FakeWandb(os.path.join(tmp, "db.json")) as fake:
            test_trickle(fake, local)
            test_never_answers(fake, local)
            test_endless(fake, named)
            test_notice(fake, local)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
