#!/usr/bin/env python3
"""upload_wandb.py - `ckpt upload --wandb`: the run paths are asked of W&B
(the fake GraphQL server) during the upload, exactly as map-wandb finds
them, and each run lands under DEST/ENTITY/PROJECT/RUN_ID/ with its logs:
a run directory found by its local wandb run id, a run archive
(--extract) found by its Slurm id, an ambiguous run (reported by name,
exit 1, nothing of it copied), a 429 from W&B (retried), and no API key
(nothing uploaded at all)."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("CKPT_SRC", "."), "tests",
                                "support"))
import wandb_fixtures as wf  # noqa: E402
from tally import check, finish  # noqa: E402
from wandbtest import (CKPT, ambiguous, ckpt, files,  # noqa: E402
                       local_run, slurm_archive, write_logs)


def upload(args, url, key=wf.KEY, state=None):
    return ckpt(["upload"] + args, url, key=key, home=state)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-upload-wandb-")
    try:
        db = wf.DB()
        runs = os.path.join(tmp, "runs")
        # A run directory with its wandb run dir: local id, confirmed.
        local_run(db, os.path.join(runs, "local1"), "OLMo-1B-up")
        # A run archive found by the Slurm id in save_folder.
        a, arc = slurm_archive(db, tmp, runs, "OLMo-7B-arc")
        # Ambiguous: identical configs, no save_folder.
        ambiguous(db, os.path.join(runs, "dup"))
        logs = write_logs(tmp)
        dbp = os.path.join(tmp, "db.json")
        db.write(dbp)
        dest = os.path.join(tmp, "bucket")
        srcs = [os.path.join(runs, "local1"), arc, os.path.join(runs, "dup")]
        with wf.FakeWandb(dbp) as fake:
            # No key: W&B cannot be asked, so nothing is uploaded.
            rc, out, err = upload(["--wandb", "--extract"] + srcs + [dest],
                                  fake.url, key=None, state=tmp)
            check("no key: exit", rc, 1)
            check("no key: nothing at DEST", os.path.exists(dest), False)
            check("no key: says how", "WANDB_API_KEY" in err, True)

            fake.fault("429", count=1, seconds=0)
            rc, out, err = upload(["--wandb", "--extract", "--logs", logs] +
                                  srcs + [dest], fake.url, state=tmp)
            check("exit 1 (the ambiguous run)", rc, 1)
            check("rows", out.splitlines()[:-1], [
                "error\t%s\t-\tno W&B run path for run 'dup': ambiguous: "
                "2 W&B runs with display name 'OLMo-dup' match the config: "
                "ai2-llm/olmo-small/du000001, ai2-llm/olmo-small/du000002"
                % srcs[2]])
            p1, p2 = "ai2-llm/olmo-small/ab12cd34/", \
                "ai2-llm/olmo-small/sl000001/"
            check("placement", files(dest), sorted(
                [p1 + f for f in files(srcs[0])] +
                [p1 + "logs/train-ab12cd34.log"] +
                [p2 + f for f in files(a)] + [p2 + "logs/slurm-3000003.out"]))
            with open(os.path.join(dest, "ai2-llm/olmo-small/sl000001/"
                                   "step100/model.pt"), "rb") as f:
                check("archive member content", f.read(), b"w" * 5000)
            # The first GraphQL request got a 429; the placement above
            # needed the answers, so it was retried.
            check("W&B asked in one batch after the 429",
                  fake.stats()["ops"].get("Runs", 0) >= 1, True)
            # Same answer as map-wandb --output + --wandb-map.
            m = os.path.join(tmp, "map.tsv")
            e = dict(os.environ, WANDB_BASE_URL=fake.url,
                     WANDB_API_KEY=wf.KEY)
            subprocess.run([CKPT, "map-wandb", "-o", m] + srcs, env=e,
                           capture_output=True)
            dest2 = os.path.join(tmp, "bucket2")
            rc2, out2, _ = upload(["--wandb-map", m, "--extract", "--logs",
                                   logs] + srcs + [dest2], fake.url,
                                  state=tmp)
            check("same placement as --wandb-map", files(dest2),
                  files(dest))
            rc, out, err = upload(["--wandb", "--wandb-map", m] + srcs +
                                  [dest], fake.url, state=tmp)
            check("--wandb with --wandb-map: usage", rc, 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
