"""Fixtures for the map-wandb tests: a W&B run database for
fake_wandb.py, OLMo-like run directories with each kind of local evidence,
and a handle on a running fake server.

Everything is deterministic (seeded), so tests can assert exact output.
"""
import base64
import ctypes
import json
import os
import random
import signal
import struct
import subprocess
import sys
import time
import urllib.request
import zlib

import yaml

from s3env import _die_with_parent, server_env  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "local-0123456789abcdef0123456789abcdef01234567"


# ---- configs ---------------------------------------------------------------

def olmo_config(run_name, save_folder, seed=6198, lr=4.0e-4, **extra):
    """An OLMo TrainConfig as asdict() gives it (no wandb section)."""
    cfg = {
        "run_name": run_name,
        "seed": seed,
        "dry_run": False,
        "model": {"d_model": 2048, "n_heads": 16, "n_layers": 16,
                  "mlp_ratio": 8, "weight_tying": True,
                  "activation_type": "swiglu", "init_std": 0.02,
                  "rope": True, "flash_attention": False,
                  "max_sequence_length": 2048, "vocab_size": 50280},
        "optimizer": {"name": "adamw", "learning_rate": lr,
                      "weight_decay": 0.1, "betas": [0.9, 0.95],
                      "eps": 1.0e-5, "metrics_log_interval": 10},
        "scheduler": {"name": "cosine_with_warmup", "t_warmup": 2000,
                      "alpha_f": 0.1},
        "data": {"paths": ["/data/part-%d.npy" % i for i in range(3)],
                 "num_workers": 4, "drop_last": True},
        "save_folder": save_folder,
        "load_path": None,
        "max_duration": "2e12T",
        "global_train_batch_size": 2048,
        "device_train_microbatch_size": 8,
        "precision": "amp_bf16",
        "save_interval": 1000,
    }
    cfg.update(extra)
    return cfg


def wandb_section(entity="ai2-llm", project="olmo-small", name=None,
                  group=None):
    return {"project": project, "entity": entity, "group": group,
            "name": name, "tags": ["watching"], "log_artifacts": False,
            "rank_zero_only": True, "log_interval": 1}


# ---- the W&B database --------------------------------------------------------

class DB:
    def __init__(self):
        self.runs = []
        self.entities = {"ai2-llm": {"default": True}, "other": {}}
        self.clock = 0

    def add(self, name, entity="ai2-llm", project="olmo-small",
            display=None, group=None, config=None, step=None,
            state="finished"):
        self.clock += 1
        t = 1714557600 + 3600 * self.clock  # 2024-05-01T10:00:00 onwards
        run = {"entity": entity, "project": project, "name": name,
               "displayName": display or name, "group": group,
               "state": state,
               "createdAt": time.strftime("%Y-%m-%dT%H:%M:%S",
                                          time.gmtime(t)),
               "config": config or {}, "summary": {}}
        if step is not None:
            run["summary"] = {"_step": step, "train/CrossEntropyLoss": 2.5}
        self.runs.append(run)
        return run

    def add_filler(self, n, seed=7):
        """Noise: runs the filters must not return."""
        rnd = random.Random(seed)
        projects = [("ai2-llm", "olmo-small"), ("ai2-llm", "olmo-medium"),
                    ("other", "proj")]
        for i in range(n):
            e, p = projects[i % len(projects)]
            rid = "f%07d" % i
            disp = "filler-%d" % rnd.randrange(40)
            sf = "/results/%d" % (6000000 + i)
            self.add(rid, e, p, disp, rnd.choice([None, "g1", "g2"]),
                     olmo_config(disp, sf, seed=rnd.randrange(100)),
                     step=rnd.randrange(1, 5000))

    def write(self, path):
        with open(path, "w") as f:
            json.dump({"entities": self.entities, "runs": self.runs}, f)


# ---- run directories ---------------------------------------------------------

def write_config(run_dir, cfg, wandb=None, text=None, rel="config.yaml"):
    path = os.path.join(run_dir, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if text is None:
        doc = dict(cfg)
        if wandb is not None:
            doc["wandb"] = wandb
        text = yaml.safe_dump(doc, sort_keys=False)
    with open(path, "w") as f:
        f.write(text)


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_bytes(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data


def pb_str(field, s):
    return pb_bytes(field, s.encode())


def wandb_log(records):
    """A run-ID.wandb transaction log (LevelDB log framing, wandb's
    checksums)."""
    out = bytearray(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    block = 32768
    for data in records:
        first = True
        while True:
            space = block - len(out) % block
            if space < 7:
                out += b"\0" * space
                continue
            room = space - 7
            chunk, data = data[:room], data[room:]
            last = not data
            typ = (1 if last else 2) if first else (4 if last else 3)
            # wandb's checksum: zlib's CRC-32 of the type byte, then
            # the data (wandb/sdk/internal/datastore.py)
            crc = zlib.crc32(chunk, zlib.crc32(bytes([typ])))
            out += struct.pack("<IHB", crc, len(chunk), typ) + chunk
            first = False
            if last:
                break
    return bytes(out)


def run_record(run_id, entity, project, display=None, group=None):
    rr = pb_str(1, run_id) + pb_str(2, entity) + pb_str(3, project)
    if group:
        rr += pb_str(6, group)
    if display:
        rr += pb_str(8, display)
    return varint(1 << 3) + varint(3) + pb_bytes(17, rr)


def add_wandb_run(run_dir, run_id, stamp="20240501_100000", nest="wandb/wandb",
                  offline=False, slurm=None, last_step=None, record=None,
                  pad_record=0, wb_config=None):
    """One wandb run dir under run_dir/nest; returns its relative path."""
    name = "%srun-%s-%s" % ("offline-" if offline else "", stamp, run_id)
    rel = os.path.join(nest, name)
    d = os.path.join(run_dir, rel)
    os.makedirs(os.path.join(d, "files"), exist_ok=True)
    os.makedirs(os.path.join(d, "logs"), exist_ok=True)
    meta = {"os": "Linux", "python": "3.10.14", "host": "nid005123",
            "startedAt": "2024-05-01T10:00:00.000000Z",
            "program": "scripts/train.py", "args": ["configs/x.yaml"]}
    if slurm:
        meta["slurm"] = {"job_id": slurm, "job_name": "olmo",
                         "nnodes": "16"}
    with open(os.path.join(d, "files", "wandb-metadata.json"), "w") as f:
        json.dump(meta, f)
    if last_step is not None:
        with open(os.path.join(d, "files", "wandb-summary.json"), "w") as f:
            json.dump({"_step": last_step, "_runtime": 3600.5}, f)
    if wb_config is not None:
        wrapped = {k: {"value": v} for k, v in wb_config.items()}
        wrapped["_wandb"] = {"value": {"cli_version": "0.19.1"}}
        with open(os.path.join(d, "files", "config.yaml"), "w") as f:
            yaml.safe_dump(wrapped, f)
    if record is not None:
        recs = [varint(1 << 3) + varint(0) + pb_bytes(21, b"")]
        if pad_record:  # push the RunRecord across a block boundary
            recs.append(varint(1 << 3) + varint(1) +
                        pb_bytes(11, b"x" * pad_record))
        recs.append(record)
        with open(os.path.join(d, "run-%s.wandb" % run_id), "wb") as f:
            f.write(wandb_log(recs))
    return rel


def add_steps(run_dir, steps, unsharded=()):
    for s in steps:
        os.makedirs(os.path.join(run_dir, "step%d" % s), exist_ok=True)
    for s in unsharded:
        os.makedirs(os.path.join(run_dir, "step%d-unsharded" % s),
                    exist_ok=True)


# ---- the fake server -----------------------------------------------------------

class FakeWandb:
    """fake_wandb.py in a subprocess; use as a context manager."""

    def __init__(self, db_path, key=KEY, timeout=24 * 3600):
        # The server goes with the test (even one killed with SIGKILL),
        # not after a fixed time that a slow test on a loaded machine
        # may outlast: its --timeout is only a backstop.
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "fake_wandb.py"),
             "--db", db_path, "--key", key, "--timeout", str(timeout)],
            stdout=subprocess.PIPE, text=True, env=server_env(),
            preexec_fn=_die_with_parent)
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError("fake W&B did not start: %r" % line)
        self.port = int(line.split()[1])
        self.url = "http://127.0.0.1:%d" % self.port

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()

    def _call(self, path, body=None):
        req = urllib.request.Request(
            self.url + path, method="POST" if body is not None else "GET",
            data=json.dumps(body).encode() if body is not None else None)
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)

    def stats(self):
        return self._call("/_stats")

    def requests(self):
        return self.stats()["requests"]

    def reset(self):
        self._call("/_reset", {})

    def fault(self, kind, count=1, seconds=None, status=None,
              interval=None):
        f = {"kind": kind, "count": count}
        if seconds is not None:
            f["seconds"] = seconds
        if status is not None:
            f["status"] = status
        if interval is not None:
            f["interval"] = interval
        self._call("/_fault", f)


def basic_auth(key=KEY):
    return "Basic " + base64.b64encode(("api:" + key).encode()).decode()
