#!/usr/bin/python3
# ctest-cost: 40
"""judge_accounting.py - delete by accounting, not by absence (issue 27,
classes 1, 2, 9, 10, 12 and 13's clean side).

A run is bad only when every file in it is accounted for: part of a
checkpoint proven incomplete by a layout ckpt understands (and owned by
it), a step-0 checkpoint, or debris. Each case below was deleted (or
planned for deletion) before; each must now be kept, or be an error
naming the file nothing accounts for, by `clean -n`, `clean` and
`process`. A directory that holds runs is never judged as one run."""
import json
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from delproof import Checker, age, ckpt, gen, tree  # noqa: E402
from s3test import S3Env, old_ctime  # noqa: E402
import subprocess  # noqa: E402

FIX = os.path.join(HERE, "..", "fixtures", "real-writers")


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors):
    """A safetensors file (the format's own layout: 8-byte header length,
    JSON header, data) of float32 tensors {name: (shape, values)};
    meta: __metadata__."""
    hdr, data = {}, b""
    meta = tensors.pop("__metadata__", None)
    for name, (shape, vals) in sorted(tensors.items()):
        b = struct.pack("<%df" % len(vals), *vals)
        hdr[name] = {"dtype": "F32", "shape": shape,
                     "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    if meta is not None:
        hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def bad_run(root, name, runs):
    """A copy of gen_runs.py's 2871002: config.yaml, wandb/, train_data/
    and a complete step0 only: bad, by itself."""
    d = os.path.join(root, name)
    shutil.copytree(os.path.join(runs, "2871002"), d, symlinks=True)
    return d


def main():
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        gen(runs)
        model = open(os.path.join(runs, "2871001", "step1000-unsharded",
                                  "model.pt"), "rb").read()
        st = safetensors({"w": ([2, 2], [1.0, 2.0, 3.0, 4.0])})
        cases = os.path.join(tmp, "cases")
        os.makedirs(cases)

        # --- class 2: a complete checkpoint outside the fixed names and
        # places: kept (a layout judges it) or an error (nothing
        # accounts for it); never deleted with the run.
        want = {}

        def case(name, files, action, reason):
            d = bad_run(cases, name, runs)
            for rel, data in files.items():
                if isinstance(data, tuple):     # (copytree source)
                    shutil.copytree(data[0], os.path.join(d, rel))
                else:
                    write(os.path.join(d, rel), data)
            want[name] = (action, reason)

        case("final-step", {"step1000-final/model.pt": model},
             "keep", "complete checkpoint step1000-final (unsharded)")
        case("olmo-hf", {"step1000-hf/config.json": "{}",
                         "step1000-hf/model.safetensors": st},
             "keep", "complete checkpoint step1000-hf (unsharded)")
        case("final", {"final/model.safetensors": st},
             "keep", "complete checkpoint final (unsharded)")
        case("release", {"release": (os.path.join(
            FIX, "megatron_legacy_torch", "checkpoints", "iter_0000010"),)},
             "keep", "complete checkpoint release (megatron)")
        case("accelerate", {"checkpoints/checkpoint_3": (os.path.join(
            FIX, "hf_trainer_fsdp2_sharded", "checkpoint-2"),)},
             "keep", "complete checkpoint checkpoint_3 (hf)")
        case("top-safetensors", {"model.safetensors": st},
             "error", "cannot account for model.safetensors")
        case("lightning-project", {
            "proj/abc123/checkpoints/epoch=3-step=1000.ckpt": model},
             "error", "cannot account for "
             "proj/abc123/checkpoints/epoch=3-step=1000.ckpt")
        case("lightning-dirpath", {"ckpts/epoch=3-step=1000.ckpt": model},
             "error", "cannot account for ckpts/epoch=3-step=1000.ckpt")
        for n in ("ckpt_1000", "checkpoint_1000", "Step1000", "step=1000",
                  "step1000.0"):
            case("name-" + n, {n + "/model.pt": model}, "keep",
                 "complete checkpoint %s (unsharded)" % n)
        # (no step number fits: a complete checkpoint all the same)
        case("past-2^63", {"step99999999999999999999/model.pt": model},
             "keep", "complete checkpoint step99999999999999999999 "
             "(unsharded)")
        ds = os.path.join(FIX, "deepspeed_zero1_fp32", "checkpoints",
                          "global_step2")
        case("ds-tag", {"checkpoints/best-model": (ds,),
                        "checkpoints/latest": "best-model"},
             "keep", "complete checkpoint best-model (deepspeed)")
        case("ds-epoch-tag", {"epoch1_final": (ds,)},
             "keep", "complete checkpoint epoch1_final (deepspeed)")
        # a weights file inside a step its layout proved incomplete is
        # not the layout's: not accounted for
        case("foreign-in-step", {
            "step500": (os.path.join(runs, "2871003", "step500"),),
            "step500/export.safetensors": st},
             "error", "cannot account for step500/export.safetensors")
        # anything large that is not debris
        case("large", {}, "error", "cannot account for blob.dat")
        with open(os.path.join(cases, "large", "blob.dat"), "wb") as f:
            f.truncate(65 << 20)
        # --- class 9: a FIFO, socket or device is never accounted for,
        # nor taken for an empty file ("model.pt is empty" was proof)
        case("fifo-debris", {}, "error", "cannot account for notes.fifo")
        os.mkfifo(os.path.join(cases, "fifo-debris", "notes.fifo"))
        case("fifo-model", {"step1000/config.yaml": "x"}, "error",
             "cannot judge checkpoint step1000 (step1000/model.pt is not "
             "a regular file); not deleted")
        os.mkfifo(os.path.join(cases, "fifo-model", "step1000", "model.pt"))
        # --- class 10: one rank's rows of an FSDP2 HuggingFaceStorageWriter
        # save without save_distributed (its sharding info says so; the
        # index's total_size is larger than the file's tensors)
        part = safetensors({
            "w": ([13, 13], [0.5] * 169),
            "__metadata__": {"DCP_SHARDING_INFO": json.dumps(
                {"w": {"saved_offsets": [13, 0]}})}})
        case("hf-storage-part", {
            "step1000/model-00001-of-00001.safetensors": part,
            "step1000/model.safetensors.index.json": json.dumps(
                {"metadata": {"total_size": 2 * 169 * 4},
                 "weight_map": {"w": "model-00001-of-00001.safetensors"}})},
             "would-delete", None)
        # debris of every kind: bad, deleted
        case("debris", {"logs/train.log": "x" * 1000,
                        "wandb/run-1/files/output.log": "y",
                        "slurm-1.out": "z", "notes.txt": "n"},
             "would-delete", None)
        age(cases)

        rc, out, err = ckpt("clean", "-n", "--min-age", "0", cases)
        got = {os.path.basename(r[1]): (r[0], r[2]) for r in out}
        for name, (action, reason) in sorted(want.items()):
            g = got.get(name, ("(no row)", ""))
            ok = g[0] == action and (
                reason is None or g[1] == reason or g[1].startswith(
                    reason + ":") or g[1].startswith(reason + " ("))
            c.eq("class 2/9/10: %s" % name, ok and g[0], action)
            if not ok:
                print("   ", name, g)
        c.eq("clean -n of a directory of runs: no row for it",
             [r for r in out if r[1] == cases], [])
        before = tree(cases)
        rc, out, err = ckpt("clean", "--min-age", "0", cases)
        deleted = sorted(n for n, (a, _) in want.items()
                         if a == "would-delete")
        c.eq("clean deletes exactly what -n planned",
             sorted(os.path.basename(r[1]) for r in out
                    if r[0] == "delete"), deleted)
        after = tree(cases)
        c.eq("kept and error runs untouched", sorted(
            k for k in set(after) | set(before)
            if k.split("/")[0] not in deleted and
            after.get(k) != before.get(k)), [])

        # --- class 1: a queue taken for one run
        q = os.path.join(tmp, "q")
        shutil.copytree(runs, q, symlinks=True)
        shutil.copytree(os.path.join(runs, "2871003", "step500"),
                        os.path.join(q, "step500"))
        age(q)
        dest = os.path.join(tmp, "dest")
        for dry in (["-n"], []):
            rc, out, err = ckpt("process", *dry, "--no-wandb", "--min-age",
                                "0", q, "--dest", dest, timeout=300)
            kinds = sorted((r[0], os.path.basename(r[1])) for r in out
                           if r[0] != "total")
            p, d = ("would-process", "would-delete") if dry else \
                ("process", "delete")
            c.eq("process %s: a queue with step500/ at its top is judged "
                 "run by run" % " ".join(dry), (rc, kinds), (0, sorted([
                     (p, "2871001"), (d, "2871002"), (d, "2871003"),
                     (d, "2871004"), (p, "2871005"), (d, "2871006"),
                     ("skip", "logs"), ("skip", "notes"),
                     ("skip", "step500")])))
        c.eq("the queue itself and what is not a run are still there",
             sorted(os.listdir(q)), ["logs", "notes", "step500"])
        c.eq("the good runs are at DEST",
             sorted(n for n in os.listdir(dest) if not n.startswith(".")),
             ["2871001", "2871005"])

        # ... and the same queue as an S3 prefix
        with S3Env() as s3:
            env = s3.env()
            env.update(old_ctime())
            subprocess.run(["aws", "s3", "cp", "--quiet", "--recursive", runs,
                            "s3://ckpt-test/q/"], env=env, check=True)
            shutil.copytree(os.path.join(runs, "2871003", "step500"),
                            os.path.join(tmp, "s500"))
            subprocess.run(["aws", "s3", "cp", "--quiet", "--recursive",
                            os.path.join(tmp, "s500"),
                            "s3://ckpt-test/q/step500/"], env=env, check=True)
            rc, out, err = ckpt("clean", "-n", "--min-age", "0",
                                "s3://ckpt-test/q", env=env)
            c.eq("clean -n of an S3 prefix of runs with step500/ at its top: "
                 "run by run", (rc, sorted((r[0], r[1].split("/")[-1])
                                           for r in out)),
                 (0, sorted([("keep", "2871001"), ("would-delete", "2871002"),
                             ("would-delete", "2871003"),
                             ("would-delete", "2871004"), ("keep", "2871005"),
                             ("would-delete", "2871006"), ("skip", "logs"),
                             ("skip", "notes"), ("skip", "step500")])))
        # `clean --force par` with a complete par/R/step3000-unsharded/:
        # par is a directory of runs, never one run
        par = os.path.join(tmp, "par")
        os.makedirs(par)
        shutil.copytree(os.path.join(runs, "2871005"),
                        os.path.join(par, "R"), symlinks=True)
        write(os.path.join(par, "notes.txt"), "hello")
        age(par)
        before = tree(par)
        for args in (["-n", "--force"], ["--force"], []):
            rc, out, err = ckpt("clean", *args, "--min-age", "0", par)
            c.eq("clean %s par: R kept, par not judged as a run"
                 % " ".join(args), (rc, [r[:2] for r in out]),
                 (0, [["keep", os.path.join(par, "R")]]))
        c.eq("par untouched", tree(par), before)
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
