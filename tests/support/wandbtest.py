"""wandbtest.py - what the tests of ckpt against the fake W&B server
(map_wandb*.py, process_wandb.py, upload_wandb.py) share: ckpt run with
only the W&B settings it is given (its output never showing the key:
a failure in tally.FAILS), file lists, and fixture runs they build."""
import os
import subprocess
import tarfile

import wandb_fixtures as wf
from tally import FAILS

CKPT = os.environ.get("CKPT", "build/ckpt")


def ckpt(args, url, key=wf.KEY, home=None, env=None):
    """`ckpt ARGS` against W&B at url with the API key (None: no key) and
    no other WANDB_* setting nor NETRC; with home, HOME and
    CKPT_STATE_DIR (home/state) there; env on top. The key in its output
    is a failure, whatever happens. Returns (rc, stdout, stderr)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("WANDB_") and k != "NETRC"}
    e["WANDB_BASE_URL"] = url
    if home is not None:
        e["HOME"] = home
        e["CKPT_STATE_DIR"] = os.path.join(home, "state")
    if key is not None:
        e["WANDB_API_KEY"] = key
    e.update(env or {})
    p = subprocess.run([CKPT] + args, capture_output=True, text=True, env=e,
                       timeout=300)
    if wf.KEY in p.stdout or wf.KEY in p.stderr:
        FAILS.append("key leaked in %s" % args)
        print("FAIL key leaked")
    return p.returncode, p.stdout, p.stderr


def files(root):
    """Sorted relative paths of the files below root."""
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def raw_step(d, name, data):
    """d/name/model.pt holding data."""
    os.makedirs(os.path.join(d, name))
    with open(os.path.join(d, name, "model.pt"), "wb") as f:
        f.write(data)


def local_run(db, d, display, step=raw_step):
    """Run directory d found by its local wandb run id: W&B run ab12cd34
    (display name display, Slurm 1000001) in db and in d's wandb/, with
    step(d, "step1000", data)."""
    cfg = wf.olmo_config(display, "/results/1000001")
    db.add("ab12cd34", display=display, config=cfg, step=1000)
    os.makedirs(d)
    wf.write_config(d, cfg, wf.wandb_section(name=display))
    wf.add_wandb_run(d, "ab12cd34", slurm="1000001", last_step=1000)
    step(d, "step1000", b"weights" * 1000)


def slurm_archive(db, tmp, runs, display, step=raw_step):
    """A run archive runs/3000003.tar.gz found by the Slurm id in its
    save_folder: W&B run sl000001 (display name display) in db; the run
    (tmp/a/3000003, with step(run, "step100", data)) stays extracted
    beside. Returns (run, archive)."""
    cfg = wf.olmo_config(display, "/results/3000003")
    db.add("sl000001", display=display, config=cfg, step=100)
    a = os.path.join(tmp, "a", "3000003")
    os.makedirs(a)
    wf.write_config(a, cfg, wf.wandb_section(name=display))
    step(a, "step100", b"w" * 5000)
    arc = os.path.join(runs, "3000003.tar.gz")
    with tarfile.open(arc, "w:gz") as t:
        t.add(a, arcname="3000003")
    return a, arc


def ambiguous(db, d):
    """Run directory d (made if absent) whose config (display name
    OLMo-dup, no save_folder) matches two W&B runs of db equally."""
    cfg = wf.olmo_config("OLMo-dup", None)
    db.add("du000001", display="OLMo-dup", config=cfg)
    db.add("du000002", display="OLMo-dup", config=cfg)
    os.makedirs(d, exist_ok=True)
    wf.write_config(d, cfg, wf.wandb_section(name="OLMo-dup"))


def write_logs(tmp):
    """tmp/logs with slurm-3000003.out, train-ab12cd34.log and
    slurm-30000031.out (each holding its name): the logs of runs
    3000003 and ab12cd34, and one of neither. Returns its path."""
    logs = os.path.join(tmp, "logs")
    os.makedirs(logs)
    for name in ("slurm-3000003.out", "train-ab12cd34.log",
                 "slurm-30000031.out"):
        with open(os.path.join(logs, name), "w") as f:
            f.write(name + "\n")
    return logs
