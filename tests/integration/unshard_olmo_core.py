#!/usr/bin/python3
# ctest-cost: 8
"""unshard_olmo_core.py: `ckpt unshard` on OLMo `olmo_core` steps (OLMo-core
0.1: model/ and optim/ rank_R.safetensors + metadata.json, train/rank{R}.pt).

Fixtures are written at test time by tests/support/make_olmo_core.py with
torch 1.13, in this process (one torch start for the whole test): 2 ranks
f32, 3 ranks bf16 with DTensor boxes and two ranges per rank, 4 ranks f32 in
the earlier flattened_offsets_per_file schema with a rank that holds nothing.
Outputs must equal what OLMo's unsharder writes (expected/, itself checked
against an OLMo-core-style reader): model.pt and optim.pt loaded with
torch, train.pt byte for byte; also --format safetensors, --layout single,
run mode over a directory, a .tar and a .tar.zst. Bad input: missing or
unnamed rank files, disagreeing dtypes and sizes, ranges out of bounds or
overlapping, a truncated rank file, no train/rank0.pt, a param group naming
a forbidden class: one error line naming the file, nothing at DEST.
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

SRC = os.environ.get("CKPT_SRC", os.getcwd())
CKPT = os.environ.get("CKPT", os.path.join(SRC, "build", "ckpt"))
sys.path.insert(0, os.path.join(SRC, "tests", "support"))
import make_olmo_core as moc  # noqa: E402  (imports torch via torchshim)
import check_unshard as cu  # noqa: E402
import torch  # noqa: E402

TENSORS = {"f32-2": 64, "bf16-3": 72, "old-4": 64}
failures = []
checks = [0]


def check(name, cond, detail=""):
    checks[0] += 1
    print("%s %s%s" % ("ok  " if cond else "FAIL", name,
                       (": " + detail) if detail and not cond else ""))
    if not cond:
        failures.append(name)


def unshard(*args):
    p = subprocess.run([CKPT, "unshard", "--no-progress"] + list(args),
                       capture_output=True, text=True)
    return p.returncode, p.stdout.splitlines(), p.stderr


def same_bytes(a, b):
    with open(a, "rb") as x, open(b, "rb") as y:
        return x.read() == y.read()


def equal(name, got, want):
    r = cu.compare(got, want)
    check(name, r.ok, "%s: %s" % (r.path, r.msg))


def model_exact(name, path, want):
    """torch.load(weights_only=True): same keys, dtypes, torch.equal."""
    got = torch.load(path, weights_only=True)
    ok = list(got) == list(want) and all(
        got[k].dtype == want[k].dtype and got[k].shape == want[k].shape and
        torch.equal(got[k], want[k]) for k in want)
    check(name, ok, "keys %s" % list(got)[:4])


def case_ok(tmp, case):
    fx = os.path.join(tmp, case)
    ck, exp = os.path.join(fx, "ckpt"), os.path.join(fx, "expected")
    want = {p: torch.load(os.path.join(exp, p + ".pt")) for p in ("model", "optim")}
    out = os.path.join(tmp, "out-" + case)
    rc, lines, err = unshard("--verify", ck, out)
    check(case + ": exit 0", rc == 0, err)
    f = lines[0].split("\t") if len(lines) == 1 else []
    check(case + ": one row", len(f) == 4 and f[0] == "unshard" and
          f[3].startswith("%d tensors, 1 objects, " % TENSORS[case]), str(lines))
    check(case + ": files", sorted(os.listdir(out)) ==
          ["config.yaml", "model.pt", "optim.pt", "train.pt"], str(os.listdir(out)))
    model_exact(case + ": model.pt", os.path.join(out, "model.pt"), want["model"])
    equal(case + ": optim.pt", cu.safe_load(os.path.join(out, "optim.pt")), want["optim"])
    check(case + ": train.pt is train/rank0.pt",
          same_bytes(os.path.join(out, "train.pt"), os.path.join(ck, "train", "rank0.pt")))
    check(case + ": config.yaml copied",
          same_bytes(os.path.join(out, "config.yaml"), os.path.join(ck, "config.yaml")))
    st = os.path.join(tmp, "st-" + case)
    rc, _, err = unshard("--verify", "--format", "safetensors", ck, st)
    check(case + ": safetensors files", rc == 0 and sorted(os.listdir(st)) == [
        "config.yaml", "extra.json", "model.safetensors", "optim.safetensors",
        "train.pt"], err + str(os.listdir(st) if os.path.isdir(st) else ""))
    equal(case + ": model.safetensors", cu.load_safetensors(
        os.path.join(st, "model.safetensors")), want["model"])
    equal(case + ": optim.safetensors", cu.load_safetensors(
        os.path.join(st, "optim.safetensors")),
        {"state.%d.%s" % (i, k): t for i, s in want["optim"]["state"].items()
         for k, t in s.items()})
    with open(os.path.join(st, "extra.json")) as j:
        groups = json.load(j)["optim.param_groups"]
    check(case + ": extra.json param groups", groups == json.loads(
        json.dumps(want["optim"]["param_groups"])), str(groups)[:200])
    single = os.path.join(tmp, "single-" + case)
    rc, _, err = unshard("--layout", "single", ck, single)
    check(case + ": --layout single", rc == 0 and sorted(os.listdir(single)) ==
          ["checkpoint.pt", "config.yaml"], err)
    if rc == 0:
        equal(case + ": checkpoint.pt", cu.safe_load(
            os.path.join(single, "checkpoint.pt")), want)


# --- bad input -------------------------------------------------------------

def edit_meta(part, fn):
    def mutate(d):
        p = os.path.join(d, part, "metadata.json")
        with open(p) as f:
            m = json.load(f)
        fn(m["tensors"])
        with open(p, "w") as f:
            json.dump(m, f)
    return mutate


def spec(t, rank):
    return t["shard_spec_per_file"]["rank_%d.safetensors" % rank]


def grow_rank0(ts):
    """rank_0 claims one element of wte more than its file holds."""
    w = ts["transformer.wte.weight"]
    spec(w, 0)["flattened_offsets"][0][1] += 1
    spec(w, 1)["flattened_offsets"][0][0] += 1


def bad_group(d):
    """optim/rank_0.safetensors with a param group that also holds a
    reference to os.system (pickled by name, never called)."""
    import pickle
    import pickletools
    p = os.path.join(d, "optim", "rank_0.safetensors")
    ts = moc.read_safetensors(p)
    group = pickle.loads(bytes(ts["param_group0"].numpy()))
    group["lr"] = os.system
    # Without unused memo PUTs it fits the tensor's size.
    evil = pickletools.optimize(pickle.dumps(group, 4))
    n = ts["param_group0"].numel()
    assert len(evil) <= n, (len(evil), n)
    ts["param_group0"] = torch.frombuffer(bytearray(evil.ljust(n, b"N")),
                                          dtype=torch.uint8).clone()
    moc.write_safetensors(p, ts)


def truncate(d):
    with open(os.path.join(d, "model", "rank_1.safetensors"), "r+b") as f:
        f.truncate(os.path.getsize(f.name) - 4)


def rename_file(ts):
    w = ts["transformer.ln_f.bias"]["shard_spec_per_file"]
    w["rank_7.safetensors"] = w.pop("rank_1.safetensors")


def bad(tmp, base, name, mutate, want):
    ck = os.path.join(tmp, "bad-" + name)
    shutil.copytree(os.path.join(tmp, base, "ckpt"), ck)
    mutate(ck)
    out = os.path.join(tmp, "badout-" + name)
    rc, lines, err = unshard(ck, out)
    w = want % {"d": ck}
    check(name + ": exit 1", rc == 1, err)
    check(name + ": one error row, no message", len(lines) == 1 and
          lines[0].startswith("error\t") and lines[0].endswith("\t" + w)
          and not err.strip(), "\n".join(lines) + err + "\nwanted: " + w)
    check(name + ": nothing at DEST", not os.path.exists(out) and not [
        x for x in os.listdir(tmp) if x.startswith(".ckpt-")])


def bad_inputs(tmp):
    rm = lambda *p: lambda d: os.remove(os.path.join(d, *p))  # noqa: E731
    bad(tmp, "old-4", "missing-rank", rm("model", "rank_2.safetensors"),
        "'%(d)s/model/rank_2.safetensors' is missing (rank files up to "
        "rank_3.safetensors exist)")
    bad(tmp, "old-4", "missing-last-rank", rm("optim", "rank_3.safetensors"),
        "'%(d)s/optim/rank_3.safetensors' is missing (optim/metadata.json "
        "places tensor 'state.transformer.wte.weight.__exp_avg' in it)")
    bad(tmp, "f32-2", "unnamed-file", edit_meta("model", rename_file),
        "'%(d)s/model/rank_7.safetensors' is missing (model/metadata.json "
        "places tensor 'transformer.ln_f.bias' in it)")
    bad(tmp, "f32-2", "no-metadata", rm("model", "metadata.json"),
        "open '%(d)s/model/metadata.json': No such file or directory")
    bad(tmp, "f32-2", "no-train", rm("train", "rank0.pt"),
        "'%(d)s/train/rank0.pt' is missing")
    bad(tmp, "f32-2", "dtype", edit_meta("model", lambda ts: ts[
        "transformer.wte.weight"].update(dtype="I32")),
        "%(d)s/model/rank_0.safetensors: tensor 'transformer.wte.weight' "
        "is F32, model/metadata.json says I32")
    bad(tmp, "f32-2", "size", edit_meta("model", grow_rank0),
        "%(d)s/model/rank_0.safetensors: tensor 'transformer.wte.weight' "
        "holds 416 elements, model/metadata.json places 417 there")
    bad(tmp, "f32-2", "out-of-bounds", edit_meta("model", lambda ts: spec(
        ts["scale"], 1)["flattened_offsets"][0].__setitem__(1, 9)),
        "%(d)s: model/metadata.json: tensor 'scale': rank_1.safetensors: "
        "range [3, 9) outside the tensor's 5 elements")
    bad(tmp, "f32-2", "overlap", edit_meta("model", lambda ts: spec(
        ts["scale"], 1)["flattened_offsets"][0].__setitem__(0, 2)),
        "%(d)s: model/metadata.json: tensor 'scale': elements [2, 3) are "
        "stored in both rank_0.safetensors and rank_1.safetensors")
    bad(tmp, "bf16-3", "gap", edit_meta("optim", lambda ts: spec(
        ts["state.dt_2d.__exp_avg"], 2)["local_shape"].__setitem__(0, 4)),
        "%(d)s: optim/metadata.json: tensor 'state.dt_2d.__exp_avg': "
        "elements [34, 35) are in no file")
    bad(tmp, "f32-2", "truncated", truncate,
        "%(d)s/model/rank_1.safetensors: data section is 9732 bytes, the "
        "header describes 9736")
    bad(tmp, "f32-2", "evil-group", bad_group,
        "%(d)s: optim.pt['param_groups']: pickle global 'posix.system' is not "
        "allowed (use --allow-unsafe-pickle to pass it through)")


# --- run mode ----------------------------------------------------------------

def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def make_run(tmp, r):
    os.makedirs(os.path.join(r, "wandb"))
    with open(os.path.join(r, "config.yaml"), "w") as f:
        f.write("run: test\n")
    for step, case in (("step5", "f32-2"), ("step10", "bf16-3"),
                       ("step20", "old-4"), ("step30", "f32-2")):
        shutil.copytree(os.path.join(tmp, case, "ckpt"), os.path.join(r, step))
    os.makedirs(os.path.join(r, "step5-unsharded"))
    shutil.copy(os.path.join(tmp, "f32-2", "expected", "model.pt"),
                os.path.join(r, "step5-unsharded", "model.pt"))
    os.remove(os.path.join(r, "step20", "config.yaml"))
    os.remove(os.path.join(r, "step30", "optim", "metadata.json"))
    o = os.path.join(r, "step40")
    os.makedirs(o)
    with open(os.path.join(o, "_CHECKPOINT_METADATA"), "w") as f:
        f.write('{"commit_timestamp_nsecs": 1}')
    open(os.path.join(o, "commit_success.txt"), "w").close()


def expected_lines(dest):
    return [
        "skip\tstep5\talready unsharded: step5-unsharded in the run",
        "unshard\tstep10\t%s/step10-unsharded: 4 files, 72 tensors" % dest,
        "unshard\tstep20\t%s/step20-unsharded: 4 files, 64 tensors" % dest,
        "skip\tstep30\tincomplete: optim/metadata.json missing or invalid",
        "error\tstep40\tOrbax step without arrays: no item (manifest.ocdbt, "
        "_METADATA or a legacy msgpack 'checkpoint') holds any",
    ]


def check_run_outputs(name, tmp, dest):
    check(name + ": files", files(dest) == sorted(
        "%s-unsharded/%s" % (s, f) for s in ("step10", "step20")
        for f in ("config.yaml", "model.pt", "optim.pt", "train.pt")),
        str(files(dest)))
    for step, case in (("step10", "bf16-3"), ("step20", "old-4")):
        o = os.path.join(dest, step + "-unsharded")
        if not os.path.isdir(o):
            continue
        for part in ("model", "optim"):
            equal("%s: %s %s.pt" % (name, step, part),
                  cu.safe_load(os.path.join(o, part + ".pt")),
                  torch.load(os.path.join(tmp, case, "expected", part + ".pt")))
        check("%s: %s train.pt" % (name, step), same_bytes(
            os.path.join(o, "train.pt"),
            os.path.join(tmp, case, "ckpt", "train", "rank0.pt")))
    with open(os.path.join(dest, "step20-unsharded", "config.yaml")) as f:
        check(name + ": step20 gets the run's config.yaml", f.read() == "run: test\n")


def run_mode(tmp):
    r = os.path.join(tmp, "runs", "run1")
    make_run(tmp, r)
    before = files(r)
    dest = os.path.join(tmp, "run-out")
    rc, lines, err = unshard(r, dest)
    check("run: exit 1 (orbax)", rc == 1, err)
    check("run: lines", lines == expected_lines(dest), "\n".join(lines))
    check("run: source untouched", files(r) == before)
    check_run_outputs("run", tmp, dest)
    tar = os.path.join(tmp, "run1.tar")
    with tarfile.open(tar, "w") as t:
        t.add(r, arcname="run1")
    zst = os.path.join(tmp, "run1.tar.zst")
    subprocess.run(["zstd", "-q", "-o", zst, tar], check=True)
    for arc in (tar, zst):
        ext = arc[arc.index(".tar"):]
        dest = os.path.join(tmp, "out" + ext)
        rc, lines, err = unshard(arc, dest)
        check(ext + ": exit 1 (orbax)", rc == 1, err)
        want = expected_lines(dest)
        if ext != ".tar":
            # One streaming pass: rows of skipped steps first, then each
            # step as its last member arrives (tarfile stores names sorted).
            # (step40's Orbax error comes when its members are read.)
            done = [ln for ln in want if ln.startswith("unshard\t") or
                    ln.startswith("error\tstep40")]
            want = [ln for ln in want if ln not in done] + done
        check(ext + ": lines", lines == want, "\n".join(lines))
        check_run_outputs(ext, tmp, dest)


def main():
    tmp = tempfile.mkdtemp(prefix="ckpt-olmo-core-")
    try:
        torch.set_num_threads(1)
        for case in moc.CASES:
            moc.write_case(os.path.join(tmp, case), case)
            case_ok(tmp, case)
        bad_inputs(tmp)
        run_mode(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failures" % len(failures))
    if not checks[0]:
        print("FAIL no check ran")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
