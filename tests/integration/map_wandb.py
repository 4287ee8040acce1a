#!/usr/bin/env python3
"""ckpt map-wandb against the fake W&B server: each kind of evidence, exact
rows, exit codes and request counts, --offline, --json, --output.

Env: CKPT (binary), CKPT_SRC (repo root).
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("CKPT_SRC", "."), "tests",
                                "support"))
import wandb_fixtures as wf  # noqa: E402
import wandbtest as wt  # noqa: E402
from tally import check, finish  # noqa: E402


def ckpt(args, url, env=None, key=wf.KEY):
    return wt.ckpt(["map-wandb"] + args, url, key=key, env=env)


def build(tmp):
    """The DB and the run directories; returns {name: path}."""
    db = wf.DB()
    db.add_filler(240)
    runs = {}

    def rundir(name):
        d = os.path.join(tmp, "runs", name)
        os.makedirs(d)
        runs[name] = d
        return d

    W = wf.wandb_section
    # 1. A local run dir (OLMo's wandb/wandb/ nesting), confirmed.
    cfg = wf.olmo_config("OLMo-1B-local", "/results/1000001")
    db.add("ab12cd34", display="OLMo-1B-local", config=cfg, step=5000)
    d = rundir("local1")
    wf.write_config(d, cfg, W(name="OLMo-1B-local"))
    wf.add_wandb_run(d, "ab12cd34", slurm="1000001", last_step=5000)
    wf.add_steps(d, [1000, 5000])

    # 2. A requeued job: three local run dirs, steps split by last step.
    cfg = wf.olmo_config("OLMo-1B-rq", "/results/2000002")
    for i, st in enumerate([1000, 2000, 3000]):
        db.add("rq00000%d" % (i + 1), display="OLMo-1B-rq", config=cfg,
               step=st, state="crashed" if i < 2 else "finished")
    d = rundir("2000002")
    wf.write_config(d, cfg, W(name="OLMo-1B-rq"))
    for i, st in enumerate([1000, 2000, 3000]):
        wf.add_wandb_run(d, "rq00000%d" % (i + 1),
                         stamp="20240502_1%d0000" % i, slurm="2000002",
                         last_step=st)
    wf.add_steps(d, [500, 1000, 1500, 2000, 3000], unsharded=[3000])

    # 3. Slurm id only; a same-id run elsewhere with another seed must not
    #    be taken.
    cfg = wf.olmo_config("OLMo-7B-slurm", "/results/3000003")
    db.add("sl000001", display="OLMo-7B-slurm", config=cfg, step=100)
    db.add("sl000009", display="OLMo-7B-slurm",
           config=wf.olmo_config("OLMo-7B-slurm", "/other/3000003", seed=1))
    d = rundir("3000003")
    wf.write_config(d, cfg, W(name="OLMo-7B-slurm"))
    wf.add_steps(d, [100])

    # 4. A requeued job found by its Slurm id (no local wandb dirs).
    cfg = wf.olmo_config("OLMo-1B-sq", "/results/4000004")
    db.add("sq000001", display="OLMo-1B-sq", config=cfg, step=2000)
    db.add("sq000002", display="OLMo-1B-sq", config=cfg, step=4000)
    d = rundir("4000004")
    wf.write_config(d, cfg, W(name="OLMo-1B-sq"))
    wf.add_steps(d, [1000, 2000, 3000, 4000])

    # 5. Display name + group; same-named runs with other configs. The
    #    local YAML spells numbers differently from what W&B stores, and
    #    W&B has a key the local config lacks (a newer default).
    base = wf.olmo_config("OLMo-1B-name", "/weka/named", seed=2)
    db.add("dn000001", display="OLMo-1B-name", group="grp-a",
           config=wf.olmo_config("OLMo-1B-name", "/weka/named", seed=1))
    db.add("dn000002", display="OLMo-1B-name", group="grp-a",
           config=dict(base, new_default=True))
    db.add("dn000003", display="OLMo-1B-name", group="grp-b", config=base)
    d = rundir("named")
    text = wf.yaml.safe_dump(dict(base, wandb=W(name="OLMo-1B-name",
                                                group="grp-a")),
                             sort_keys=False)
    text = text.replace("learning_rate: 0.0004", "learning_rate: 4.0e-04")
    wf.write_config(d, None, text=text)

    # 6. Ambiguous: identical configs without a save_folder.
    wt.ambiguous(db, rundir("dup"))

    # 7. Unknown: no evidence at all; a name W&B does not know.
    rundir("nothing")
    d = rundir("gone")
    wf.write_config(d, wf.olmo_config("OLMo-gone", "/weka/gone"),
                    W(name="OLMo-gone"))

    # 8. An offline run that was synced later; .wandb at the root.
    cfg = wf.olmo_config("OLMo-off", "/weka/off")
    db.add("of000001", display="OLMo-off", config=cfg)
    d = rundir("offline1")
    wf.write_config(d, cfg, W(name="OLMo-off"))
    wf.add_wandb_run(d, "of000001", stamp="20240601_120000", nest=".wandb",
                     offline=True)

    # 9. The RunRecord says another project than config.yaml (a
    #    WANDB_PROJECT override at train time); split across blocks.
    cfg = wf.olmo_config("OLMo-ovr", "/weka/ovr")
    db.add("wp000001", project="olmo-override", display="OLMo-ovr",
           config=cfg)
    d = rundir("override")
    wf.write_config(d, cfg, W(name="OLMo-ovr"))
    wf.add_wandb_run(d, "wp000001", record=wf.run_record(
        "wp000001", "ai2-llm", "olmo-override", "OLMo-ovr"),
        pad_record=40000)

    # 10. A local id W&B does not have; found by Slurm id instead.
    cfg = wf.olmo_config("OLMo-mv", "/results/5000005")
    db.add("mv000001", display="OLMo-mv", config=cfg)
    d = rundir("5000005")
    wf.write_config(d, cfg, W(name="OLMo-mv"))
    wf.add_wandb_run(d, "zz999999", slurm="5000005")

    # 11. No entity in config.yaml: the key's default entity.
    cfg = wf.olmo_config("OLMo-ne", "/weka/ne")
    db.add("ne000001", display="OLMo-ne", config=cfg)
    d = rundir("noentity")
    wf.write_config(d, cfg, W(entity=None, name="OLMo-ne"))
    wf.add_wandb_run(d, "ne000001")

    # 12. No config.yaml; a checkpoint's config.yaml has it.
    cfg = wf.olmo_config("OLMo-ck", "/results/8000008")
    db.add("ck000001", display="OLMo-ck", config=cfg)
    d = rundir("8000008")
    wf.add_steps(d, [200, 400])
    wf.write_config(d, cfg, W(name="OLMo-ck"), rel="step400/config.yaml")

    # 13. 120 same-named runs: the display-name search takes three pages.
    for i in range(120):
        db.add("pg%06d" % i, display="OLMo-many",
               config=wf.olmo_config("OLMo-many", "/weka/many", seed=i))
    d = rundir("many")
    wf.write_config(d, wf.olmo_config("OLMo-many", "/weka/many", seed=77),
                    W(name="OLMo-many"))

    # 14. The log the wandb SDK itself wrote (tests/fixtures/wandb-sdk):
    #     its RunRecord names run g9dvvkua of project code-toad, no
    #     entity; a copy with one bit of the run id flipped.
    db.add("g9dvvkua", project="code-toad", display="code-toad")
    for name, flip in (("sdk", False), ("sdk-damaged", True)):
        d = os.path.join(rundir(name), "wandb", SDK_DIR)
        os.makedirs(d)
        with open(SDK_LOG, "rb") as f:
            data = bytearray(f.read())
        if flip:
            data[34] ^= 1  # the "g" of "g9dvvkua", inside record 2
        with open(os.path.join(d, "run-g9dvvkua.wandb"), "wb") as f:
            f.write(data)

    db.write(os.path.join(tmp, "db.json"))
    return runs


SDK_DIR = "offline-run-20210216_154407-g9dvvkua"
SDK_LOG = os.path.join(os.environ.get("CKPT_SRC", "."), "tests", "fixtures",
                       "wandb-sdk", "run-g9dvvkua.wandb")


EXPECTED = {
    "local1": "local1\tai2-llm/olmo-small/ab12cd34\twandb run dir "
              "wandb/wandb/run-20240501_100000-ab12cd34, confirmed by W&B",
    "2000002": "2000002\tai2-llm/olmo-small/rq000003\twandb run dir "
               "wandb/wandb/run-20240502_120000-rq000003, confirmed by W&B; "
               "the latest of 3 W&B runs of 3 wandb run dirs (requeued); "
               "checkpoint steps split between the 3 W&B runs by last "
               "logged step",
    "3000003": "3000003\tai2-llm/olmo-small/sl000001\tconfig.save_folder "
               "ending in Slurm job 3000003; config matches",
    "4000004": "4000004\tai2-llm/olmo-small/sq000002\tconfig.save_folder "
               "ending in Slurm job 4000004; config matches 2 W&B runs of "
               "one requeued job, the latest chosen; checkpoint steps split "
               "between the 2 W&B runs by last logged step",
    "named": "named\tai2-llm/olmo-small/dn000002\tdisplay name "
             "'OLMo-1B-name' and group 'grp-a'; config matches",
    "dup": "dup\t-\tambiguous: 2 W&B runs with display name 'OLMo-dup' "
           "match the config: ai2-llm/olmo-small/du000001, "
           "ai2-llm/olmo-small/du000002",
    "nothing": "nothing\t-\tunknown: no W&B evidence (no wandb/ run "
               "directory, no config.yaml)",
    "gone": "gone\t-\tunknown: no W&B run with display name 'OLMo-gone'",
    "offline1": "offline1\tai2-llm/olmo-small/of000001\twandb run dir "
                ".wandb/offline-run-20240601_120000-of000001, confirmed by "
                "W&B",
    "override": "override\tai2-llm/olmo-override/wp000001\twandb run dir "
                "wandb/wandb/run-20240501_100000-wp000001, confirmed by W&B",
    "5000005": "5000005\tai2-llm/olmo-small/mv000001\tconfig.save_folder "
               "ending in Slurm job 5000005; config matches",
    "noentity": "noentity\tai2-llm/olmo-small/ne000001\twandb run dir "
                "wandb/wandb/run-20240501_100000-ne000001, confirmed by W&B",
    "8000008": "8000008\tai2-llm/olmo-small/ck000001\tconfig.save_folder "
               "ending in Slurm job 8000008; config matches",
}
ORDER = ["local1", "2000002", "3000003", "4000004", "named", "dup",
         "nothing", "gone", "offline1", "override", "5000005", "noentity",
         "8000008"]


def test_all(fake, runs):
    fake.reset()
    rc, out, err = ckpt([runs[n] for n in ORDER], fake.url)
    # among several RUNs (a glob), a directory with no evidence at all is
    # no run: skipped with a message, no row (docs/commands/map-wandb.md)
    check("all: rows", out.splitlines(),
          [EXPECTED[n] for n in ORDER if n != "nothing"])
    check("all: the non-run skipped, said", [
        ln.split("ckpt: ", 1)[-1] for ln in err.splitlines()
        if "not a run" in ln], ["%s: not a run: skipped" % runs["nothing"]])
    check("all: exit status", rc, 1)
    st = fake.stats()
    # GetDefaultEntity; local ids: one $in for olmo-small, one Run for
    # olmo-override; Slurm ids: one $regex; display names: one $or.
    check("all: requests", st["requests"], 5)
    check("all: ops", st["ops"], {"GetDefaultEntity": 1, "Runs": 3,
                                  "Run": 1})
    check("all: filters", sorted(st["filters"]), sorted([
        '{"name":{"$in":["ab12cd34","ne000001","of000001","rq000001",'
        '"rq000002","rq000003","zz999999"]}}',
        '{"config.save_folder":{"$regex":"/(3000003|4000004|5000005|'
        '8000008)$"}}',
        '{"$or":[{"display_name":"OLMo-1B-name","group":"grp-a"},'
        '{"display_name":"OLMo-dup"},{"display_name":"OLMo-gone"}]}']))


def test_pagination(fake, runs):
    fake.reset()
    rc, out, err = ckpt([runs["many"]], fake.url)
    check("pages: row", out, "many\tai2-llm/olmo-small/pg000077\tdisplay "
          "name 'OLMo-many'; config matches\n")
    st = fake.stats()
    check("pages: requests", st["requests"], 3)
    check("pages: same filter each page", st["filters"],
          ['{"display_name":"OLMo-many"}'] * 3)


def test_one_by_one(fake, runs):
    for n in ORDER:
        rc, out, err = ckpt([runs[n]], fake.url)
        check("single %s: row" % n, out, EXPECTED[n] + "\n")
        want = 0 if "\t-\t" not in EXPECTED[n] else 1
        check("single %s: exit" % n, rc, want)


def test_json(fake, runs):
    rc, out, err = ckpt(["--json", runs["2000002"], runs["dup"]], fake.url)
    rows = [json.loads(l) for l in out.splitlines()]
    check("json: exit", rc, 1)
    r = rows[0]
    check("json: requeue path", (r["id"], r["path"], r["status"],
                                 r["source"]),
          ("2000002", "ai2-llm/olmo-small/rq000003", "found", "local-id"))
    check("json: requeue runs", r["wandb_runs"],
          ["ai2-llm/olmo-small/rq00000%d" % i for i in (1, 2, 3)])
    check("json: steps", r["step_paths"], {
        "500": "ai2-llm/olmo-small/rq000001",
        "1000": "ai2-llm/olmo-small/rq000001",
        "1500": "ai2-llm/olmo-small/rq000002",
        "2000": "ai2-llm/olmo-small/rq000002",
        "3000": "ai2-llm/olmo-small/rq000003"})
    check("json: run as given", r["run"], runs["2000002"])
    d = rows[1]
    check("json: ambiguous", (d["path"], d["status"], d["candidates"]),
          (None, "ambiguous", ["ai2-llm/olmo-small/du000001",
                               "ai2-llm/olmo-small/du000002"]))


def test_offline(fake, runs):
    fake.reset()
    names = ["local1", "2000002", "3000003", "offline1", "override",
             "nothing"]
    rc, out, err = ckpt(["--offline"] + [runs[n] for n in names], fake.url,
                        key=None)
    check("offline: rows", out.splitlines(), [
        "local1\tai2-llm/olmo-small/ab12cd34\twandb run dir "
        "wandb/wandb/run-20240501_100000-ab12cd34 (offline: not confirmed "
        "with W&B)",
        "2000002\tai2-llm/olmo-small/rq000003\twandb run dir "
        "wandb/wandb/run-20240502_120000-rq000003, the latest of 3 "
        "(offline: not confirmed with W&B); checkpoint steps split between "
        "the 3 W&B runs by last logged step",
        "3000003\t-\tunknown: no local W&B run id (--offline uses local "
        "evidence only)",
        "offline1\tai2-llm/olmo-small/of000001\twandb run dir "
        ".wandb/offline-run-20240601_120000-of000001 (offline: not "
        "confirmed with W&B)",
        "override\tai2-llm/olmo-override/wp000001\twandb run dir "
        "wandb/wandb/run-20240501_100000-wp000001 (offline: not confirmed "
        "with W&B)"])
    check("offline: exit", rc, 1)
    check("offline: no requests", fake.requests(), 0)


def test_overrides(fake, runs):
    fake.reset()
    rc, out, err = ckpt(["--project", "olmo-override", runs["local1"],
                         runs["override"]], fake.url)
    check("--project: rows", out.splitlines(), [
        "local1\t-\tunknown: local W&B run ab12cd34 not found in "
        "ai2-llm/olmo-override; no W&B run with config.save_folder ending "
        "in Slurm job 1000001; no W&B run with display name "
        "'OLMo-1B-local'",
        EXPECTED["override"]])
    check("--project: exit", rc, 1)


def test_output(fake, runs, tmp):
    m = os.path.join(tmp, "map.tsv")
    fake.reset()
    rc, out, err = ckpt(["-o", m, runs["local1"], runs["dup"]], fake.url)
    check("output: exit", rc, 1)
    with open(m) as f:
        check("output: file", f.read(), out)
    fake.reset()
    rc, out2, err = ckpt(["--output", m, runs["local1"], runs["3000003"],
                          runs["dup"]], fake.url)
    check("output: rerun rows", out2.splitlines(), [
        EXPECTED["local1"], EXPECTED["3000003"], EXPECTED["dup"]])
    # local1 is mapped already: only 3000003 and dup are looked up.
    check("output: rerun requests", fake.stats()["ops"],
          {"Runs": 2})
    with open(m) as f:
        check("output: merged file", f.read().splitlines(), [
            EXPECTED["local1"], EXPECTED["dup"], EXPECTED["3000003"]])
    fake.reset()
    rc, out3, err = ckpt(["-o", m, runs["local1"], runs["3000003"]],
                         fake.url)
    check("output: all mapped: exit", rc, 0)
    check("output: all mapped: no requests", fake.requests(), 0)
    check("output: all mapped: rows", out3.splitlines(),
          [EXPECTED["local1"], EXPECTED["3000003"]])

    # --json over a TSV map: kept rows become JSON objects too.
    rc, out4, err = ckpt(["--json", "-o", m, runs["local1"]], fake.url)
    row = json.loads(out4)
    check("output: kept row as json", (row["id"], row["path"],
                                        row["status"], row["run"]),
          ("local1", "ai2-llm/olmo-small/ab12cd34", "found", runs["local1"]))

    j = os.path.join(tmp, "map.jsonl")
    rc, out, err = ckpt(["--json", "-o", j, runs["2000002"]], fake.url)
    with open(j) as f:
        line = json.loads(f.read())
    check("output json: steps in file", sorted(line["steps"]),
          ["1000", "1500", "2000", "3000", "500"])
    check("output json: no location in file", "location" in line, False)

    rc, out, err = ckpt(["-n", "-o", os.path.join(tmp, "dry.tsv"),
                         runs["local1"]], fake.url)
    check("output dry-run: no file",
          os.path.exists(os.path.join(tmp, "dry.tsv")), False)

    bad = os.path.join(tmp, "bad.tsv")
    with open(bad, "w") as f:
        f.write("run1\tnot-a-path\tx\n")
    rc, out, err = ckpt(["-o", bad, runs["local1"]], fake.url)
    check("output bad map: exit", rc, 1)
    check("output bad map: message", err.strip().split("error: ", 1)[-1],
          "%s:1: bad W&B path 'not-a-path'" % bad)
    with open(bad) as f:
        check("output bad map: untouched", f.read(),
              "run1\tnot-a-path\tx\n")


def test_archives(fake, runs, tmp):
    """The same runs packed as archives map exactly as their directories:
    evidence is read in place (compressed ones in one pass)."""
    import subprocess
    kinds = [("local1", ".tar", ["tar", "-cf"]),
             ("2000002", ".tar.gz", ["tar", "-czf"]),
             ("offline1", ".tar.zst", ["tar", "--zstd", "-cf"]),
             ("override", ".zip", ["zip", "-qry"]),
             ("5000005", ".tar.xz", ["tar", "-cJf"]),
             ("noentity", ".tar.bz2", ["tar", "-cjf"])]
    adir = os.path.join(tmp, "archives")
    os.makedirs(adir)
    args, want = [], []
    for name, ext, cmd in kinds:
        src = runs[name]
        path = os.path.join(adir, name + ext)
        subprocess.run(cmd + [path, os.path.basename(src)],
                       cwd=os.path.dirname(src), check=True)
        args.append(path)
        want.append(EXPECTED[name])
    fake.reset()
    rc, out, err = ckpt(args, fake.url)
    check("archives: rows", out.splitlines(), want)
    check("archives: exit", rc, 0)


def test_sdk_log(fake, runs):
    """The SDK's own log read through its checksums; damaged, refused."""
    fake.reset()
    rc, out, err = ckpt([runs["sdk"], runs["sdk-damaged"]], fake.url)
    check("sdk log: rows", out.splitlines(), [
        "sdk\tai2-llm/code-toad/g9dvvkua\twandb run dir wandb/%s, "
        "confirmed by W&B" % SDK_DIR,
        "sdk-damaged\t-\tunknown: no W&B entity/project (config.yaml has "
        "no wandb section and no run-*.wandb names one; use "
        "--entity/--project) (unreadable evidence: wandb/%s/"
        "run-g9dvvkua.wandb: wandb log record at byte 17: checksum "
        "mismatch (damaged))" % SDK_DIR])
    check("sdk log: exit status", rc, 1)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-mapwandb-")
    try:
        runs = build(tmp)
        with wf.FakeWandb(os.path.join(tmp, "db.json")) as fake:
            test_all(fake, runs)
            test_pagination(fake, runs)
            test_one_by_one(fake, runs)
            test_json(fake, runs)
            test_offline(fake, runs)
            test_overrides(fake, runs)
            test_output(fake, runs, tmp)
            test_archives(fake, runs, tmp)
            test_sdk_log(fake, runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
